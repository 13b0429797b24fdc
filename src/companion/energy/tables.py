"""Tidy frames from run records: one row per finished run, proxies and measured eta added."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from companion.energy import hardware, proxies
from companion.energy.efficiency import measured_eta
from companion.errors import ConfigError
from companion.runs.carbon import carbon_intensity
from companion.runs.provenance import host_slug
from companion.runs.records import load_records


def attention_kernel(rec: dict) -> tuple[str, bool]:
    """('fused' | 'math', inferred): the kernel the run recorded, else inferred conservatively from its
    config (eager always materialises scores; SDPA on CPU falls back to the math kernel with dropout > 0)."""
    recorded = rec.get("model", {}).get("attention_kernel")
    if recorded:
        return recorded, False
    c = rec["config"]
    m = c["model"]
    if m["attn"] == "eager" or (c["device"] == "cpu" and m.get("dropout", 0.1) > 0):
        return "math", True
    return "fused", True


def run_row(rec: dict) -> dict:
    c, t, tok, e = rec["config"], rec["time"], rec["tokens"], rec["energy"]
    m, d, lay = c["model"], c["data"], c["layout"]
    lengths = d["lengths"]
    tag = {
        "fixed": "fixed",
        "uniform": f"uniform>={lengths['min_len']}",
        "histogram": "hist:" + ",".join(f"{int(n)}" for n, _ in lengths["bins"]),
    }[lengths["kind"]]
    kernel, inferred = attention_kernel(rec)
    return {
        "run_id": rec["run_id"],
        "profile": rec["profile"],
        "device": c["device"],
        "device_name": c["device_name"],
        "precision": c["precision"],
        "mode": c["mode"],
        "tp": lay["tp"],
        "dp": lay["dp"],
        "world_size": c["world_size"],
        "layers": m["layers"],
        "hidden": m["hidden"],
        "heads": m["heads"],
        "ffn": m["ffn"] or 4 * m["hidden"],
        "vocab": m["vocab"],
        "max_positions": m["max_positions"],
        "num_labels": m["num_labels"],
        "attn": m["attn"],
        "attention_kernel": kernel,
        "attention_kernel_inferred": inferred,
        "dropout": m.get("dropout", 0.1),
        "head_dim": m["hidden"] // m["heads"],
        "seq_len": d["seq_len"],
        "lengths": tag,
        "batch_size": d["batch_size"],
        "parameters": rec["model"]["parameters"],
        "real_tokens": tok["real_per_step"],
        "padded_tokens": tok["padded_per_step"],
        "attention_pairs": tok.get("attention_pairs_per_step"),
        "step_s": t["step_mean_s"],
        # the host's speed beside the run (runs.hostspeed): the reference workload's time, the geometric mean of
        # its timings just before and just after the windows (None: a run of several ranks, or a record from before
        # it)
        "host_speed_s": host_speed_seconds(rec.get("host_speed")),
        "host_speed_workload": (rec.get("host_speed") or {}).get("workload"),
        "step_ci95_rel": t["step_ci95_rel"],
        "steps_measured": t["steps_measured"],
        "target_rel_ci": t.get("target_rel_ci"),
        "converged": t["converged"],
        "energy_per_step_j": e.get("per_step_mean_j"),
        "energy_ci95_rel": e.get("per_step_ci95_rel"),
        "energy_measured": bool(e["measured"]),
        "energy_source": e["source"] if isinstance(e["source"], str) else "+".join(e["source"]),
        "energy_scope": e["scope"],
        "metered_units": len(e.get("per_unit_j") or {}) or None,
        "mean_power_w": e.get("mean_power_w"),
        **_carbon(e.get("per_step_mean_j"), c.get("country", "USA")),
        "samples_per_s": tok["samples_per_s"],
        "peak_memory_bytes": rec["memory"]["peak_bytes_max_rank"],
        "loss_first": rec["loss"]["first"],
        "loss_last": rec["loss"]["last"],
        # replicates of one configuration share config_id (records before replicates: config_id = run_id)
        "replicate": c.get("replicate", 0),
        "config_id": rec.get("config_id", rec["run_id"]),
        "threads_per_rank": (rec.get("threads") or {}).get("per_rank"),
        "host_cpus": (rec.get("threads") or {}).get("host_cpus"),
        "oversubscribed": bool((rec.get("threads") or {}).get("oversubscribed", False)),
        "data_source": d.get("source", "synthetic"),
        # eager, compile or cudagraphs; native or accelerate (records from before either axis: eager, native)
        "execution": c.get("execution", "eager"),
        "engine": c.get("engine", "native"),
        "checkpoint": m.get("checkpoint"),
        "ram_energy_share": _component_share(e, "ram"),
        # the machine, by its CPU model: results group by host (one device name, 'cpu', covers many machines)
        "host": host_slug(((rec.get("provenance") or {}).get("hardware") or {}).get("cpu")),
    }


def host_speed_seconds(speed: dict | None) -> float | None:
    """A record's host-speed timing (its ``host_speed``, a run's or a calibration probe's): the geometric mean of
    the workload's time before and after (s); None where it was not timed."""
    if not speed or not speed.get("before_s") or not speed.get("after_s"):
        return None
    return float(np.sqrt(speed["before_s"] * speed["after_s"]))


