"""A GPU's reference measurements (data/reference/<device>/) scored by the operator model's three tiers.

The folder holds run records measured on the GPU (energy from its NVML counter), the calibration
``companion calibrate`` wrote there and, where taken, a step profile (step times of further configurations,
eager and compiled). Each tier predicts every run:

* prior: the datasheet and the hardware table's priors, nothing measured on the device;
* calibrated: the shipped calibration (quantities that fail their checks from the datasheet), fitted on nothing;
* fitted: two multipliers (host, device) and the idle and busy powers fitted on the other runs (leave one out).

The step profile's eager rows are scored for time only (they have no energy) and were not used to set anything
but the kernels-per-operator prior (``resources/hardware.yaml``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from companion.energy import opmodel, proxies, tables
from companion.energy.calibration import (
    MASKED_MODES_SET,
    MODES_SET,
    ONE_MACHINE_SET,
    QUANTITY_WORDS,
    load_calibration,
)
from companion.energy.models import OperatorPoint
from companion.paths import reference_dir
from companion.energy.intervals import LEVEL

TIERS = ("prior", "calibrated", "fitted")
TARGETS = ("step_s", "energy_per_step_j")


def reference_runs(device: str, root: Path | None = None) -> pd.DataFrame:
    """The finished runs of ``device``'s reference folder with their proxies (FLOPs, bytes, MFU), as the
    analysis stages read runs."""
    return tables.proxies_frame(tables.load_runs((root or reference_dir(device)) / "runs"))


def profile_rows(device: str, root: Path | None = None) -> pd.DataFrame:
    """The step profile's eager configurations as runs (step time only), where the folder has one."""
    path = (root or reference_dir(device)) / "step_profile.json"
    if not path.is_file():
        return pd.DataFrame()
    rows = []
    for r in json.loads(path.read_text())["rows"]:
        if r.get("compile"):
            continue
        L, h, s, b = int(r["L"]), int(r["h"]), int(r["s"]), int(r["b"])
        rows.append(
            {
                "run_id": r["name"],
                "layers": L,
                "hidden": h,
                "ffn": 4 * h,
                "heads": h // 64,
                "tp": 1,
                "dp": 1,
                "vocab": 30522,
                "max_positions": 512,
                "num_labels": 2,
                "padded_tokens": float(b * s),
                "attention_pairs": float(b * s * s),
                "batch_size": b,
                "seq_len": s,
                "precision": "bf16",
                "attention_kernel": "fused",
                "world_size": 1,
                "metered_units": 1,
                "step_s": r["step_ms"] / 1e3,
                "energy_per_step_j": np.nan,
            }
        )
    return pd.DataFrame(rows)


def tier_devices(
    device: str, root: Path | None = None, calibration: Path | None = None
) -> dict[str, opmodel.DeviceRoofs]:
    """The prior's and the calibrated tier's roofs of ``device`` (the folder's calibration, or ``calibration``,
    checked)."""
    folder = root or reference_dir(device)
    cal = load_calibration(calibration or folder / f"{device}.json", device, "bf16")
    return {"prior": opmodel.roofs_from_spec(device, "bf16"), "calibrated": cal.roofs}


def _point(dev: opmodel.DeviceRoofs) -> OperatorPoint:
    coef = opmodel.prior_coefficients(dev)
    return OperatorPoint(dev, coef["time"], coef["energy"])


def _fit_point(dev: opmodel.DeviceRoofs, df: pd.DataFrame) -> OperatorPoint:
    _, terms, time = opmodel.fit_time_model(df, dev)
    energy = opmodel.fit_energy_coefficients(
        terms,
        df.step_s.to_numpy(float),
        opmodel.metered_units(df),
        df.energy_per_step_j.to_numpy(float),
        time,
    )
    return OperatorPoint(dev, time, energy)


def fitted_point(device: str, root: Path | None = None) -> OperatorPoint:
    """The fitted tier as the reference runs leave it: fitted on every one of them (the calibrated tier's roofs)."""
    return _fit_point(
        tier_devices(device, root)["calibrated"], reference_runs(device, root).reset_index(drop=True)
    )


