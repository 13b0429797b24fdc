"""`companion predict` tiers (fitted, calibrated, prior) and `companion plan`: the tier is always stated and
never silently upgraded or downgraded; bad input gets one line."""

import json

import numpy as np
import pytest

from companion.energy import intervals

from companion.energy import opmodel
from companion.energy.models import OperatorRoofline, fit_operator, fit_point
from companion.energy.predict import (
    _halfwidths_per_plan,
    make_plan,
    pareto_front,
    plan_layouts,
    plan_rows,
    TIER_TEXT,
    predict_tiered,
    resolve_tier,
    tier_point,
)
from companion.errors import ConfigError
from companion.runs.records import write_json
from conftest import companion_cmd
from test_opmodel import frame

PLAN = dict(
    model="bert-base",
    seq_len=128,
    batch_size=32,
    examples=100000,
    epochs=3,
    device="H100",
    devices=8,
    tp=2,
    dp=4,
)


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
    assert (
        predict_tiered(make_plan(**PLAN), tier="prior", derived_root=derived, devices_root=devices)["tier"]
        == "prior"
    )
    with pytest.raises(ConfigError, match="tier='calibrated' needs data/devices/H100.json"):
        predict_tiered(make_plan(**PLAN), tier="calibrated", derived_root=derived, devices_root=devices)
    with pytest.raises(ConfigError, match="tier='fitted' needs a sweep fitted on 'A100'"):
        predict_tiered(
            make_plan(**{**PLAN, "device": "A100"}), tier="fitted", derived_root=derived, devices_root=devices
        )


def test_the_fitted_tier_widens_a_plan_s_interval_with_its_share_of_overheads(roots):
    """The fit stores held-out errors divided by each run's interval scale; `companion predict` multiplies a
    plan's width by the plan's own: a plan that is mostly collectives and overheads gets a wider interval than
    one that is mostly GEMMs, whatever both are new in."""
    derived, devices = roots
    op = json.loads((derived / "h100-sweep" / "fit.json").read_text())["operator_model"]
    assert op["residuals_scaled"] is True
    res = resolve_tier("H100", "bf16", None, derived, devices)
    # one GPU at 128k tokens a step: GEMMs and attention; 8 GPUs at 256 tokens: collectives and overheads
    point = tier_point(res)
    scales = []
    for plan in (
        make_plan(**{**PLAN, "devices": 1, "tp": 1, "dp": 1, "batch_size": 256, "seq_len": 512}),
        make_plan(**{**PLAN, "batch_size": 8, "seq_len": 32}),
    ):
        p = predict_tiered(plan, derived_root=derived, devices_root=devices)
        X = plan_rows([plan], "bf16", "device")
        novelty = _halfwidths_per_plan(res, X, 0.9)[0]  # the stored errors' width
        scale = point.interval_scale(X)[0]
        for key, target in (("time_h", "step_s"), ("energy_kwh", "energy_per_step_j")):
            assert np.log(p[f"{key}_interval"][1] / p[key]) == pytest.approx(novelty[target] * scale)
        scales.append(scale)
    assert 1.0 <= scales[0] < scales[1] == pytest.approx(1 + intervals.INTERVAL_OVERHEAD_WEIGHT)


def test_calibrated_tier_reads_the_calibration_file(roots, tmp_path):
    derived, _ = roots
    cal = {
        "device_name": "H100",
        "device": "cuda",
        "gemm": {"peak_flops_per_s": 6e14, "half_dim": 100.0},
        "bandwidth": {"bandwidth_bytes_per_s": 3e12},
        "launch": {"launch_s": 4e-6},
        "collectives": {"2": {"alpha_s": 1e-5, "beta_bytes_per_s": 1e11}},
        "power": {"idle_w": 100, "loaded_w": 600, "measured": True},
        "shared_node": False,
        "overlap": True,
        "provenance": {"measured_at": "now"},
    }
    write_json(tmp_path / "H100.json", cal)
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", derived_root=derived, devices_root=tmp_path)
    assert p["tier"] == "calibrated" and p["energy_measured_basis"] and p["source"].endswith("H100.json")