# what a run's host-speed timing is comparable with: the same workload beside a run of as many ranks (one-rank runs
# alone time it, on one thread whatever the run's threads: ``runs.hostspeed``)
HOST_SPEED_KIND = ["host_speed_workload", "world_size"]


def _on_cpu(runs: pd.DataFrame) -> pd.Series:
    """The runs whose steps ran on the host's cores (all, in a frame that does not say): the ones the host-speed
    correction applies to, and the ones its reference is taken over."""
    return runs["device"] == "cpu" if "device" in runs else pd.Series(True, index=runs.index)


def host_speed_reference(runs: pd.DataFrame) -> pd.DataFrame:
    """The sweep's typical host speed per kind of timing (``HOST_SPEED_KIND``): the median of its runs'
    ``host_speed_s`` (column ``host_speed_reference_s``); empty where no run timed the reference."""
    cols = [*HOST_SPEED_KIND, "host_speed_reference_s"]
    if "host_speed_s" not in runs or not runs.host_speed_s.notna().any():
        return pd.DataFrame(columns=cols)
    timed = runs[runs.host_speed_s.notna() & (runs.host_speed_s > 0) & _on_cpu(runs)]
    return (
        timed.groupby(HOST_SPEED_KIND)
        .host_speed_s.median()
        .rename("host_speed_reference_s")
        .reset_index()[cols]
    )


def host_corrected(runs: pd.DataFrame, reference: pd.DataFrame | None) -> pd.DataFrame:
    """``runs`` with every run that timed the host-speed reference expressed at the sweep's typical host speed.

    A shared host's speed wanders by 10-30 % over seconds and every step's time with it (``runs.hostspeed``). A run
    whose record timed the reference workload beside it gets ``host_speed_factor`` = its timing / the sweep's
    median timing of the same kind (``host_speed_reference``: above 1, the host ran slower than is typical), and
    its step time, energy and CO2 per step divided by it (its samples per second multiplied): the time the step
    takes at the host's typical speed, which is what the models fit and predict. ``step_measured_s`` and
    ``energy_measured_per_step_j`` keep what was measured, for every run; a run without the timing, or of a kind
    the reference lacks, keeps its measurements (factor NaN), and so does a GPU run: the host sets only a
    host-bound step, and no model yet says which part of a GPU step is the host's. ``reference`` None corrects
    nothing."""
    out = runs.copy()
    out["step_measured_s"] = out["step_s"]
    out["energy_measured_per_step_j"] = out["energy_per_step_j"]
    factor = pd.Series(np.nan, index=out.index)
    if reference is not None and len(reference) and "host_speed_s" in out:
        ref = out[HOST_SPEED_KIND].merge(reference, how="left", on=HOST_SPEED_KIND).host_speed_reference_s
        factor = pd.Series(out.host_speed_s.to_numpy(float) / ref.to_numpy(float), index=out.index)
        factor = factor.where(np.isfinite(factor) & (factor > 0) & _on_cpu(out))
    out["host_speed_factor"] = factor
    k = factor.fillna(1.0)
    for col in ("step_s", "energy_per_step_j", "co2_per_step_kg"):
        if col in out:
            out[col] = out[col] / k
    if "samples_per_s" in out:
        out["samples_per_s"] = out["samples_per_s"] * k
    return out


def _component_share(energy: dict, component: str) -> float | None:
    """The share of a run's joules that one metered component (cpu, gpu, ram) accounts for; None where the
    record lists no components or lacks this one."""
    parts = {k: (v or {}).get("energy_j") for k, v in (energy.get("components") or {}).items()}
    total = sum(v for v in parts.values() if v is not None)
    return parts[component] / total if parts.get(component) is not None and total > 0 else None


def _carbon(energy_per_step_j: float | None, country: str) -> dict:
    """CO2 per step at analysis time: the record's energy x the carbon intensity of its ``country``.

    Records never carry a CO2 figure of their own any more; one that does (written before) is read the
    same way, from its energy, so every row uses the same intensity table.
    """
    if energy_per_step_j is None:
        return {"co2_per_step_kg": None, "carbon_g_per_kwh": None}
    g_per_kwh = carbon_intensity(country)["g_per_kwh"]
    return {"co2_per_step_kg": energy_per_step_j / 3.6e6 * g_per_kwh / 1000.0, "carbon_g_per_kwh": g_per_kwh}


def runs_frame(records: list[dict]) -> pd.DataFrame:
    """Finished runs as a frame (failed runs are left out; count them from the records).

    No finished run at all is a ConfigError: there is nothing to analyse.
    """
    rows = [run_row(r) for r in records if r.get("status") == "ok"]
    if not rows:
        failed = [r for r in records if r.get("status") == "failed"]
        why = ""
        if failed:
            err = failed[0].get("error") or {}
            why = f" ({len(failed)} failed; e.g. {failed[0].get('run_id')}: {err.get('type')}: {err.get('message')})"
        raise ConfigError(
            f"no finished runs to analyse among {len(records)} record(s){why}; run the sweep "
            "(companion sweep --profile <name>), fix what failed and re-run with --retry-failed"
        )
    return pd.DataFrame(rows).sort_values("run_id").reset_index(drop=True)


