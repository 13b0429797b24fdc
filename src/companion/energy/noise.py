"""The replicate noise floor: how far repeated measurements of one configuration fall apart.

Each configuration of a sweep with ``replicates: N`` is measured N times, in separate passes of the sweep
(``companion.runs.profiles``). The spread of its replicates around their mean is the noise a model of
time or energy cannot beat; the validation reports its errors beside it.
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

# metric name in the artifact -> column of the tidy frame (companion.energy.tables)
METRICS = {"time_per_step": "step_s", "energy_per_step": "energy_per_step_j"}


def replicate_noise(frame: pd.DataFrame) -> dict:
    """Per-run relative deviation from its configuration's mean, and a summary per metric.

    ``frame``: the tidy runs frame (columns ``run_id``, ``config_id``, ``replicate``, ``step_s``,
    ``energy_per_step_j``, ``converged``). For every configuration with at least two replicates and each
    metric, a run's deviation is ``(x - mean) / mean`` (a fraction; with two replicates
    ``|a - b| / (a + b)``). Summary per metric: ``mape`` (mean absolute deviation, fraction),
    ``median_ape``, ``max_ape``, ``n_configs`` (configurations with >= 2 replicates of that metric),
    ``n_runs``. Also the fraction of all runs that reached their CI target (``converged_fraction``).
    """
    out: dict = {"definition": "relative deviation of each run from the mean of its configuration's replicates",
                 "n_runs": int(len(frame)),
                 "n_configs": int(frame.get("config_id", frame.get("run_id", pd.Series())).nunique()),
                 "converged_fraction": _float(frame.converged.mean()) if len(frame) else None,
                 "metrics": {}, "runs": []}
    frame = frame.copy()
    if "config_id" not in frame:  # a frame from before replicates: every run its own configuration
        frame["config_id"] = frame.run_id
    if "replicate" not in frame:
        frame["replicate"] = 0
    per_run: dict[str, dict] = {}
    out["between_passes"] = {}
    for metric, column in METRICS.items():
        devs, ratios = [], []  # ratios: each configuration's last replicate over its first
        configs = 0
        values = frame[["run_id", "config_id", "replicate", column]].dropna(subset=[column])
        for config_id, group in values.groupby("config_id"):
            if len(group) < 2:
                continue
            configs += 1
            passes = group.sort_values("replicate")
            if passes.replicate.nunique() > 1 and float(passes[column].iloc[0]) > 0:
                ratios.append(float(passes[column].iloc[-1]) / float(passes[column].iloc[0]))
            mean = float(group[column].mean())
            for _, row in group.iterrows():
                dev = (float(row[column]) - mean) / mean
                devs.append(abs(dev))
                per_run.setdefault(row.run_id, {"run_id": row.run_id, "config_id": config_id,
                                                "replicate": int(row.replicate)})[f"{metric}_rel_dev"] = dev
        out["metrics"][metric] = {
            "column": column,
            "mape": statistics.fmean(devs) if devs else None,
            "median_ape": statistics.median(devs) if devs else None,
            "max_ape": max(devs) if devs else None,
            "n_configs": configs,
            "n_runs": len(devs),
        }
        # how the machine moved between passes (> 1: the later pass ran slower or used more energy); a median
        # ratio far from 1 says the floor is mostly drift of the whole machine, not scatter within a pass
        out["between_passes"][metric] = {
            "median_ratio": statistics.median(ratios) if ratios else None,
            "median_abs_change": statistics.median(abs(r - 1) for r in ratios) if ratios else None,
            "n_configs": len(ratios),
        }
    out["n_configs_replicated"] = max((m["n_configs"] for m in out["metrics"].values()), default=0)
    out["runs"] = sorted(per_run.values(), key=lambda r: (r["config_id"], r["replicate"]))
    return out


def _float(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x