def test_plan_ranks_layouts_and_marks_the_pareto_front(tmp_path):
    req = {k: v for k, v in PLAN.items() if k not in ("devices", "tp", "dp", "batch_size")}
    out = plan_layouts(8, (16, 32, 64), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert out["tier"] == "prior" and {(r["tp"], r["dp"]) for r in out["layouts"]} == {(1, 8), (2, 4), (4, 2)}
    assert out["seq_len"] == PLAN.get("seq_len", 128) and out["precision"] == "bf16"  # what was planned, said
    # each row is what `companion predict` gives for that layout and batch size
    for r in out["layouts"]:
        alone = predict_tiered(
            make_plan(**{**req, "devices": 8, "tp": r["tp"], "dp": r["dp"], "batch_size": r["batch_size"]}),
            derived_root=tmp_path,
            devices_root=tmp_path,
        )
        assert (r["energy_kwh"], r["time_h"]) == pytest.approx((alone["energy_kwh"], alone["time_h"]))
    assert len(out["layouts"]) == 9  # three layouts x three batch sizes
    energies = [r["energy_kwh"] for r in out["layouts"]]
    assert energies == sorted(energies)
    # the front: no layout beats one of its members on both energy and time; every other layout is beaten so
    front, rest = [r for r in out["layouts"] if r["pareto"]], [r for r in out["layouts"] if not r["pareto"]]
    assert front == out["pareto_front"] and front and rest
    beats = lambda a, b: a["energy_kwh"] <= b["energy_kwh"] and a["time_h"] <= b["time_h"] and a != b  # noqa: E731
    assert not any(beats(a, f) for f in front for a in out["layouts"])
    assert all(any(beats(f, r) for f in front) for r in rest)
    # the table's columns line up whatever the intervals' digits: the header and every row end together
    from companion.energy.predict import format_plan

    out["layouts"][0].update(energy_kwh=0.0005498, energy_kwh_interval=[0.000437, 0.000692])  # 30 characters
    out["layouts"][1].update(energy_kwh=1.0, energy_kwh_interval=[0.5, 2.0])
    table = format_plan(out).splitlines()[1 : 2 + len(out["layouts"])]
    assert len({len(line) for line in table}) == 1, table


def test_plan_says_which_layouts_no_batch_size_splits(tmp_path):
    req = {k: v for k, v in PLAN.items() if k not in ("devices", "tp", "dp", "batch_size")}
    out = plan_layouts(3, (16, 32), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert {(r["tp"], r["dp"]) for r in out["layouts"]} == {(3, 1)}  # bert-base: 12 heads split three ways
    (said,) = [n for n in out["notes"] if n.startswith("tp1-dp3 left out")]
    assert "multiples of 3" in said
    out = plan_layouts(3, (12, 24), derived_root=tmp_path, devices_root=tmp_path, **req)
    assert {(r["tp"], r["dp"]) for r in out["layouts"]} == {(1, 3), (3, 1)}
    assert not any("left out" in n for n in out["notes"])


def test_pareto_front():
    assert pareto_front([1, 2, 3, 2], [3, 2, 1, 3]) == [0, 1, 2]


@pytest.mark.parametrize(
    "argv, field",
    [
        (
            ["predict", "--model", "bert-base", "--examples", "10", "--device", "H100", "--tier", "gold"],
            "--tier",
        ),
        (
            [
                "predict",
                "--model",
                "bert-base",
                "--examples",
                "10",
                "--device",
                "H100",
                "--devices",
                "3",
                "--tp",
                "2",
            ],
            "--devices",
        ),
        (
            ["predict", "--model", "bert-base", "--examples", "10", "--device", "H100", "--level", "1.5"],
            "level",
        ),
        (
            [
                "plan",
                "--model",
                "bert-base",
                "--examples",
                "10",
                "--device",
                "H100",
                "--devices",
                "8",
                "--batch-sizes",
                "a,b",
            ],
            "batch_sizes",
        ),
        (
            ["plan", "--model", "bert-base", "--examples", "10", "--device", "Z80", "--devices", "8"],
            "device 'Z80'",
        ),
        (["calibrate", "--device", "tpu"], "device='tpu'"),
        (["calibrate", "--budget-s", "nan"], "budget_s=nan"),
        (["calibrate", "--budget-s", "inf"], "budget_s=inf"),
        (["calibrate", "--device-name", "x/../../y"], "device_name='x/../../y'"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(argv, field):
    res = companion_cmd(*argv)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and field in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr


def test_bad_input_to_calibrate_is_said_before_torch_is_imported():
    """Every argument of `companion calibrate` is checked before the benchmarks' module (and torch, seconds of
    imports) is loaded: a typo costs a fraction of a second."""
    import subprocess
    import sys

    for argv in (
        ["--executions", "cudagraphs"],
        ["--budget-s", "0"],
        ["--device", "cpu", "--device-name", "H100"],
    ):
        res = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "companion.cli", "calibrate", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2, res.stderr[-2000:]
        said = [line for line in res.stderr.splitlines() if not line.startswith("import time:")]
        assert len(said) == 1 and said[0].startswith("error: "), said
        imported = {
            line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")
        }
        assert "torch" not in imported and "companion.runs.calibrate" not in imported


def test_the_issue_command_answers_with_its_tier(tmp_path):
    """From a data root with nothing for the H100 the answer is the prior tier; with a calibration file, the
    calibrated tier: the command says which, and each quantity comes with an interval around it."""
    import os

    args = (
        "predict",
        *"--model bert-base --seq-len 128 --batch-size 32 --examples 100000 --epochs 3 --device H100 "
        "--devices 8 --tp 2 --dp 4 --json".split(),
    )
    env = {**os.environ, "COMPANION_ROOT": str(tmp_path)}
    # an own reference folder for the H100, empty: the checkout's shipped H100 calibration is not read
    (tmp_path / "data" / "reference" / "H100").mkdir(parents=True)
    for tier in ("prior", "calibrated"):
        if tier == "calibrated":
            write_json(tmp_path / "data" / "devices" / "H100.json", H100_CAL)
        res = companion_cmd(*args, env=env)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["tier"] == tier and out["tier_means"] == TIER_TEXT[tier]
        for key in ("energy_kwh", "time_h", "co2_kg"):
            lo, hi = out[f"{key}_interval"]
            assert 0 < lo < out[key] < hi


def test_the_fitted_tier_predicts_with_the_model_the_fit_validated(tmp_path):
    """On a shared CPU node the fit chooses the thread exponent along with the multipliers; the fitted tier must
    predict with that exponent, not the calibration's, or it would be a model no validation scored."""
    from test_opmodel import DEV

    df = frame().assign(device_name="cpu", eta=np.nan)  # generated with DEV's thread exponent, 0.625
    calibration = opmodel.DeviceRoofs(**{**DEV.to_json(), "thread_exponent": 1.0})
    art = {"device_name": "cpu", "n_runs": len(df), **fit_operator(df, calibration)}
    write_json(tmp_path / "derived" / "cpu" / "fit.json", art)
    point = fit_point(OperatorRoofline("operator_roofline", dev=calibration), df)
    assert point.dev.thread_exponent == DEV.thread_exponent
    res = resolve_tier("cpu", "fp32", "fitted", tmp_path / "derived", tmp_path)
    t, e = tier_point(res).predict(df)
    t_point, e_point = point.predict(df)
    np.testing.assert_allclose(t, t_point, rtol=1e-9)
    np.testing.assert_allclose(e, e_point, rtol=1e-9)
    np.testing.assert_allclose(t, df.step_s, rtol=1e-6)  # noise-free runs: the generating model, recovered


def _h100_fit(root, precision, energy_kind="measured", residuals=False):
    dev = opmodel.roofs_from_spec("H100", "bf16")
    df = frame(noise=0.02).assign(precision="bf16", device_name="H100", eta=np.nan)
    df["metered_units"] = df.world_size.astype(float)
    art = {
        "device_name": "H100",
        "n_runs": len(df),
        "precision": precision,
        "energy_kind": energy_kind,
        **fit_operator(df, dev),
    }
    if residuals:
        art["calibrated_tier_residuals"] = {"step_s": [0.01] * 20, "energy_per_step_j": [0.02] * 20}
    write_json(root / "derived" / "h100" / "fit.json", art)


H100_CAL = {
    "device_name": "H100",
    "device": "cuda",
    "dtype": "bfloat16",
    "gemm": {"peak_flops_per_s": 6e14, "half_dim": 100.0},
    "bandwidth": {"bandwidth_bytes_per_s": 3e12},
    "launch": {"launch_s": 4e-6},
    "collectives": {"2": {"alpha_s": 1e-5, "beta_bytes_per_s": 1e11}},
    "power": {"idle_w": 100, "loaded_w": 600, "measured": True},
    "shared_node": False,
    "overlap": True,
    "provenance": {"measured_at": "now"},
}


def test_a_tier_made_at_another_precision_is_passed_over_and_says_why(tmp_path):
    """A bf16 fit or calibration has a bf16 GEMM roof and bf16 bytes: an fp32 plan gets the prior tier, with a
    note for each better tier it passed over; named, the tier is refused with the fix."""
    _h100_fit(tmp_path, ["bf16"])
    write_json(tmp_path / "devices" / "H100.json", H100_CAL)
    roots = dict(derived_root=tmp_path / "derived", devices_root=tmp_path / "devices")
    assert predict_tiered(make_plan(**PLAN, precision="bf16"), **roots)["tier"] == "fitted"
    p = predict_tiered(make_plan(**PLAN, precision="fp32"), **roots)
    assert p["tier"] == "prior"
    assert [n.split(":")[0] for n in p["notes"][:2]] == ["fitted tier not used", "calibrated tier not used"]
    assert all("made at bf16, not fp32" in n for n in p["notes"][:2])
    with pytest.raises(ConfigError, match="made at bf16, not fp32; use --precision bf16"):
        predict_tiered(make_plan(**PLAN, precision="fp32"), tier="fitted", **roots)
    with pytest.raises(ConfigError, match="made at bf16, not fp32; calibrate at fp32"):
        predict_tiered(make_plan(**PLAN, precision="fp32"), tier="calibrated", **roots)


def test_the_fitted_tier_labels_its_energy_as_the_sweep_had_it(tmp_path):
    """The fitted tier's energy coefficients come from the sweep's energies: an estimated sweep gives an
    estimated basis even where the calibration's power was measured."""
    _h100_fit(tmp_path, ["bf16"], energy_kind="estimated")
    write_json(tmp_path / "devices" / "H100.json", H100_CAL)
    roots = dict(derived_root=tmp_path / "derived", devices_root=tmp_path / "devices")
    assert predict_tiered(make_plan(**PLAN), **roots)["energy_measured_basis"] is False
    assert predict_tiered(make_plan(**PLAN), tier="calibrated", **roots)["energy_measured_basis"] is True


def test_the_calibrated_tier_takes_its_interval_from_its_own_device_s_sweep_first(tmp_path):
    roots = dict(derived_root=tmp_path / "derived", devices_root=tmp_path / "devices")
    write_json(tmp_path / "devices" / "H100.json", H100_CAL)
    cpu = {
        "device_name": "cpu",
        "n_runs": 3,
        "calibrated_tier_residuals": {"step_s": [0.5] * 20, "energy_per_step_j": [0.5] * 20},
    }
    write_json(tmp_path / "derived" / "cpu" / "fit.json", cpu)
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", **roots)
    # a CPU node's errors say nothing of a GPU's: not borrowed; the stated width instead
    assert "not scored on a sweep of H100 runs" in p["notes"][0]
    wide = np.log(p["time_h_interval"][1] / p["time_h"])
    _h100_fit(tmp_path, ["bf16"], residuals=True)
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", **roots)
    assert p["notes"][0].endswith("on the H100 sweep's runs")
    assert np.log(p["time_h_interval"][1] / p["time_h"]) < wide


def test_a_stated_prior_width_follows_the_level_asked_for(tmp_path):
    """The prior tier's factor-2 interval is stated at 90 %; a 50 % or 99 % interval is not the same interval
    relabelled, but the log-normal one at that level."""
    from statistics import NormalDist

    widths = {}
    for level in (0.5, 0.9, 0.99):
        p = predict_tiered(make_plan(**PLAN), level=level, derived_root=tmp_path, devices_root=tmp_path)
        widths[level] = np.log(p["energy_kwh_interval"][1] / p["energy_kwh"])
    assert widths[0.9] == pytest.approx(np.log(2.0))
    z = NormalDist().inv_cdf
    for level in (0.5, 0.99):
        assert widths[level] == pytest.approx(np.log(2.0) * z((1 + level) / 2) / z(0.95))
    assert widths[0.5] < widths[0.9] < widths[0.99]


def test_a_plan_above_the_fitted_flops_per_step_is_new_in_scale(tmp_path):
    """`companion predict` counts a plan's FLOPs as the sweep's runs are counted, so a plan above every fitted
    run's FLOPs per step takes the width of the largest runs left out, as validation scored it."""
    from companion.energy import proxies
    from companion.energy.models import interval_model

    dev = opmodel.roofs_from_spec("H100", "bf16")
    df = frame(noise=0.02).assign(precision="bf16", device_name="H100", eta=np.nan)
    df["metered_units"] = df.world_size.astype(float)
    df["flops_per_step"] = [
        proxies.flops_per_step(
            proxies.StepShape(
                r.layers,
                r.hidden,
                r.heads,
                r.ffn,
                r.vocab,
                r.max_positions,
                r.num_labels,
                r.batch_size,
                r.padded_tokens,
                r.attention_pairs,
                r.tp,
                r.dp,
                r.precision,
            )
        )
        for r in df.itertuples()
    ]
    write_json(
        tmp_path / "derived" / "s" / "fit.json",
        {"device_name": "H100", "n_runs": len(df), **fit_operator(df, dev)},
    )
    (tmp_path / "devices").mkdir()
    res = resolve_tier("H100", "bf16", None, tmp_path / "derived", tmp_path / "devices")
    assert res["train_keys"]["scale"] == pytest.approx(df.flops_per_step.max())
    stub = interval_model(res["residuals"], res["residuals_by_kind"], res["train_keys"])
    fitted_shape = dict(
        layers=2,
        hidden=128,
        heads=4,
        seq_len=64,
        batch_size=4,
        examples=1000,
        epochs=1,
        device="H100",
        devices=1,
        tp=1,
        dp=1,
    )
    for plan, new in ((make_plan(**PLAN), True), (make_plan(**fitted_shape), False)):
        rows = plan_rows([plan], "bf16", "device")
        assert ("scale" in stub.novelty(rows)[0]) is new
        widths = _halfwidths_per_plan(res, rows, 0.9)[0]
        assert widths == {t: stub.halfwidth(t, 0.9, stub.novelty(rows)[0]) for t in widths}
    # a frame without the FLOPs the fit was keyed on is refused, not silently narrowed
    with pytest.raises(ValueError, match="flops_per_step"):
        stub.novelty(plan_rows([make_plan(**PLAN)], "bf16", "device").drop(columns="flops_per_step"))


def test_a_level_beyond_what_the_held_out_errors_can_say_is_noted(roots):
    """With n held-out errors of a novelty, a level above n / (n + 1) has no conformal quantile: the fitted tier
    then takes the largest error as the width and says so, naming the novelty and how many errors it has."""
    from companion.energy.models import GROUP_KINDS, OFF_GRID, interval_model
    from companion.energy.predict import NOVELTY_WORDS

    assert set(NOVELTY_WORDS) == {*GROUP_KINDS, OFF_GRID}  # every kind in words
    derived, devices = roots
    plan = make_plan(**PLAN)
    res = resolve_tier("H100", "bf16", None, derived, devices)
    kinds = interval_model(res["residuals"], res["residuals_by_kind"], res["train_keys"]).novelty(
        plan_rows([plan], "bf16", "device")
    )[0]
    counts = {k: len(res["residuals_by_kind"][k]["step_s"]) for k in kinds if k in res["residuals_by_kind"]}
    assert counts  # the plan is new in something the fit left out
    few = 1 - 1 / (max(counts.values()) + 2)  # above n / (n + 1) for every such kind
    got = predict_tiered(plan, level=few, derived_root=derived, devices_root=devices)
    (note,) = [n for n in got["notes"] if n.startswith("too few held-out errors")]
    assert all(f"{n} {NOVELTY_WORDS[k]}" in note for k, n in counts.items()), note
    plain = predict_tiered(plan, level=0.5, derived_root=derived, devices_root=devices)
    assert not [n for n in plain["notes"] if n.startswith("too few")]


def test_the_calibrated_tier_at_a_level_its_errors_cannot_give_takes_the_largest_and_says_so(tmp_path):
    """The calibrated tier's width is conformal over its errors on a sweep's runs: with 20 of them a 99.9 %
    interval has no quantile. It takes the largest error, as the fitted tier's kinds do, with the same note,
    instead of an interval from zero to infinity."""
    roots = dict(derived_root=tmp_path / "derived", devices_root=tmp_path / "devices")
    write_json(tmp_path / "devices" / "H100.json", H100_CAL)
    errors = list(np.linspace(0.05, 0.4, 20))
    write_json(
        tmp_path / "derived" / "h100" / "fit.json",
        {
            "device_name": "H100",
            "n_runs": 20,
            "calibrated_tier_residuals": {"step_s": errors, "energy_per_step_j": errors},
        },
    )
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", level=0.999, **roots)
    assert np.log(p["time_h_interval"][1] / p["time_h"]) == pytest.approx(0.4)
    assert np.isfinite(p["energy_kwh_interval"][1]) and p["energy_kwh_interval"][0] > 0
    assert any(n.startswith("too few held-out errors for a 99.9% interval (20)") for n in p["notes"])
    p = predict_tiered(make_plan(**PLAN), tier="calibrated", level=0.9, **roots)
    assert not any(n.startswith("too few") for n in p["notes"])
