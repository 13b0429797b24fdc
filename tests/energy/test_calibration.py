"""Calibration files: one loader, checks that flag implausible quantities, one-line refusals, fallbacks said."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from companion.energy import opmodel
from companion.energy.calibration import (
    CalibrationError,
    check_calibration,
    load_calibration,
    read_calibration,
)
from companion.energy.predict import make_plan, predict_tiered
from companion.paths import reference_dir

H200 = reference_dir("H200") / "H200.json"
PLAN = dict(model="bert-base", seq_len=128, batch_size=32, examples=10000, epochs=1, device="H200")


def _cpu_cal() -> dict:
    """A CPU calibration shaped like a healthy one (GEMM timings that follow a roof of 2.5e11 FLOP/s)."""
    shapes = []
    for m in (256, 1024, 4096):
        for n, k in ((64, 64), (256, 256), (1024, 256)):
            rate = 2.5e11 / (1 + 25 * (1 / m + 1 / n + 1 / k))
            shapes.append({"m": m, "n": n, "k": k, "time_s": 2 * m * n * k / rate, "flops_per_s": rate})
    return {
        "device_name": "cpu",
        "device": "cpu",
        "dtype": "float32",
        "gemm": {"peak_flops_per_s": 2.5e11, "half_dim": 25.0, "shapes": shapes},
        "bandwidth": {"bandwidth_bytes_per_s": 4e10},
        "launch": {"launch_s": 3e-6},
        "elementwise": {"bytes": 1e7, "bytes_per_s": 4e9},
        "optimizer": {"parameters": 2e6, "bytes_per_s": 2e10},
        "power": {"idle_w": 20.0, "loaded_w": 30.0, "measured": False},
        "shared_node": True,
        "provenance": {"torch_threads": 2, "cpu_count": 2, "hostname": "vm", "cpu_model": "AMD EPYC"},
    }


def _write(tmp_path, rec, name="cpu.json"):
    path = tmp_path / name
    path.write_text(json.dumps(rec) if not isinstance(rec, str) else rec)
    return path


def test_a_healthy_calibration_passes_and_the_shipped_h200_one_is_flagged_where_launch_bound():
    assert check_calibration(_cpu_cal()) == {}
    flagged = check_calibration(read_calibration(H200))
    # its GEMMs, element-wise, optimizer and attention benchmarks ran at CPU sizes: kernel launches, not roofs
    assert set(flagged) == {"gemm", "elementwise", "optimizer", "attention"}
    assert any("datasheet" in p for p in flagged["gemm"])
    cal = load_calibration(H200, "H200", "bf16")
    prior = opmodel.roofs_from_spec("H200", "bf16")
    assert cal.roofs.gemm_peak_flops_per_s == prior.gemm_peak_flops_per_s  # the datasheet took its place
    assert cal.roofs.bandwidth_bytes_per_s == pytest.approx(4.14e12, rel=0.01)  # the copy passed: kept
    # and its collectives, which a machine with one GPU cannot time, are the datasheet's too (said per plan)
    assert set(cal.roofs.fallbacks) == {*flagged, "collectives"} and len(cal.warnings) == len(flagged)


def test_the_optimizer_is_checked_against_a_copy_of_its_own_bytes_where_it_timed_one():
    """A fused AdamW over a working set a CPU's cache holds outruns the bandwidth benchmark's copy: with the copy
    of its own bytes timed beside it, its moved bytes are held to that copy; a file without one keeps the
    copy bandwidth as its yardstick."""
    rec = _cpu_cal()
    rec["optimizer"] = {"parameters": 2e6, "bytes_per_s": 7e10}  # 1.75 x the 4e10 copy bandwidth
    assert (
        "optimizer rate 7e+10 B/s exceeds 1.5x the copy bandwidth" in check_calibration(rec)["optimizer"][0]
    )
    rec["optimizer"].update(moved_bytes_per_s=7e10 * 28 / 36, copy_bytes_per_s=5e10)
    assert "optimizer" not in check_calibration(rec)
    rec["optimizer"]["copy_bytes_per_s"] = 3e10  # its bytes moved 1.8x faster than copied: a broken timing
    (problem,) = check_calibration(rec)["optimizer"]
    assert "optimizer moved-bytes rate 5.44e+10 B/s exceeds 1.5x a copy of its working set (3e+10)" in problem


def test_timings_stuck_whatever_the_shape_are_flagged(tmp_path):
    rec = _cpu_cal()
    for r in rec["gemm"]["shapes"][2:]:  # a busy spell: every timing near 15.9 ms
        r["time_s"] = 0.0159
        r["flops_per_s"] = 2 * r["m"] * r["n"] * r["k"] / r["time_s"]
    rec["gemm"]["peak_flops_per_s"] = 7.6e12
    problems = check_calibration(rec)["gemm"]
    assert any("whatever their size" in p for p in problems)
    assert any("2 CPU core(s)" in p for p in problems)


@pytest.mark.parametrize(
    "field, value, words",
    [
        (("bandwidth", "bandwidth_bytes_per_s"), 0.0, "not finite and positive"),
        (("bandwidth", "bandwidth_bytes_per_s"), -4e10, "not finite and positive"),
        (("bandwidth", "bandwidth_bytes_per_s"), float("nan"), "not finite and positive"),
        (("bandwidth", "bandwidth_bytes_per_s"), 40.0, "unit slip"),  # GB/s written where B/s belong
        (("gemm", "peak_flops_per_s"), float("inf"), "not finite and positive"),
        (("power", "loaded_w"), 5.0, "below idle"),
        (("optimizer", "bytes_per_s"), float("nan"), "optimizer rate nan not finite and positive"),
        (("optimizer", "bytes_per_s"), -1.0, "not finite and positive"),
    ],
)
def test_implausible_quantities_are_flagged(field, value, words):
    rec = _cpu_cal()
    rec[field[0]][field[1]] = value
    assert any(words in p for p in check_calibration(rec)[field[0]])


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"device_name": "cpu", "gem', "not valid JSON"),
        (
            json.dumps({k: v for k, v in _cpu_cal().items() if k != "bandwidth"}),
            "lacks bandwidth.bandwidth_bytes_per_s",
        ),
        (json.dumps({**_cpu_cal(), "format": 99}), "has format 99, newer than"),
        ("[1, 2]", "holds no JSON object"),
    ],
)
def test_an_unreadable_file_is_one_line_naming_the_file_and_the_fix(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, "cpu")
    msg = str(err.value)
    assert words in msg and str(path) in msg and "companion calibrate" in msg and "\n" not in msg


def test_a_cpu_calibration_under_a_gpu_name_or_another_device_is_refused(tmp_path):
    path = _write(tmp_path, {**_cpu_cal(), "device_name": "H100"}, "H100.json")
    with pytest.raises(CalibrationError, match="measured on a CPU but names the GPU 'H100'"):
        load_calibration(path, "H100")
    with pytest.raises(CalibrationError, match="calibrated 'cpu', not 'H100'"):
        load_calibration(_write(tmp_path, _cpu_cal()), "H100")


def test_another_host_s_calibration_is_used_with_a_warning_naming_both(tmp_path):
    here = {"hostname": "vm", "cpu_count": 2, "cpu_model": "Intel Xeon"}
    cal = load_calibration(_write(tmp_path, _cpu_cal()), "cpu", "fp32", here=here)
    assert len(cal.warnings) == 1 and "AMD EPYC" in cal.warnings[0] and "Intel Xeon" in cal.warnings[0]
    assert (
        load_calibration(
            _write(tmp_path, _cpu_cal()), "cpu", "fp32", here={**here, "cpu_model": "AMD EPYC"}
        ).warnings
        == []
    )


def test_a_cpu_calibration_is_named_by_its_host_and_this_host_s_is_read_first(tmp_path):
    from companion.energy.calibration import calibration_names, calibration_path
    from companion.runs.provenance import cpu_model, host_slug

    assert calibration_names("cpu", "AMD EPYC 7B13 64-Core Processor") == [
        "cpu-amd-epyc-7b13.json",
        "cpu.json",
    ]
    assert calibration_names("H200") == ["H200.json"]
    assert calibration_path("cpu", tmp_path) is None
    _write(tmp_path, _cpu_cal())  # the name before: still read
    assert calibration_path("cpu", tmp_path).name == "cpu.json"
    mine = f"cpu-{host_slug(cpu_model())}.json"
    _write(tmp_path, _cpu_cal(), name=mine)
    _write(tmp_path, _cpu_cal(), name="cpu-some-other-host.json")  # another host's: never this host's
    assert calibration_path("cpu", tmp_path).name == mine


def test_predict_falls_back_to_the_prior_on_a_broken_file_and_says_which(tmp_path):
    (tmp_path / "derived").mkdir()
    path = _write(tmp_path, '{"truncated', "H200.json")
    p = predict_tiered(make_plan(**PLAN), derived_root=tmp_path / "derived", devices_root=tmp_path)
    assert p["tier"] == "prior" and any(str(path) in n and "not valid JSON" in n for n in p["notes"])
    with pytest.raises(CalibrationError, match="not valid JSON"):
        predict_tiered(
            make_plan(**PLAN), tier="calibrated", derived_root=tmp_path / "derived", devices_root=tmp_path
        )


def test_predict_uses_the_newest_shipped_h200_calibration_and_warns_of_a_flagged_one(tmp_path):
    import shutil

    from companion.energy.calibration import SHIPPED_SETS

    (tmp_path / "derived").mkdir()
    p = predict_tiered(make_plan(**PLAN), derived_root=tmp_path / "derived")
    # the modes set's calibration (it probes the compiled modes) before the one-machine set's and the first's
    newest = reference_dir("H200") / SHIPPED_SETS[0] / "H200.json"
    assert p["tier"] == "calibrated" and p["source"] == str(newest)
    assert not [w for w in p["warnings"] if "failed its check" in w]
    # the first machine's calibration, whose launch-bound quantities failed their checks: each said
    shutil.copy(H200, tmp_path / "H200.json")
    p = predict_tiered(make_plan(**PLAN), derived_root=tmp_path / "derived", devices_root=tmp_path)
    assert p["source"] == str(tmp_path / "H200.json")
    assert sum("failed its check" in w for w in p["warnings"]) == 4


def test_a_flagged_gpu_quantity_is_the_datasheet_s_not_the_file_s(tmp_path):
    rec = copy.deepcopy(read_calibration(H200))
    rec["bandwidth"]["bandwidth_bytes_per_s"] = 4.1e15  # above the datasheet's 4.8 TB/s: flagged
    cal = load_calibration(_write(tmp_path, rec, "H200.json"), "H200", "bf16")
    assert cal.roofs.bandwidth_bytes_per_s == opmodel.roofs_from_spec("H200", "bf16").bandwidth_bytes_per_s
    assert "bandwidth" in cal.roofs.fallbacks


def test_a_one_gpu_calibration_prices_collectives_at_the_datasheet_s_and_a_multi_gpu_plan_says_so(tmp_path):
    rec = read_calibration(H200)
    assert not rec.get("collectives")  # measured on a machine with one GPU: no collective timed
    cal = load_calibration(_write(tmp_path, rec, "H200.json"), "H200", "bf16")
    prior = opmodel.roofs_from_spec("H200", "bf16")
    assert cal.roofs.collective_beta_bytes_per_s == prior.collective_beta_bytes_per_s
    assert cal.roofs.collective_alpha_s == prior.collective_alpha_s and "collectives" in cal.roofs.fallbacks
    # and the network between nodes is the board's own prior, as the prior tier's
    assert (cal.roofs.gpus_per_node, cal.roofs.internode_beta_bytes_per_s) == (
        prior.gpus_per_node,
        prior.internode_beta_bytes_per_s,
    )
    (tmp_path / "derived").mkdir()
    one, eight = (
        predict_tiered(
            make_plan(**{**PLAN, "batch_size": 128, "dp": dp, "devices": dp}),
            tier="calibrated",
            derived_root=tmp_path / "derived",
            devices_root=tmp_path,
        )
        for dp in (1, 8)
    )
    said = [[w for w in p["warnings"] if w.startswith("collectives not measured")] for p in (one, eight)]
    assert said[0] == [] and len(said[1]) == 1 and "calibrate on 8 GPUs" in said[1][0]
    # eight GPUs sharing a global batch of 128 take no longer per step than one GPU with all of it (the record's
    # placeholder bandwidth, 1 GB/s, made them about 20 x slower)
    assert eight["step_s"] < one["step_s"]


def test_a_plan_beyond_one_node_says_its_collectives_cross_the_network(tmp_path):
    (tmp_path / "derived").mkdir()
    said = {}
    for n in (8, 16):
        p = predict_tiered(
            make_plan(**{**PLAN, "batch_size": 128, "dp": n, "devices": n}),
            derived_root=tmp_path / "derived",
            devices_root=tmp_path,
        )
        said[n] = [w for w in p["warnings"] if " nodes of " in w]
    assert said[8] == [] and said[16] and "16 GPUs span 2 nodes of 8" in said[16][0]


def test_a_one_gpu_calibration_of_a_bridged_board_keeps_its_links_priors(tmp_path):
    # the calibration times one GPU: the bridged group, PCIe between groups and the network stay the board's priors
    rec = {**read_calibration(H200), "device_name": "H200-NVL"}
    cal = load_calibration(_write(tmp_path, rec, "H200-NVL.json"), "H200-NVL", "bf16")
    prior = opmodel.roofs_from_spec("H200-NVL", "bf16")
    links = ("link_group", "cross_link_beta_bytes_per_s", "gpus_per_node", "internode_beta_bytes_per_s")
    assert [getattr(cal.roofs, k) for k in links] == [getattr(prior, k) for k in links]
    assert cal.roofs.link_group == 4 and cal.roofs.cross_link_beta_bytes_per_s == 28e9


def test_a_plan_leaving_the_gpus_an_nvlink_bridge_joins_says_so(tmp_path):
    (tmp_path / "derived").mkdir()
    said = {}
    for tp in (2, 4):
        p = predict_tiered(
            make_plan(**{**PLAN, "device": "H100-NVL", "batch_size": 128, "tp": tp, "devices": tp}),
            tier="prior",
            derived_root=tmp_path / "derived",
            devices_root=tmp_path,
        )
        said[tp] = [w for w in p["warnings"] if "NVLink bridges" in w]
    assert said[2] == [] and len(said[4]) == 1 and "4 GPUs leave the groups of 2" in said[4][0]
    assert "28 GB/s" in said[4][0]


def test_a_plan_over_gpus_says_once_what_its_tier_did_not_measure(tmp_path):
    from companion.energy.predict import plan_layouts

    _write(tmp_path, read_calibration(H200), "H200.json")
    (tmp_path / "derived").mkdir()
    p = plan_layouts(
        8,
        model="bert-base",
        examples=10000,
        device="H200",
        derived_root=tmp_path / "derived",
        devices_root=tmp_path,
    )
    assert len(p["layouts"]) > 3  # several layouts and batch sizes, each with the same two gaps
    for words in ("collectives not measured", "the layout's own overhead"):
        assert sum(n.startswith(words) for n in p["notes"]) == 1, words


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--device", "cpu", "--device-name", "H100"], "cannot be named after the GPU H100"),
        (["--device", "cpu", "--out", "{tmp}"], "is a folder"),
        (["--device", "cpu", "--out", "{tmp}/a-file/cpu.json"], "not a writable folder"),
    ],
)
def test_calibrate_refuses_bad_arguments_before_any_benchmark(tmp_path, argv, words):
    (tmp_path / "a-file").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = subprocess.run(
        [sys.executable, "-m", "companion.cli", "calibrate", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1


def test_the_element_wise_rate_is_in_the_model_s_bytes_whatever_the_file_counted():
    shape = {"tokens": 1024, "hidden": 64, "time_s": 1e-3}
    elements = 3 * 1024 * 16 * 64  # 3 x tokens x (8 h + 2 x 4 h)
    # the file counts 2 bytes per bf16 element; the model 5 (norms and residuals stay fp32 under autocast)
    bf16 = {**shape, "bytes": elements * 2, "bytes_per_s": elements * 2 / 1e-3}
    assert opmodel.elementwise_rate(bf16, "bfloat16") == pytest.approx(elements * 5 / 1e-3)
    assert opmodel.elementwise_rate({**bf16, "elements": elements}, "bfloat16") == pytest.approx(
        elements * 5e3
    )
    # fp32 counts 4 bytes either way
    fp32 = {**shape, "bytes": elements * 4, "bytes_per_s": elements * 4 / 1e-3}
    assert opmodel.elementwise_rate(fp32, "float32") == pytest.approx(fp32["bytes_per_s"])
    assert opmodel.elementwise_rate({"bytes_per_s": 7.0}, "bfloat16") == 7.0  # no shape: as written
    assert opmodel.elementwise_rate(None, "bfloat16") is None


def test_the_element_wise_benchmark_times_the_elements_the_model_counts():
    import torch

    from companion.runs.calibrate import elementwise_benchmark

    out = elementwise_benchmark(torch.device("cpu"), torch.bfloat16, 0.05, tokens=64, hidden=32)
    assert out["elements"] == 3 * 64 * (8 * 32 + 2 * 128) and out["bytes"] == out["elements"] * 2
    # the model reads the timing with its own bytes per element
    rate = opmodel.elementwise_rate(out, "bfloat16")
    assert rate == pytest.approx(out["elements"] * opmodel.ELEMENTWISE_BYTES["bf16"] / out["time_s"])


def test_a_thread_scaling_timed_beside_a_busy_core_is_flagged_and_takes_the_model_s_default(tmp_path):
    """A GEMM no faster on two threads than on one timed a node with a busy core (a fresh clone's calibration,
    2026-11-27: its calibrated tier then missed every run by 23-40 %): the check flags it, and the roofs take the
    model's default exponent (every core adds its share) rather than the file's 0.30, with a warning saying so."""
    rec = {
        **_cpu_cal(),
        "thread_scaling": {"threads": 2, "gemm_speedup": 1.0013, "copy_speedup": 1.51, "exponent": 0.30},
    }
    (problem,) = check_calibration(rec)["thread_scaling"]
    assert "1.00x as fast as on one" in problem and "busy" in problem
    cal = load_calibration(_write(tmp_path, rec), "cpu", "fp32")
    assert cal.roofs.thread_exponent == 1.0 and "thread_scaling" in cal.roofs.fallbacks
    assert any("thread_scaling failed its check" in w and "exponent 1" in w for w in cal.warnings)
    healthy = {**rec, "thread_scaling": {**rec["thread_scaling"], "gemm_speedup": 1.98, "exponent": 0.96}}
    assert "thread_scaling" not in check_calibration(healthy)
    assert load_calibration(_write(tmp_path, healthy), "cpu", "fp32").roofs.thread_exponent == 0.96
    one_thread = {**rec, "thread_scaling": {"threads": 1, "gemm_speedup": 1.0, "exponent": 1.0}}
    assert "thread_scaling" not in check_calibration(one_thread)  # nothing to compare on one core


@pytest.mark.parametrize("exponent", [float("nan"), -3.0, 7.0])
def test_a_thread_exponent_outside_what_threads_can_give_is_flagged(tmp_path, exponent):
    rec = {**_cpu_cal(), "thread_scaling": {"threads": 2, "gemm_speedup": 1.9, "exponent": exponent}}
    (problem,) = check_calibration(rec)["thread_scaling"]
    assert "thread exponent" in problem and "[0, 1.5]" in problem
    assert load_calibration(_write(tmp_path, rec), "cpu", "fp32").roofs.thread_exponent == 1.0


@pytest.mark.parametrize("half_dim", [-5.0, 1e5])
def test_a_flagged_cpu_gemm_fit_is_replaced_whole_roof_and_half_dimension(tmp_path, monkeypatch, half_dim):
    """A GEMM fit flagged for its half-dimension (negative, or at the fit's bound) gives way to a roof measured
    when the analysis runs: its peak and the fallback's half-dimension, not the flagged one."""
    from companion.energy import calibration, hardware

    monkeypatch.setattr(
        hardware, "measure_cpu_roofs", lambda: {"peak_flops_per_s": 1e11, "bandwidth_bytes_per_s": 3e10}
    )
    rec = _cpu_cal()
    rec["gemm"]["half_dim"] = half_dim
    assert "gemm" in check_calibration(rec)
    roofs = load_calibration(_write(tmp_path, rec), "cpu", "fp32").roofs
    assert "gemm" in roofs.fallbacks and roofs.gemm_peak_flops_per_s == 1e11
    assert roofs.gemm_half_dim == calibration.FALLBACK_GEMM_HALF_DIM


@pytest.mark.parametrize(
    "field, value, quantity, words",
    [
        (("launch", "launch_s"), float("nan"), "launch", "launch cost nan s not within (0, 10 ms)"),
        (("launch", "launch_s"), -3e-6, "launch", "not within (0, 10 ms)"),
        (("launch", "launch_s"), 3.0, "launch", "not within (0, 10 ms)"),  # us written where s belong
        (("gemm", "peak_flops_per_s"), 250.0, "gemm", "below any device's (a unit slip?"),  # GFLOP/s
        (("gemm", "peak_flops_per_s"), 2.5e10, "gemm", "0.1x the best rate measured"),
    ],
)
def test_a_launch_cost_or_gemm_roof_in_the_wrong_unit_is_flagged(field, value, quantity, words):
    rec = _cpu_cal()
    rec[field[0]][field[1]] = value
    assert any(words in p for p in check_calibration(rec)[quantity])


def test_a_flagged_launch_cost_gives_way_to_the_default_and_one_the_model_never_reads_is_not_flagged(
    tmp_path,
):
    """The model reads the operator counts' cost per operator, else the launch benchmark's: a launch cost that is
    no time is flagged and replaced by the model's default only where nothing else prices a launch."""
    from companion.energy.calibration import CPU_DEFAULT_COSTS

    rec = {**_cpu_cal(), "launch": {"launch_s": float("nan")}}
    roofs = load_calibration(_write(tmp_path, rec), "cpu", "fp32").roofs
    assert roofs.launch_s == CPU_DEFAULT_COSTS["launch_s"] and "launch" in roofs.fallbacks
    counted = {**rec, "op_counts": {"per_layer": 90.0, "per_step": 50.0, "per_op_s": 7e-6}}
    assert "launch" not in check_calibration(counted)  # the model reads the cost per operator
    cal = load_calibration(_write(tmp_path, counted), "cpu", "fp32")
    assert cal.roofs.launch_s == 7e-6 and cal.roofs.ops_per_layer == 90.0 and not cal.warnings
    # operator counts whose cost is no number: the launch benchmark's cost and the default counts, never NaN
    broken = {**_cpu_cal(), "op_counts": {"per_layer": 90.0, "per_step": 50.0, "per_op_s": float("nan")}}
    cal = load_calibration(_write(tmp_path, broken), "cpu", "fp32")
    assert cal.roofs.launch_s == 3e-6 and cal.roofs.ops_per_layer == opmodel.DeviceRoofs.ops_per_layer
    assert any("using the launch benchmark's cost and the model's default counts" in w for w in cal.warnings)
    # both no time: the default launch cost, and each warning says what was used
    both = {**broken, "launch": {"launch_s": float("nan")}}
    cal = load_calibration(_write(tmp_path, both), "cpu", "fp32")
    assert cal.roofs.launch_s == CPU_DEFAULT_COSTS["launch_s"] and set(cal.roofs.fallbacks) == {
        "op_counts",
        "launch",
    }
    assert any("using the model's default launch cost and counts" in w for w in cal.warnings), cal.warnings


@pytest.mark.parametrize(
    "alpha, beta, words",
    [
        (float("nan"), 1.2e9, "collective latency over 4 ranks nan s"),
        (-2e-4, 1.2e9, "not within [0, 1 s)"),
        (1.3e-3, -5.0, "collective bandwidth over 4 ranks -5.0 B/s not positive"),
        (1.3e-3, float("nan"), "not positive"),
    ],
)
def test_a_group_size_whose_collective_costs_are_no_time_is_left_out_of_the_roofs(
    tmp_path, alpha, beta, words
):
    from companion.energy.calibration import CPU_DEFAULT_COSTS

    good = {"alpha_s": 4e-4, "beta_bytes_per_s": 1.4e9, "world_size": 2}
    rec = {
        **_cpu_cal(),
        "collectives": {"2": good, "4": {"alpha_s": alpha, "beta_bytes_per_s": beta, "world_size": 4}},
    }
    (problem,) = check_calibration(rec)["collectives"]
    assert words in problem
    cal = load_calibration(_write(tmp_path, rec), "cpu", "fp32")
    roofs = cal.roofs  # the 2-rank costs, which passed
    assert roofs.collective_alpha_s == 4e-4 and roofs.collective_beta_bytes_per_s == 1.4e9
    assert roofs.collective_alpha_by_world_s == {"2": 4e-4} and "collectives" in roofs.fallbacks
    assert any("using the costs measured over 2 ranks" in w for w in cal.warnings)
    # none passed: the model's defaults
    bad = {**rec, "collectives": {"4": rec["collectives"]["4"]}}
    roofs = load_calibration(_write(tmp_path, bad), "cpu", "fp32").roofs
    assert roofs.collective_alpha_s == CPU_DEFAULT_COSTS["collective_alpha_s"]
    assert roofs.collective_beta_bytes_per_s == CPU_DEFAULT_COSTS["collective_beta_bytes_per_s"]


def test_collective_costs_as_the_fit_gives_them_pass():
    """Non-negative least squares may fit a zero latency, and a bandwidth that is infinite (timings that did not
    grow with the bytes) or absent is read as no bound: none of these is a fault."""
    for c in (
        {"alpha_s": 0.0, "beta_bytes_per_s": 1.4e9},
        {"alpha_s": 4e-4, "beta_bytes_per_s": float("inf")},
        {"alpha_s": 4e-4},
    ):
        assert "collectives" not in check_calibration({**_cpu_cal(), "collectives": {"2": c}}), c


def test_a_calibration_read_for_another_precision_says_so_and_torch_s_dtype_names_are_read():
    """A bf16 GPU calibration read for fp32 runs (or a CPU's fp32 one for bf16) keeps its roofs, with a warning;
    a dtype written as torch names it ("torch.float32") is the same precision as "float32"."""
    from companion.energy.calibration import _datasheet
    from companion.runs.records import dtype_precision

    assert [dtype_precision(d) for d in ("torch.bfloat16", "bfloat16", "float32", None, "int8")] == [
        "bf16",
        "bf16",
        "fp32",
        None,
        None,
    ]
    cal = load_calibration(H200, "H200", "fp32")
    assert any("measured at bf16, not fp32" in w for w in cal.warnings)
    assert not any(
        "not bf16" in w or "not fp32" in w for w in load_calibration(H200, "H200", "bf16").warnings
    )
    rec = read_calibration(H200)
    fp32 = _datasheet({**rec, "dtype": "float32"})["peak"]
    assert fp32 < _datasheet(rec)["peak"]  # the datasheet's fp32 roof, not its bf16 one
    assert _datasheet({**rec, "dtype": "torch.float32"})["peak"] == fp32