def load_runs(folder: Path) -> pd.DataFrame:
    return runs_frame(load_records(Path(folder)))


def off_grid_runs(
    folders: dict, measured_roofs: dict | None = None, host_reference: pd.DataFrame | None = None
) -> dict:
    """{split: its runs with their proxies (``proxies_frame``)} for the off-grid groups' record folders
    ({split: folder or None}); None for a group with no folder or no records (an archive packed before it
    existed, a profile without it). ``host_reference``: the sweep's (``host_speed_reference``), so the off-grid
    runs are expressed at the host speed of the runs the models were fitted on."""
    return {
        split: proxies_frame(load_runs(folder), measured_roofs, host_reference)
        if folder is not None and any(Path(folder).glob("*.json"))
        else None
        for split, folder in folders.items()
    }


def step_shape(row) -> proxies.StepShape:
    """What the proxies need of a run (a row of ``runs_frame``, or any row with the same columns)."""
    return proxies.StepShape(
        layers=row.layers,
        hidden=row.hidden,
        heads=row.heads,
        ffn=row.ffn,
        vocab=row.vocab,
        max_positions=row.max_positions,
        num_labels=row.num_labels,
        sequences=row.batch_size,
        padded_tokens=row.padded_tokens,
        attention_pairs=row.attention_pairs,
        tp=row.tp,
        dp=row.dp,
        precision=row.precision,
        fused_attention=row.attention_kernel == "fused",
    )


def proxies_frame(
    runs: pd.DataFrame, measured_roofs: dict | None = None, host_reference: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Add FLOPs, bytes, communication, arithmetic intensity, roofline position and measured eta, every run
    first expressed at the sweep's typical host speed (``host_corrected``; ``host_reference``, the sweep's
    ``host_speed_reference``: None corrects nothing).

    ``measured_roofs`` maps device names whose table entry says 'measure' (the CPU) to measured roofs.
    """
    out = measured_eta(host_corrected(runs, host_reference))
    records = []
    for _, row in out.iterrows():
        shape = step_shape(row)
        p = proxies.step_proxies(shape)
        if p.pop("parameters") != row.parameters:
            raise AssertionError(f"{row.run_id}: the proxies' parameter count disagrees with the model's")
        roofs = (measured_roofs or {}).get(row.device_name)
        peak = hardware.peak_flops_per_s(row.device_name, row.precision, roofs)
        bw = hardware.bandwidth_bytes_per_s(row.device_name, roofs)
        p["peak_flops_per_s"] = peak
        p["bandwidth_bytes_per_s"] = bw
        p["ridge_flops_per_byte"] = peak / bw
        p["roofline_time_s"] = proxies.roofline_time_s(p["flops_per_step"], p["bytes_per_step"], peak, bw)
        p["achieved_flops_per_s"] = p["flops_per_step"] / row.step_s
        p["mfu"] = proxies.mfu(p["flops_per_rank"], row.step_s, peak)
        p["flops_per_j"] = p["flops_per_step"] / row.energy_per_step_j if row.energy_per_step_j else None
        records.append(p)
    return pd.concat([out.reset_index(drop=True), pd.DataFrame(records)], axis=1)


def usable_runs(df: pd.DataFrame, max_step_ci95_rel: float | None) -> tuple[pd.DataFrame, list[str]]:
    """Runs whose per-step time is known to within ``max_step_ci95_rel`` (95 % CI half-width over the mean),
    and the run ids left out. A run disturbed by other load on the machine stops at its time cap with a wide
    interval; fitting or scoring on it measures the disturbance, not the model. Runs of a fixed-step protocol
    (no precision target, ``target_rel_ci`` 0) asked for no interval and are kept. None keeps every run."""
    if max_step_ci95_rel is None or df.empty:
        return df, []
    fixed_steps = df.target_rel_ci.fillna(1.0) <= 0 if "target_rel_ci" in df else False
    keep = (df.step_ci95_rel.fillna(np.inf) <= max_step_ci95_rel) | fixed_steps
    return df[keep].reset_index(drop=True), sorted(df.run_id[~keep])


def filter_counts(df: pd.DataFrame, left_out) -> dict:
    """How many of ``df``'s runs a filter kept (``left_out``: the run ids it left out), in all and among the
    parallel runs (world size > 1), whose few measured steps make their intervals the widest."""
    out = set(left_out)
    gone = df.run_id.isin(out) if "run_id" in df else pd.Series(False, index=df.index)
    par = df.world_size > 1 if "world_size" in df else pd.Series(False, index=df.index)
    return {
        "runs": int(len(df)),
        "kept": int((~gone).sum()),
        "parallel_runs": int(par.sum()),
        "parallel_kept": int((par & ~gone).sum()),
    }
