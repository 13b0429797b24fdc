"""The replicate noise floor: how far repeated measurements of one configuration fall apart.

Each configuration of a sweep with ``replicates: N`` is measured N times, in separate passes of the sweep
(``companion.runs.profiles``). The spread of its replicates around their mean is the noise a model of
time or energy cannot beat; the validation reports its errors beside it.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
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
    ``n_runs``, ``exact_model`` (``exact_model_floor``: the error of a model that knew every configuration).
    Also the fraction of all runs that reached their CI target (``converged_fraction``).
    """
    out: dict = {
        "definition": "relative deviation of each run from the mean of its configuration's replicates",
        "n_runs": int(len(frame)),
        "n_configs": int(frame.get("config_id", frame.get("run_id", pd.Series())).nunique()),
        "converged_fraction": _float(frame.converged.mean()) if len(frame) else None,
        "metrics": {},
        "runs": [],
    }
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
                per_run.setdefault(
                    row.run_id,
                    {"run_id": row.run_id, "config_id": config_id, "replicate": int(row.replicate)},
                )[f"{metric}_rel_dev"] = dev
        out["metrics"][metric] = {
            "column": column,
            "mape": statistics.fmean(devs) if devs else None,
            "median_ape": statistics.median(devs) if devs else None,
            "max_ape": max(devs) if devs else None,
            "n_configs": configs,
            "n_runs": len(devs),
            # what a model that knew each configuration exactly would score against single runs (see below)
            "exact_model": exact_model_floor(values, column),
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
    out["as_measured"] = as_measured_floor(frame)
    return out


def as_measured_floor(frame: pd.DataFrame) -> dict | None:
    """Where some runs were expressed at their sweep's typical host speed (``tables.host_corrected``): the same
    floor (mean absolute deviation, fraction) of each metric over the runs as measured, and how many runs the
    correction reached; None where it reached none, so the floor above is the measured one."""
    factor = frame["host_speed_factor"] if "host_speed_factor" in frame else pd.Series(dtype=float)
    if not factor.notna().any() or "step_measured_s" not in frame:
        return None
    raw = frame.drop(columns=["step_s", "energy_per_step_j", "host_speed_factor"]).rename(
        columns={"step_measured_s": "step_s", "energy_measured_per_step_j": "energy_per_step_j"}
    )
    return {
        "corrected_runs": int(factor.notna().sum()),
        "mape": {metric: m["mape"] for metric, m in replicate_noise(raw)["metrics"].items()},
    }


MIN_EXACT_CONFIGS = 3  # configurations measured in every pass that the decomposition needs


def exact_model_floor(values: pd.DataFrame, column: str) -> dict | None:
    """The held-out MAPE an exact model would score against single runs: one that knew every configuration's
    step time (or energy), averaged over the passes of the sweep. None with fewer than ``MIN_EXACT_CONFIGS``
    configurations measured in every pass.

    The floor (``mape``) measures runs against the mean of their own replicates, which shares part of each run's
    noise: with independent noise and two replicates it is 1/sqrt(2) of a run's distance from the truth; with
    noise that is a shift of a whole pass it is all of it. The passes tell the two apart. In logs, a run of
    configuration c in pass j is ``mu_c + s_j + e_cj``: ``s_j`` (a pass's shift, the machine moving between
    passes) is the mean over configurations of the run's distance from its configuration's mean, and the
    scatter ``e`` is what remains (two-way layout), its scale taken from its mean absolute value. The
    exact model predicts ``mu_c`` plus the mean shift; its expected APE on a run of pass j is
    E|exp(-(s_j + e)) - 1| over a normal ``e`` (Gauss-Hermite), averaged over passes. What moves both replicates
    of a configuration alike (a slowdown lasting the whole sweep, or one that recurs at the same point of every
    pass) is in neither term, which would raise the estimate; the scatter's scale is itself estimated from the
    passes, so a model scored on the same runs can come in under it (an estimate, not a bound).

    ``values``: rows with ``config_id``, ``replicate`` (the pass) and ``column``. Returns ``mape`` (fraction),
    ``scatter_sd_log``, ``pass_shift_log`` (per pass, in pass order), ``n_configs``, ``passes``."""
    v = values[values[column] > 0]
    wide = v.pivot_table(index="config_id", columns="replicate", values=column, aggfunc="first")
    # the passes most configurations have (a configuration repeated more often than the rest does not set them)
    wide = wide.loc[:, wide.notna().sum() * 2 >= len(wide)].dropna()
    n_configs, passes = wide.shape
    if passes < 2 or n_configs < MIN_EXACT_CONFIGS:
        return None
    y = np.log(wide.to_numpy(float))
    dev = y - y.mean(axis=1, keepdims=True)
    shift = dev.mean(axis=0)
    resid = dev - shift
    # the scatter's scale from its mean absolute value, as the floor and MAPE measure (a variance would let the
    # few far-off runs of a busy machine inflate it): a run's residual in a two-way layout keeps (K - 1) / K of
    # its variance, and a normal e has E|e| = sd sqrt(2 / pi)
    sd = float(np.abs(resid).mean()) / math.sqrt((passes - 1) / passes * 2 / math.pi)
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)  # probabilists' Hermite: weight exp(-x^2 / 2)
    weights = weights / weights.sum()
    ape = float(np.mean([np.sum(weights * np.abs(np.exp(-(s + sd * nodes)) - 1.0)) for s in shift]))
    return {
        "mape": ape,
        "scatter_sd_log": sd,
        "pass_shift_log": [float(s) for s in shift],
        "n_configs": int(n_configs),
        "passes": int(passes),
    }


def _float(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x
