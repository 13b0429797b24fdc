"""Plans' inputs that used to give silently odd answers: repeated batch sizes, a board without bf16, profiles
with a key given twice, device names in another spelling, an output folder that is a file."""

from __future__ import annotations

import pytest

from companion.energy.predict import make_plan, plan_layouts, predict_tiered
from companion.errors import ConfigError
from companion.runs.profiles import load_profile
from companion.runs.provenance import canonical_device_name
from conftest import companion_cmd


def test_repeated_batch_sizes_are_planned_once(tmp_path):
    req = dict(model="bert-base", examples=10000, device="H100", derived_root=tmp_path, devices_root=tmp_path)
    once = plan_layouts(8, [16], **req)
    twice = plan_layouts(8, [16, 16], **req)
    assert len(twice["layouts"]) == len(once["layouts"])


def test_a_board_without_bf16_defaults_to_fp32_and_says_so(tmp_path):
    p = predict_tiered(
        make_plan(model="bert-base", examples=10000, device="V100"),
        derived_root=tmp_path,
        devices_root=tmp_path,
    )
    assert p["plan"]["precision"] == "fp32" and any("V100 has no bf16" in n for n in p["notes"])
    assert (
        predict_tiered(
            make_plan(model="bert-base", examples=10000, device="H100"),
            derived_root=tmp_path,
            devices_root=tmp_path,
        )["plan"]["precision"]
        == "bf16"
    )


def test_bf16_asked_of_a_board_without_it_is_priced_at_its_fp16_peak_and_says_so(tmp_path):
    roots = dict(derived_root=tmp_path, devices_root=tmp_path)
    v100 = predict_tiered(
        make_plan(model="bert-base", examples=10000, device="V100", precision="bf16"), **roots
    )
    said = [n for n in v100["notes"] if "V100 has no bf16" in n]
    assert len(said) == 1 and "fp16 tensor cores' peak (125 TFLOP/s)" in said[0]
    h100 = predict_tiered(
        make_plan(model="bert-base", examples=10000, device="H100", precision="bf16"), **roots
    )
    assert not any("has no bf16" in n for n in h100["notes"])


def test_a_profile_with_a_key_given_twice_is_refused_naming_it(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(
        "description: x\ndevice: cpu\nbase:\n  layers: 2\n  hidden: 64\n  layers: 4\n"
        "groups:\n  - name: a\n    vary: {seq_len: [16]}\n"
    )
    with pytest.raises(ConfigError, match=r"line 6.*key 'layers' given twice \(first at line 4\)"):
        load_profile(str(path), "cpu")


@pytest.mark.parametrize(
    "given,canonical",
    [
        ("h100", "H100"),
        ("H100 pcie", "H100-PCIe"),
        ("h200_nvl", "H200-NVL"),
        ("CPU", "cpu"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("myhost", "myhost"),
    ],
)
def test_device_names_are_spelled_as_the_table_spells_them(given, canonical):
    assert canonical_device_name(given) == canonical


def test_a_device_name_enters_canonical_everywhere(tmp_path):
    assert make_plan(model="bert-base", examples=1000, device="h100").device_name == "H100"
    profile = load_profile("ci", device_name="h100")
    assert {r.device_name for r in profile.runs} == {"H100"} and all(
        "@H100-" in r.run_id for r in profile.runs
    )


def test_emit_dir_that_is_a_file_is_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    res = companion_cmd("sweep", "--profile", "ci", "--emit", "torchrun", "--emit-dir", str(afile))
    assert res.returncode == 2 and res.stderr.startswith(f"error: --emit-dir {afile} is a file, not a folder")
    assert res.stderr.count("\n") == 1 and not (afile.parent / "plans").exists()