def score_reference(
    device: str,
    root: Path | None = None,
    level: float = LEVEL,
    fitted: OperatorPoint | None = None,
    calibration: Path | None = None,
) -> pd.DataFrame:
    """One row per run and tier: measured and predicted step time and energy, and whether the tier's stated
    interval at ``level`` covers the measurement (prior and calibrated: the hardware table's factor; the fitted
    tier's leave-one-out has too few runs for a conformal interval: none). The fitted tier is refitted on the
    other runs for each run (leave one out), or, given ``fitted`` (a point fitted elsewhere), that point."""
    from companion.energy import hardware

    df = reference_runs(device, root).reset_index(drop=True)
    devs = tier_devices(device, root, calibration)
    factor = float(hardware.priors().get("gpu", {}).get("interval_factor", 2.0))
    z = NormalDist().inv_cdf
    half = math.log(factor) * z((1 + level) / 2) / z((1 + 0.9) / 2)
    out = []
    for tier in TIERS:
        if tier == "fitted" and fitted is not None:
            t, e = fitted.predict(df)
        elif tier == "fitted":
            preds = []
            for i in range(len(df)):
                train = df.drop(index=i)
                t, e = _fit_point(devs["calibrated"], train).predict(df.iloc[[i]])
                preds.append((t[0], e[0]))
            t, e = np.array(preds).T
        else:
            t, e = _point(devs[tier]).predict(df)
        for k, r in df.iterrows():
            row = {
                "tier": tier,
                "run_id": r.run_id,
                "layers": r.layers,
                "hidden": r.hidden,
                "seq_len": r.seq_len,
                "batch_size": r.batch_size,
                "flops_per_step": float(r.get("flops_per_step", np.nan)),
                "step_ci95_rel": float(r.get("step_ci95_rel", np.nan)),
            }
            for target, pred in (("step_s", t[k]), ("energy_per_step_j", e[k])):
                meas = float(r[target])
                row[f"{target}_measured"], row[f"{target}_predicted"] = meas, float(pred)
                row[f"{target}_ape"] = abs(pred / meas - 1) * 100
                row[f"{target}_covered"] = (abs(math.log(meas / pred)) <= half) if tier != "fitted" else None
            out.append(row)
    return pd.DataFrame(out)


def score_profile(device: str, root: Path | None = None) -> pd.DataFrame:
    """The step profile's eager rows, step time predicted by the prior and the calibrated tiers."""
    rows = profile_rows(device, root)
    if rows.empty:
        return rows
    out = []
    for tier, dev in tier_devices(device, root).items():
        t, _ = _point(dev).predict(rows)
        out.append(
            rows[["run_id", "step_s"]].assign(
                tier=tier, step_s_predicted=t, step_s_ape=np.abs(t / rows.step_s - 1) * 100
            )
        )
    return pd.concat(out, ignore_index=True)


def summary(scores: pd.DataFrame) -> pd.DataFrame:
    """Per tier: MAPE of time and energy, and how many runs each stated interval covers."""
    g = scores.groupby("tier", sort=False)
    return pd.DataFrame(
        {
            "runs": g.size(),
            "time_mape_pct": g.step_s_ape.mean(),
            "energy_mape_pct": g.energy_per_step_j_ape.mean(),
            "time_covered": g.step_s_covered.apply(lambda c: int(c.sum()) if c.notna().all() else None),
            "energy_covered": g.energy_per_step_j_covered.apply(
                lambda c: int(c.sum()) if c.notna().all() else None
            ),
        }
    ).reindex([t for t in TIERS if t in set(scores.tier)])


def regime_points(device: str, root: Path | None = None, tier: str = "calibrated") -> pd.DataFrame:
    """Every measured step of the folder (the runs, and the step profile's eager rows) with its FLOPs and the
    ``tier``'s host and device seconds (``opmodel.host_device_s``): which of the two bounds the step."""
    runs = reference_runs(device, root).assign(source="fine-tune runs")
    prof = profile_rows(device, root)
    frames = [runs]
    if len(prof):
        prof = prof.assign(source="step profile")
        prof["flops_per_step"] = [proxies.flops_per_step(tables.step_shape(r)) for r in prof.itertuples()]
        frames.append(prof)
    df = pd.concat(frames, ignore_index=True)
    dev = tier_devices(device, root)[tier]
    coef = opmodel.prior_coefficients(dev)["time"]
    host, busy, _ = opmodel.host_device_s(opmodel.scaled_terms(opmodel.operator_frame(df, dev), coef))
    from companion.energy import hardware

    peak = hardware.peak_flops_per_s(
        device, "bf16"
    )  # MFU against the datasheet's dense peak, as usually quoted
    return pd.DataFrame(
        {
            "run_id": df.run_id,
            "name": [
                f"L{int(r.layers)} h{int(r.hidden)} s{int(r.seq_len)} b{int(r.batch_size)}"
                for r in df.itertuples()
            ],
            "source": df.source,
            "layers": df.layers.astype(int),
            "flops_per_step": df.flops_per_step.astype(float),
            "step_s": df.step_s.astype(float),
            "host_s": host,
            "device_s": busy,
            "mfu_pct": 100 * df.flops_per_step.astype(float) / df.step_s.astype(float) / peak,
        }
    )


