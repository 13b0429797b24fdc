"""Plans' inputs that used to give silently odd answers: repeated batch sizes, a board without bf16, profiles
with a key given twice."""

from __future__ import annotations

import pytest

from companion.energy.predict import make_plan, plan_layouts, predict_tiered
from companion.errors import ConfigError
from companion.runs.profiles import load_profile


def test_repeated_batch_sizes_are_planned_once(tmp_path):
    req = dict(model="bert-base", examples=10000, device="H100", derived_root=tmp_path, devices_root=tmp_path)
    once = plan_layouts(8, [16], **req)
    twice = plan_layouts(8, [16, 16], **req)
    assert len(twice["layouts"]) == len(once["layouts"])


def test_a_board_without_bf16_defaults_to_fp32_and_says_so(tmp_path):
    p = predict_tiered(make_plan(model="bert-base", examples=10000, device="V100"), derived_root=tmp_path,
                       devices_root=tmp_path)
    assert p["plan"]["precision"] == "fp32" and any("V100 has no bf16" in n for n in p["notes"])
    assert predict_tiered(make_plan(model="bert-base", examples=10000, device="H100"), derived_root=tmp_path,
                          devices_root=tmp_path)["plan"]["precision"] == "bf16"


def test_a_profile_with_a_key_given_twice_is_refused_naming_it(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("description: x\ndevice: cpu\nbase:\n  layers: 2\n  hidden: 64\n  layers: 4\n"
                    "groups:\n  - name: a\n    vary: {seq_len: [16]}\n")
    with pytest.raises(ConfigError, match=r"line 6.*key 'layers' given twice \(first at line 4\)"):
        load_profile(str(path), "cpu")
