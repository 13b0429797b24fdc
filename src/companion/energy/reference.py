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

from companion.energy import opmodel, tables
from companion.energy.calibration import load_calibration
from companion.energy.models import OperatorPoint
from companion.paths import reference_dir

TIERS = ("prior", "calibrated", "fitted")
TARGETS = ("step_s", "energy_per_step_j")


def reference_runs(device: str, root: Path | None = None) -> pd.DataFrame:
    """The finished runs of ``device``'s reference folder, as the analysis stages read runs."""
    return tables.load_runs((root or reference_dir(device)) / "runs")


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
        rows.append({"run_id": r["name"], "layers": L, "hidden": h, "ffn": 4 * h, "heads": h // 64, "tp": 1, "dp": 1,
                     "vocab": 30522, "max_positions": 512, "num_labels": 2, "padded_tokens": float(b * s),
                     "attention_pairs": float(b * s * s), "batch_size": b, "seq_len": s, "precision": "bf16",
                     "attention_kernel": "fused", "world_size": 1, "metered_units": 1,
                     "step_s": r["step_ms"] / 1e3, "energy_per_step_j": np.nan})
    return pd.DataFrame(rows)


def tier_devices(device: str, root: Path | None = None) -> dict[str, opmodel.DeviceRoofs]:
    """The prior's and the calibrated tier's roofs of ``device`` (its shipped calibration, checked)."""
    folder = root or reference_dir(device)
    cal = load_calibration(folder / f"{device}.json", device, "bf16")
    return {"prior": opmodel.roofs_from_spec(device, "bf16"), "calibrated": cal.roofs}


def _point(dev: opmodel.DeviceRoofs) -> OperatorPoint:
    coef = opmodel.prior_coefficients(dev)
    return OperatorPoint(dev, coef["time"], coef["energy"])


def _fit_point(dev: opmodel.DeviceRoofs, df: pd.DataFrame) -> OperatorPoint:
    _, terms, time = opmodel.fit_time_model(df, dev)
    energy = opmodel.fit_energy_coefficients(terms, df.step_s.to_numpy(float), opmodel.metered_units(df),
                                             df.energy_per_step_j.to_numpy(float), time)
    return OperatorPoint(dev, time, energy)


def score_reference(device: str, root: Path | None = None, level: float = 0.9) -> pd.DataFrame:
    """One row per run and tier: measured and predicted step time and energy, and whether the tier's stated
    interval at ``level`` covers the measurement (prior and calibrated: the hardware table's factor; the fitted
    tier's leave-one-out has too few runs for a conformal interval: none)."""
    from companion.energy import hardware

    df = reference_runs(device, root).reset_index(drop=True)
    devs = tier_devices(device, root)
    factor = float(hardware.priors().get("gpu", {}).get("interval_factor", 2.0))
    z = NormalDist().inv_cdf
    half = math.log(factor) * z((1 + level) / 2) / z((1 + 0.9) / 2)
    out = []
    for tier in TIERS:
        if tier == "fitted":
            preds = []
            for i in range(len(df)):
                train = df.drop(index=i)
                t, e = _fit_point(devs["calibrated"], train).predict(df.iloc[[i]])
                preds.append((t[0], e[0]))
            t, e = np.array(preds).T
        else:
            t, e = _point(devs[tier]).predict(df)
        for k, r in df.iterrows():
            row = {"tier": tier, "run_id": r.run_id, "layers": r.layers, "hidden": r.hidden, "seq_len": r.seq_len,
                   "batch_size": r.batch_size, "flops_per_step": float(r.get("flops_per_step", np.nan)),
                   "step_ci95_rel": float(r.get("step_ci95_rel", np.nan))}
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
        out.append(rows[["run_id", "step_s"]].assign(tier=tier, step_s_predicted=t,
                                                     step_s_ape=np.abs(t / rows.step_s - 1) * 100))
    return pd.concat(out, ignore_index=True)


def summary(scores: pd.DataFrame) -> pd.DataFrame:
    """Per tier: MAPE of time and energy, and how many runs each stated interval covers."""
    g = scores.groupby("tier", sort=False)
    return pd.DataFrame({
        "runs": g.size(),
        "time_mape_pct": g.step_s_ape.mean(), "energy_mape_pct": g.energy_per_step_j_ape.mean(),
        "time_covered": g.step_s_covered.apply(lambda c: int(c.sum()) if c.notna().all() else None),
        "energy_covered": g.energy_per_step_j_covered.apply(lambda c: int(c.sum()) if c.notna().all() else None),
    }).reindex([t for t in TIERS if t in set(scores.tier)])