def step_signed_error(scores: pd.DataFrame) -> tuple[float | None, int]:
    """One tier's scores of some runs: the mean signed step-time error (%, predicted / measured - 1; negative:
    predicted too fast; None for no runs) and on how many runs the prediction is low."""
    signed = scores.step_s_predicted / scores.step_s_measured - 1
    return (float(signed.mean() * 100) if len(scores) else None), int((signed < 0).sum())


def reference_numbers(device: str, root: Path | None = None, level: float = LEVEL) -> dict:
    """Everything the GPU chapter and the headline quote about ``device``'s reference folder, in one typed
    record (the chapter writes it as its artifact): the tiers' scores, the step profile's, the calibration's
    flagged quantities and the board's power and efficiency figures."""
    folder = root or reference_dir(device)
    scores, prof = score_reference(device, root, level), score_profile(device, root)
    calibration = load_calibration(folder / f"{device}.json", device, "bf16")
    ref_path = folder / "gpu_reference.json"
    ref = json.loads(ref_path.read_text()) if ref_path.is_file() else {}
    base = ref.get("bert_base_s512_bf16", {})
    tiers = summary(scores)
    # the runs the calibrated tier finds host-bound, and how much their own step time moved window to window
    pts = regime_points(device, root)
    host_bound = set(pts[(pts.source == "fine-tune runs") & (pts.host_s > pts.device_s)].run_id)
    cal = scores[scores.tier == "calibrated"]
    bound = cal[cal.run_id.isin(host_bound)]
    bound_signed_pct, bound_low_runs = step_signed_error(bound)
    spread = []
    for path in sorted(((folder / "runs").glob("*.json"))):
        rec = json.loads(path.read_text())
        w = (rec.get("time") or {}).get("per_window_step_s") or []
        if rec.get("run_id") in set(bound.run_id) and len(w) > 1:
            spread.append(max(w) / min(w) - 1)
    return {
        "device": device,
        "energy": "measured (NVML energy counter)",
        "interval_level": level,
        "runs": int(scores.run_id.nunique()),
        "tiers": _tier_dict(tiers),
        "profile_time_mape_pct": {t: float(g.step_s_ape.mean()) for t, g in prof.groupby("tier")}
        if len(prof)
        else {},
        "profile_rows": int(len(prof) // max(prof.tier.nunique(), 1)) if len(prof) else 0,
        "host_bound": {
            "runs": int(len(bound)),
            "calibrated_signed_error_pct": bound_signed_pct,
            "calibrated_all_low": bound_low_runs == len(bound),
            "window_spread_pct": [float(min(spread) * 100), float(max(spread) * 100)] if spread else None,
        },
        "flagged": {
            q: {"quantity": QUANTITY_WORDS.get(q, q), "problems": list(p)}
            for q, p in calibration.problems.items()
        },
        "power_w": {
            "idle": ref.get("idle", {}).get("mean_power_w"),
            "hot_idle": ref.get("hot_idle", {}).get("mean_power_w"),
            "runs_min": float((cal.energy_per_step_j_measured / cal.step_s_measured).min()),
            "runs_max": float((cal.energy_per_step_j_measured / cal.step_s_measured).max()),
        },
        "bert_base_s512": {
            "step_ms": base.get("step_s", math.nan) * 1e3,
            "mfu_pct": base.get("mfu", math.nan) * 100,
            "gflop_per_j": base.get("gflop_per_j"),
            "peak_gflop_per_j": base.get("peak_gflop_per_j"),
            "codecarbon_gpu_over_nvml": base.get("codecarbon_gpu_over_nvml"),
            "memory_estimate_over_measured": (
                base.get("memory", {}).get("estimated_peak_bytes", math.nan)
                / base.get("memory", {}).get("max_allocated_bytes", math.nan)
            )
            if base.get("memory")
            else None,
        },
        "scores": scores.to_dict(orient="records"),
        "test": testset_numbers(device, root, level),
        "one_machines": one_machines_numbers(device, root, level),
        "modes": modes_numbers(device, root, level),
        "modes_masked": modes_numbers(device, root, level, MASKED_MODES),
        "host_speed": host_speed(device, root),
    }


def _tier_dict(tiers: pd.DataFrame) -> dict:
    return {
        t: {
            k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
            for k, v in row.items()
        }
        for t, row in tiers.iterrows()
    }


TESTSET = "testset"  # the test set's sub-folder of a reference folder: its runs, its machine's calibration
HOST = "host"  # the host-speed measurements' sub-folder (benchmarks/host_cost.py, benchmarks/host_gap.py)
ONE_MACHINE = (
    ONE_MACHINE_SET  # a calibration and the runs it predicts from one machine (benchmarks/gpu_check.sh)
)
# every such set a reference folder may hold, each from its own machine, in the order they were measured
ONE_MACHINE_SETS = (ONE_MACHINE, f"{ONE_MACHINE}-2", f"{ONE_MACHINE}-3")
MODES = MODES_SET  # execution modes and engines on one machine, with its execution-probed calibration
# the execution modes again, compiled as the runner compiles them now (attention mask kept, autocast in the graph)
MASKED_MODES = MASKED_MODES_SET
# every folder of run records a reference folder may hold (the provenance page lists their machines)
RECORD_DIRS = (
    "runs",
    "testset/runs",
    "testset/repeat/runs",
    *(f"{name}/{runs}" for name in ONE_MACHINE_SETS for runs in ("runs", "testset/runs")),
    "modes/runs",
    "modes-masked/runs",
)
BASE_S128_B32 = (12, 768, 128, 32)  # BERT-base at 128 tokens, batch 32: the host-bound step every file times


def bert_base_b32(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of BERT-base at batch 32 (``BASE_S128_B32``'s model and batch, any sequence length): the
    configuration the modes sets compare."""
    layers, hidden, _, batch = BASE_S128_B32
    return rows[(rows.layers == layers) & (rows.hidden == hidden) & (rows.batch_size == batch)]


def _record_step(path: Path) -> float:
    return float(json.loads(path.read_text())["time"]["step_mean_s"])


def _probe_summary(path: Path, device: str) -> dict:
    """A GPU calibration's host probe (cost per operator, depths timed), the quantities its checks flag and when
    it was measured."""
    cal = load_calibration(path, device, "bf16")
    ops = cal.record.get("op_counts") or {}
    return {
        "per_op_us": float(ops["per_op_s"]) * 1e6 if ops.get("per_op_s") else None,
        "probe_depths": sorted(int(k) for k in (ops.get("step_s") or {})),
        "flagged": sorted(cal.problems),
        "measured_at": (cal.record.get("provenance") or {}).get("measured_at"),
    }


def testset_numbers(device: str, root: Path | None = None, level: float = LEVEL) -> dict | None:
    """The test set of ``device`` (``<folder>/testset``: runs drawn once, profile gpu-test, measured on another
    day's machine with that machine's calibration), scored by the three tiers: the prior, the calibrated tier
    from the test machine's own calibration, and the fitted tier as fitted on every reference run. None
    where the folder has no test set. Also the configurations measured on both machines (``repeat/``)."""
    folder = root or reference_dir(device)
    test = folder / TESTSET
    if not (test / "runs").is_dir():
        return None
    scores = score_reference(device, test, level, fitted=fitted_point(device, root))
    repeat = []
    for path in sorted((test / "repeat" / "runs").glob("*.json")):
        first = folder / "runs" / path.name
        if first.is_file():
            a, b = json.loads(first.read_text()), json.loads(path.read_text())
            repeat.append(
                {
                    "run_id": b["run_id"],
                    "step_s_first": a["time"]["step_mean_s"],
                    "step_s_again": b["time"]["step_mean_s"],
                    "energy_j_first": a["energy"]["per_step_mean_j"],
                    "energy_j_again": b["energy"]["per_step_mean_j"],
                }
            )
    return {
        "runs": int(scores.run_id.nunique()),
        "tiers": _tier_dict(summary(scores)),
        "calibration": _probe_summary(test / f"{device}.json", device),
        "repeat": repeat,
        "scores": scores.to_dict(orient="records"),
    }


def one_machine_numbers(
    device: str, root: Path | None = None, level: float = LEVEL, set_name: str = ONE_MACHINE
) -> dict | None:
    """The three tiers where the calibration and the runs it predicts come from one machine
    (``<folder>/<set_name>``, one of ``ONE_MACHINE_SETS``, as ``benchmarks/gpu_check.sh`` packs them): the
    reference profile's runs (the fitted tier leaves each out) and the test set's (the fitted tier as fitted on
    every reference run of that machine). The calibrated tier is fitted on nothing. Also its step time's mean
    signed error over all the set's runs (``calibrated_signed_pct``, negative: predicted too fast) and on how many
    runs it is low (``calibrated_low_runs``). None where the folder has no such set."""
    folder = (root or reference_dir(device)) / set_name
    cal_path = folder / f"{device}.json"
    if not ((folder / "runs").is_dir() and cal_path.is_file()):
        return None
    splits = {"reference": score_reference(device, folder, level, calibration=cal_path)}
    if (folder / TESTSET / "runs").is_dir():
        splits["test"] = score_reference(
            device, folder / TESTSET, level, fitted=fitted_point(device, folder), calibration=cal_path
        )
    every = pd.concat(splits.values())
    signed_pct, low_runs = step_signed_error(every[every.tier == "calibrated"])
    return {
        "set": set_name,
        "runs": {k: int(v.run_id.nunique()) for k, v in splits.items()},
        "tiers": {k: _tier_dict(summary(v)) for k, v in splits.items()},
        "calibration": _probe_summary(cal_path, device),
        "calibrated_signed_pct": signed_pct,
        "calibrated_low_runs": low_runs,
        "host_speed_over_probe": host_speed_over_probe(cal_path, [folder, folder / TESTSET]),
        "scores": {k: v.to_dict(orient="records") for k, v in splits.items()},
    }


def one_machines_numbers(device: str, root: Path | None = None, level: float = LEVEL) -> list[dict]:
    """``one_machine_numbers`` of every one-machine set the folder holds, in ``ONE_MACHINE_SETS``' order."""
    sets = (one_machine_numbers(device, root, level, name) for name in ONE_MACHINE_SETS)
    return [one for one in sets if one is not None]


def host_speed_over_probe(cal_path: Path, folders: list[Path]) -> float | None:
    """How much slower the host ran beside a set's runs than beside its calibration's host probe: the median of
    the runs' host-speed timings (``runs.hostspeed``, ``tables.host_speed_s``) over the probe's (the geometric
    mean of its timings before and after; above 1, the runs met a slower host). None where the calibration or
    the runs predate the timing."""
    probe = tables.host_speed_seconds(
        (json.loads(cal_path.read_text()).get("op_counts") or {}).get("host_speed")
    )
    runs = [tables.load_runs(f / "runs") for f in folders if (f / "runs").is_dir()]
    timed = pd.concat(runs).host_speed_s.dropna() if runs else pd.Series(dtype=float)
    if not probe or timed.empty:
        return None
    return float(timed.median() / probe)


def compiled_ratio(device: str = "H200", root: Path | None = None) -> dict | None:
    """The whole-model compile's step over eager's on ``device``'s masked modes set (the runner's compiled steps
    as they are now; native engine, attention in the graph, mean over replicates) at its longest sequence:
    {"ratio", "seq_len", "device"}; None without such a set."""
    folder = (root or reference_dir(device)) / MASKED_MODES
    if not (folder / "runs").is_dir():
        return None
    df = tables.load_runs(folder / "runs")
    whole = df[(df.engine == "native") & (df.attn == "sdpa")]
    mean = whole.groupby(["layers", "hidden", "batch_size", "seq_len", "execution"]).step_s.mean()
    found = None
    for (*shape, seq, mode), step in mean.items():
        if mode != "compile" or (*shape, seq, "eager") not in mean.index:
            continue
        if found is None or seq > found["seq_len"]:
            found = {
                "ratio": float(step / mean[(*shape, seq, "eager")]),
                "seq_len": int(seq),
                "device": device,
            }
    return found


def modes_numbers(
    device: str, root: Path | None = None, level: float = LEVEL, set_name: str = MODES
) -> dict | None:
    """Execution modes (eager, torch.compile, CUDA graphs; attention in the compiled graph or left out of it,
    ``attn`` sdpa-nocompile) and engines (native, HF Accelerate) measured on one machine (``<folder>/modes``): per
    configuration, mode, attention and engine the mean step time, energy per step and MFU over its replicates;
    BERT-base's best mode and its speed-up over eager per sequence length; Accelerate's energy per step over the
    native engine's; the MFU the calibrated roofs allow eager's kernels (``mfu_ceilings``); and the calibrated
    tier from that machine's calibration (fitted on nothing; where its execution probe measured a compiled mode's
    host time and kernels, with them), scored per mode. ``set_name``: the set's sub-folder (``MODES``,
    ``MASKED_MODES``). None without such a set."""
    folder = (root or reference_dir(device)) / set_name
    cal_path = folder / f"{device}.json"
    if not ((folder / "runs").is_dir() and cal_path.is_file()):
        return None
    df = reference_runs(device, folder).reset_index(drop=True)
    scores = score_reference(device, folder, level, calibration=cal_path)
    ceilings = mfu_ceilings(df, tier_devices(device, folder, cal_path)["calibrated"])
    cal = scores[scores.tier == "calibrated"].merge(
        df[["run_id", "execution", "attn", "engine"]], on="run_id"
    )
    df = df.assign(power_w=df.energy_per_step_j / df.step_s)
    shape = ["layers", "hidden", "seq_len", "batch_size"]
    keys = shape + ["execution", "attn", "engine"]
    groups = (
        df.groupby(keys)
        .agg(
            runs=("run_id", "size"),
            step_ms=("step_s", lambda v: v.mean() * 1e3),
            energy_per_step_j=("energy_per_step_j", "mean"),
            mfu_pct=("mfu", lambda v: v.mean() * 100),
            power_w=("power_w", "mean"),
        )
        .reset_index()
    )
    base = bert_base_b32(groups)
    native = base[base.engine == "native"]
    best = {}
    for seq, g in native.groupby("seq_len"):
        eager = g[(g.execution == "eager") & (g.attn == "sdpa")].iloc[0]
        top = g.loc[g.step_ms.idxmin()]
        best[int(seq)] = {
            "mode": str(top.execution),
            "attn": str(top.attn),
            "step_ms": float(top.step_ms),
            "speedup": float(eager.step_ms / top.step_ms),
            "energy_ratio": float(top.energy_per_step_j / eager.energy_per_step_j),
            "mfu_pct": float(top.mfu_pct),
            "eager_mfu_pct": float(eager.mfu_pct),
        }
    engines = {}
    eager = base[(base.execution == "eager") & (base.attn == "sdpa")]
    for seq, g in eager.groupby("seq_len"):
        if set(g.engine) >= {"native", "accelerate"}:
            n, a = (g[g.engine == e].iloc[0] for e in ("native", "accelerate"))
            engines[int(seq)] = {
                "energy_ratio": float(a.energy_per_step_j / n.energy_per_step_j),
                "step_ratio": float(a.step_ms / n.step_ms),
                "runs": [int(n.runs), int(a.runs)],
            }
    excluded = sorted(p.name for p in (folder / "excluded").glob("*.json"))
    probe = (json.loads(cal_path.read_text()).get("execution") or {}).get("modes") or {}
    return {
        "device": device,
        "runs": int(len(df)),
        "groups": groups.to_dict(orient="records"),
        "best": best,
        "engines": engines,
        "mfu_ceilings": ceilings,
        "calibrated_mape_pct": {  # per mode, attention compiled with the model or (mode+attn) left out
            (str(m) if a == "sdpa" else f"{m}+{a}"): {
                "time": float(g.step_s_ape.mean()),
                "energy": float(g.energy_per_step_j_ape.mean()),
                "runs": int(len(g)),
            }
            for (m, a), g in cal.groupby(["execution", "attn"])
        },
        "calibrated_by_run": cal[
            [
                "run_id",
                "execution",
                "attn",
                "engine",
                "layers",
                "hidden",
                "batch_size",
                "seq_len",
                "step_s_ape",
                "energy_per_step_j_ape",
                "step_s_measured",
                "step_s_predicted",
            ]
        ].to_dict(orient="records"),
        "excluded_runs": excluded,
        "probe": {
            m: {
                "host_per_step_ms": float(v["host_per_step_s"]) * 1e3,
                "host_per_layer_ms": float(v["host_per_layer_s"]) * 1e3,
                "kernels_per_layer": v.get("kernels_per_layer"),
            }
            for m, v in probe.items()
        },
    }


def mfu_ceilings(runs: pd.DataFrame, dev: opmodel.DeviceRoofs) -> dict:
    """For each BERT-base eager run of ``runs`` (by sequence length): the MFU its FLOPs would reach if the step
    took only the device time ``dev``'s roofs (the calibrated tier's) give eager's kernels, no host time: the
    matrix products and attention alone, plus the element-wise traffic (layer norms, dropouts, GELU, residual
    adds), plus the AdamW state. A compiled step can beat the second figure only by fusing element-wise traffic
    away."""
    base = bert_base_b32(runs)
    eager = base[(base.execution == "eager") & (base.engine == "native") & (base.attn == "sdpa")]
    if eager.empty:
        return {}
    terms = opmodel.operator_frame(eager, dev)
    out = {}
    for i, r in eager.iterrows():
        t = terms.loc[i]
        parts = {
            "matmul_attention": t.gemm_s + t.attention_s,
            "with_elementwise": t.gemm_s + t.attention_s + t.elementwise_s,
            "with_state": t.gemm_s + t.attention_s + t.elementwise_s + t.state_s,
        }
        out[int(r.seq_len)] = {
            **{f"{k}_ms": float(v) * 1e3 for k, v in parts.items()},
            **{
                f"{k}_mfu_pct": float(r.flops_per_step / v / r.peak_flops_per_s * 100)
                for k, v in parts.items()
            },
            "gemm_peak_share": float(dev.gemm_peak_flops_per_s / r.peak_flops_per_s),
        }
    return out


def host_speed(device: str, root: Path | None = None) -> dict | None:
    """BERT-base's host-bound step (128 tokens, batch 32) as each measurement of ``device``'s folder timed it:
    the reference sweep's run, the test machine's run of it, each one-machine set's, a bare training loop on two
    further machines (``host/``) and a run there; and the host cost per operator the three-depth probe measured. None without
    a ``host/`` folder."""
    folder = root or reference_dir(device)
    host = folder / HOST
    if not host.is_dir():
        return None
    L, h, s, b = BASE_S128_B32
    name = f"L{L}-h{h}-a{h // 64}-s{s}-b{b}_tp1-dp1@{device}-bf16"
    rows = []
    for where, path in (
        ("reference sweep", folder / "runs"),
        ("test machine", folder / TESTSET / "repeat" / "runs"),
        *((f"{one} set", folder / one / "runs") for one in ONE_MACHINE_SETS),
    ):
        for rec in sorted(path.glob(f"{name}.*.json")):
            rows.append({"machine": where, "how": "companion run", "step_ms": _record_step(rec) * 1e3})
    cost = json.loads((host / "host_cost.json").read_text())
    for r in cost["rows"]:
        if (r["batch"], r["seq"], r["hidden"]) == (b, s, h) and L in r["depths"]:
            rows.append(
                {
                    "machine": "host probe machine",
                    "how": "bare loop",
                    "step_ms": r["step_s"][r["depths"].index(L)] * 1e3,
                }
            )
    gap = json.loads((host / "host_gap.json").read_text())
    for r in gap["rows"]:
        if r["variant"] in ("bare, mask", "companion run, meter auto"):
            how = "bare loop" if r["variant"].startswith("bare") else "companion run"
            rows.append({"machine": "host gap machine", "how": how, "step_ms": r["step_s"] * 1e3})
    per_op = [r["per_op_s"] * 1e6 for r in cost["rows"]]
    # the calibrated tier from this machine's calibration (three-depth host probe), on runs of other machines
    elsewhere = {
        split: summary(score_reference(device, where, calibration=host / f"{device}.json")).loc["calibrated"]
        for split, where in (("reference", folder), ("test", folder / TESTSET))
        if (where / "runs").is_dir()
    }
    probe = json.loads((host / f"{device}.json").read_text()).get("op_counts") or {}
    return {
        "config": name,
        "rows": rows,
        "step_ms_range": [min(r["step_ms"] for r in rows), max(r["step_ms"] for r in rows)],
        "per_op_us": [min(per_op), max(per_op)],
        "probe_per_op_us": float(probe["per_op_s"]) * 1e6 if probe.get("per_op_s") else None,
        "probe_increments_ms": [x * 1e3 for x in probe.get("layer_increments_s") or []],
        "calibrated_from_probe_machine": {
            split: {"time_mape_pct": float(r.time_mape_pct), "energy_mape_pct": float(r.energy_mape_pct)}
            for split, r in elsewhere.items()
        },
    }


def host_floors(points: pd.DataFrame, margin: float = 1.6) -> pd.DataFrame:
    """Per model depth in ``regime_points``: the host's seconds per step (the floor a host-bound step sits on)
    and the FLOPs range its steps span, widened by ``margin`` each way (where the figure draws the floor)."""
    f = (
        points.groupby("layers")
        .agg(host_s=("host_s", "median"), x0=("flops_per_step", "min"), x1=("flops_per_step", "max"))
        .reset_index()
    )
    return f.assign(x0=f.x0 / margin, x1=f.x1 * margin, depth=[f"{n} layers" for n in f.layers])


CPU_MODES = (
    "modes"  # data/reference/cpu/modes/<host>/: runs/ and calibration.json (benchmarks/execution_modes.py)
)


def cpu_modes_numbers(root: Path | None = None) -> list[dict]:
    """Execution modes and engines on CPUs (``benchmarks/execution_modes.py --store``): per host folder under
    ``data/reference/cpu/modes/``, one small BERT's mean step time and energy per step (CodeCarbon's estimate) per
    execution mode and engine, each over its replicates, with how far those replicates lie apart, its ratios to
    native eager's and the p-value of its step times against native eager's (Welch), and the calibrated tier's error from that host's calibration with its execution probe. Hosts in
    name order; none where nothing is stored."""
    from scipy.stats import ttest_ind

    folder = root or reference_dir("cpu") / CPU_MODES
    out = []
    for host in sorted(p for p in Path(folder).glob("*") if (p / "runs").is_dir()):
        cal = load_calibration(host / "calibration.json", "cpu", "fp32")
        runs = tables.load_runs(host / "runs").reset_index(drop=True)
        t, e = _point(cal.roofs).predict(runs)
        runs = runs.assign(step_err=t / runs.step_s - 1, energy_err=e / runs.energy_per_step_j - 1)
        rows = (
            runs.groupby(["execution", "engine"], sort=False)
            .agg(
                runs=("run_id", "size"),
                step_ms=("step_s", lambda v: v.mean() * 1e3),
                energy_per_step_j=("energy_per_step_j", "mean"),
                spread_pct=("step_s", lambda v: (v.max() / v.min() - 1) * 100),
                calibrated_time_error_pct=("step_err", lambda v: v.mean() * 100),
                calibrated_energy_error_pct=("energy_err", lambda v: v.mean() * 100),
            )
            .reset_index()
        )
        native = rows[(rows.execution == "eager") & (rows.engine == "native")]
        if native.empty:
            raise ValueError(f"{host / 'runs'} holds no native eager run to compare the others with")
        base = native.iloc[0]
        eager = runs[(runs.execution == "eager") & (runs.engine == "native")].step_s
        rows = rows.assign(
            time_ratio=rows.step_ms / base.step_ms,
            energy_ratio=rows.energy_per_step_j / base.energy_per_step_j,
            # Welch's t-test of each combination's step times against native eager's (nan for native eager)
            p_value=[
                float("nan")
                if (r.execution, r.engine) == ("eager", "native")
                else float(
                    ttest_ind(
                        runs[(runs.execution == r.execution) & (runs.engine == r.engine)].step_s,
                        eager,
                        equal_var=False,
                    ).pvalue
                )
                for r in rows.itertuples()
            ],
        )
        first = runs.iloc[0]
        out.append(
            {
                "host": host.name,
                "shape": {k: int(first[k]) for k in ("layers", "hidden", "seq_len", "batch_size")},
                "energy_measured": bool(runs.energy_measured.astype(bool).all()),
                "rows": rows.to_dict(orient="records"),
            }
        )
    return out
