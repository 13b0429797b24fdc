"""`companion predict` tiers (fitted, calibrated, prior) and `companion plan`: the tier is always stated and
never silently upgraded or downgraded; bad input gets one line."""

import json

import numpy as np
import pytest

from companion.energy import opmodel
from companion.energy.models import fit_operator
from companion.energy.predict import (_halfwidths_per_plan, make_plan, pareto_front, plan_layouts, plan_rows,
                                     predict_tiered, resolve_tier)
from companion.errors import ConfigError
from companion.runs.records import write_json
from conftest import companion_cmd
from test_opmodel import frame

PLAN = dict(model="bert-base", seq_len=128, batch_size=32, examples=100000, epochs=3, device="H100", devices=8,
            tp=2, dp=4)


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """A derived/ folder with an H100 operator fit (from runs the model generated), and an empty devices/."""
    root = tmp_path_factory.mktemp("data")
    dev = opmodel.roofs_from_spec("H100", "bf16")
    df = frame(noise=0.02).assign(precision="bf16", device_name="H100", eta=1.0)
    df["metered_units"] = df.world_size.astype(float)
    art = {"device_name": "H100", "n_runs": len(df), **fit_operator(df.assign(eta=np.nan), dev)}
    write_json(root / "derived" / "h100-sweep" / "fit.json", art)
    (root / "devices").mkdir()
    return root / "derived", root / "devices"


def test_prior_tier_without_any_local_data(tmp_path):
    p = predict_tiered(make_plan(**PLAN), derived_root=tmp_path, devices_root=tmp_path)
    assert p["tier"] == "prior" and 0 < p["eta"] < 1
    for key in ("energy_kwh", "time_h", "co2_kg"):
        lo, hi = p[f"{key}_interval"]
        assert lo < p[key] < hi and hi / lo >= 3  # wide, as a prior must be


def test_best_tier_by_default_and_never_silently_changed(roots):
    derived, devices = roots
    assert predict_tiered(make_plan(**PLAN), derived_root=derived, devices_root=devices)["tier"] == "fitted"
    assert predict_tiered(make_plan(**PLAN), tier="prior", derived_root=derived, devices_root=devices)["tier"] == "prior"
    with pytest.raises(ConfigError, match="tier='calibrated' needs data/devices/H100.json"):
        predict_tiered(make_plan(**PLAN), tier="calibrated", derived_root=derived, devices_root=devices)
    with pytest.raises(ConfigError, match="tier='fitted' needs a sweep fitted on 'A100'"):
        predict_tiered(make_plan(**{**PLAN, "device": "A100"}), tier="fitted", derived_root=derived, devices_root=devices)


def test_the_fitted_tier_widens_a_plan_s_interval_with_its_share_of_overheads(roots):
    """The fit stores held-out errors divided by each run's interval scale; `companion predict` multiplies a
    plan's width by the plan's own: a plan that is mostly collectives and overheads gets a wider interval than
    one that is mostly GEMMs, whatever both are new in."""
    derived, devices = roots
    op = json.loads((derived / "h100-sweep" / "fit.json").read_text())["operator_model"]
    assert op["residuals_scaled"] is True
    res = resolve_tier("H100", "bf16", None, derived, devices)
    # one GPU at 128k tokens a step: GEMMs and attention; 8 GPUs at 256 tokens: collectives and overheads
    for plan, scale in ((make_plan(**{**PLAN, "devices": 1, "tp": 1, "dp": 1, "batch_size": 256, "seq_len": 512}), 1.0),
                        (make_plan(**{**PLAN, "batch_size": 8, "seq_len": 32}), 1 + opmodel.INTERVAL_OVERHEAD_WEIGHT)):
        p = predict_tiered(plan, derived_root=derived, devices_root=devices)
        novelty = _halfwidths_per_plan(res, plan_rows([plan], "bf16", "device"), 0.9)[0]  # the stored errors' width
        for key, target in (("time_h", "step_s"), ("energy_kwh", "energy_per_step_j")):
            assert np.log(p[f"{key}_interval"][1] / p[key]) == pytest.approx(novelty[target] * scale)


def test_calibrated_tier_reads_the_calibration_file(roots, tmp_path):
    derived, _ = roots
    cal = {"device_name": "H100", "device": "cuda", "gemm": {"peak_flops_per_s": 6e14, "half_dim": 100.0},
           "bandwidth": {"bandwidth_bytes_per_s": 3e12}, "launch": {"launch_s": 4e-6},
           "collectives": {"2": {"alpha_s": 1e-5, "beta_bytes_per_s": 1e11}}, "power": {"idle_w": 100, "loaded_w": 600,
                                                                                         "measured": True},
           "shared_node": False, "overlap": True, "provenance": {"measured_at": "now"}}
    write_json(tmp_path / "H100.json", cal)
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", derived_root=derived, devices_root=tmp_path)
    assert p["tier"] == "calibrated" and p["energy_measured_basis"] and p["source"].endswith("H100.json")


def test_plan_ranks_layouts_and_marks_the_pareto_front(tmp_path):
    req = {k: v for k, v in PLAN.items() if k not in ("devices", "tp", "dp", "batch_size")}
    out = plan_layouts(8, (16, 32, 64), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert out["tier"] == "prior" and {(r["tp"], r["dp"]) for r in out["layouts"]} == {(1, 8), (2, 4), (4, 2)}
    assert out["seq_len"] == PLAN.get("seq_len", 128) and out["precision"] == "bf16"  # what was planned, said
    energies = [r["energy_kwh"] for r in out["layouts"]]
    assert energies == sorted(energies)
    front = out["pareto_front"]
    for r in out["layouts"]:
        assert r["pareto"] == (r in front)
        assert not any(f["energy_kwh"] < r["energy_kwh"] and f["time_h"] < r["time_h"] for f in front if r["pareto"])


def test_plan_says_which_layouts_no_batch_size_splits(tmp_path):
    req = {k: v for k, v in PLAN.items() if k not in ("devices", "tp", "dp", "batch_size")}
    out = plan_layouts(3, (16, 32), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert {(r["tp"], r["dp"]) for r in out["layouts"]} == {(3, 1)}  # bert-base: 12 heads split three ways
    assert [n for n in out["notes"] if n.startswith("tp1-dp3 left out")] and "multiples of 3" in out["notes"][-1]
    out = plan_layouts(3, (12, 24), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert {(r["tp"], r["dp"]) for r in out["layouts"]} == {(1, 3), (3, 1)}
    assert not any("left out" in n for n in out["notes"])


def test_pareto_front():
    assert pareto_front([1, 2, 3, 2], [3, 2, 1, 3]) == [0, 1, 2]


@pytest.mark.parametrize("argv, field", [
    (["predict", "--model", "bert-base", "--examples", "10", "--device", "H100", "--tier", "gold"], "--tier"),
    (["predict", "--model", "bert-base", "--examples", "10", "--device", "H100", "--devices", "3", "--tp", "2"], "--devices"),
    (["predict", "--model", "bert-base", "--examples", "10", "--device", "H100", "--level", "1.5"], "level"),
    (["plan", "--model", "bert-base", "--examples", "10", "--device", "H100", "--devices", "8", "--batch-sizes", "a,b"],
     "batch_sizes"),
    (["plan", "--model", "bert-base", "--examples", "10", "--device", "Z80", "--devices", "8"], "device 'Z80'"),
    (["calibrate", "--device", "tpu"], "device='tpu'"),
])
def test_bad_input_is_one_line_naming_the_field(argv, field):
    res = companion_cmd(*argv)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and field in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr


def test_the_issue_command_answers_with_its_tier():
    res = companion_cmd("predict", *"--model bert-base --seq-len 128 --batch-size 32 --examples 100000 --epochs 3 "
                        "--device H100 --devices 8 --tp 2 --dp 4 --json".split())
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["tier"] in ("fitted", "calibrated", "prior")
    assert {"energy_kwh_interval", "time_h_interval", "co2_kg_interval"} <= set(out)
