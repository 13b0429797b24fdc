"""The figures the book's results quote, read from the stage artifacts (never typed by hand): the held-out
scores and the picks from them, the replicate noise floor, the runs the scores rest on, the verdict's criteria
and numbers, the best baseline, the worst split and the law's coefficients. Plain data (dicts, frames, floats)
or the short formatted figures a page glues ("9.9 %"); the tables that show them are
``companion.report.tables``', the sentences that say them ``companion.report.sentences``'.

The primary comparison is ``validation.json``'s ``model_scores`` (per split, model and target: held-out MAPE
with its group-bootstrap interval and the coverage of the models' 90 % intervals), ``model_scores_pooled``
(every cross-validation split pooled; the off-grid holdout apart) and ``model_verdict``. The noise floor is
the replicate noise of the runs the validation scored (``validation.json``'s ``noise``; stage 02's
``noise.json``, over every run, where it has none).

Every reader reads the artifacts defensively: a missing file or a changed schema gives "not available" for
the values it would have produced, never an error, so the headline survives a rewrite of a later stage.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from companion.energy import registry

NA = "not available"
POOLED = "pooled"

# The models of the primary comparison, in the order the book shows them, in the book's words (the registry's)
MODELS = {spec.name: spec.label for spec in registry.SPECS if spec.build is not None}
PRIMARY, PAPER, PRE_RUN_BASELINES = registry.PRIMARY, registry.PAPER, registry.PRE_RUN_BASELINES

# Short column names for the splits (the page's legend says what each holds out, from validation.json).
SPLITS = {
    "leave_one_size_out": "size",
    "leave_one_degree_out": "degree",
    "leave_one_mode_out": "mode",
    "leave_one_head_dim_out": "head dim.",
    "extrapolate_largest": "largest",
    "holdout": "off-grid",
    "test": "test set",
}
TARGETS = {"time": "time per step", "energy": "energy per step"}


# a host slug's words (``runs.provenance.host_slug``: 'amd-epyc' -> 'AMD EPYC'), for pages
HOST_WORDS = {
    "amd": "AMD",
    "intel": "Intel",
    "epyc": "EPYC",
    "xeon": "Xeon",
    "unknown": "unknown",
    "cpu": "CPU",
}


def host_slug_words(slug) -> str:
    """A host slug as a page writes it: vendor and family in their own spelling, model numbers upper case."""
    words = str(slug).split("-")
    return " ".join(
        HOST_WORDS.get(w, w.upper() if any(c.isdigit() for c in w) else w.capitalize()) for w in words
    )


def read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return pd.DataFrame()


def finite(x) -> float | None:
    """A finite number, or None (strings, booleans, NaN and missing values are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    return float(x) if math.isfinite(float(x)) else None


def listed(items: list[str]) -> str:
    """Items as a sentence lists them: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def span(values, digits: int = 0) -> str:
    """Figures of several machines or builds as one phrase: "7 %" for one value, "6–21 %" for a range."""
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def pct(x, digits: int = 1) -> str:
    v = finite(x)
    return NA if v is None else f"{v:.{digits}f} %"


def model_label(name) -> str:
    return registry.label(name)


def model_name(name) -> str:
    """The model's name in a sentence: its table label without the parenthesis."""
    return model_label(name).split(" (")[0]


def split_label(name) -> str:
    return SPLITS.get(name, str(name).replace("_", " "))


def verdict_criteria(validation: dict | None = None) -> dict:
    """The thresholds the primary model's verdict judged by, as validation.json's verdict records them (those of
    an artifact written before it recorded them: ``validation.VERDICT_CRITERIA``)."""
    from companion.energy.validation import VERDICT_CRITERIA

    v = validation.get("model_verdict") if isinstance(validation, dict) else None
    c = {**VERDICT_CRITERIA, **((v or {}).get("criteria") or {} if isinstance(v, dict) else {})}
    lo, hi = c["coverage"]
    return {**c, "coverage": (float(lo), float(hi))}


def level_pct(validation: dict) -> str:
    """The level of the models' prediction intervals (validation.json's ``level``), in %."""
    v = finite(validation.get("level")) if isinstance(validation, dict) else None
    return NA if v is None else f"{100 * v:.0f}"


def default_pct(module: str, qualname: str, param: str = "level") -> str:
    """A level parameter's default (%) of a function that produced an artifact's numbers, e.g. the level of the
    MAPE's group-bootstrap interval, so the page states the level that was used instead of typing it."""
    try:
        import importlib

        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        v = finite(inspect.signature(obj).parameters[param].default)
        return NA if v is None else f"{100 * v:.0f}"
    except Exception:  # renamed or removed: the page says "not available"
        return NA


def mape_level_pct() -> str:
    """The level of the MAPE's group-bootstrap interval (the scoring's default), in %."""
    return default_pct("companion.energy.validation", "group_bootstrap_mape")


COEF_LEVEL = (
    "companion.energy.laws",
    "Fit.coefficient_table",
)  # the level of the laws' coefficient intervals
PREDICT_LEVEL = (
    "companion.energy.predict",
    "predict_tiered",
)  # ... and of the book's predictions (explore.csv)


# ------------------------------------------------------------------------------------ the primary comparison
SCORE_COLUMNS = [
    "split",
    "model",
    "target",
    "n",
    "mape_pct",
    "mape_lo_pct",
    "mape_hi_pct",
    "coverage_pct",
    "coverage_lo_pct",
    "coverage_hi_pct",
    "runs_floor_pct",
    "exact_floor_pct",
]


def scores(validation: dict) -> pd.DataFrame:
    """``model_scores`` and ``model_scores_pooled`` (split "pooled") as one tidy frame; empty when absent."""
    try:
        by_split = pd.DataFrame(validation["model_scores"])
        pooled = pd.DataFrame(validation.get("model_scores_pooled") or [])
        if len(pooled):
            pooled = pooled.assign(split=POOLED)
        df = pd.concat([by_split, pooled], ignore_index=True)
        if not {"split", "model", "target", "mape_pct"} <= set(df.columns):
            return pd.DataFrame(columns=SCORE_COLUMNS)
        for col in SCORE_COLUMNS[3:]:
            df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
        return df[SCORE_COLUMNS].reset_index(drop=True)
    except (KeyError, TypeError, ValueError, AttributeError):
        return pd.DataFrame(columns=SCORE_COLUMNS)


def pick(s: pd.DataFrame, split: str, model: str, target: str) -> pd.Series | None:
    if s.empty:
        return None
    r = s[(s.split == split) & (s.model == model) & (s.target == target)]
    return r.iloc[0] if len(r) else None


def field(s: pd.DataFrame, model, target: str, split: str = POOLED, col: str = "mape_pct"):
    r = pick(s, split, model, target) if model else None
    return None if r is None else r[col]


def mape_text(s: pd.DataFrame, split: str, model: str, target: str) -> str:
    """'9.9 % [8.1, 10.8]': a held-out MAPE with its 90 % interval, or "not available"."""
    r = pick(s, split, model, target)
    if r is None or finite(r.mape_pct) is None:
        return NA
    lo, hi = finite(r.mape_lo_pct), finite(r.mape_hi_pct)
    return f"{r.mape_pct:.1f} %" + (f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else "")


def split_order(s: pd.DataFrame) -> list[str]:
    """Pooled first, then the splits in the book's order, then any split the book does not know yet."""
    present = list(dict.fromkeys(s.split)) if len(s) else []
    return [x for x in [POOLED, *SPLITS] if x in present] + [
        x for x in present if x != POOLED and x not in SPLITS
    ]


def reads_measured_time(model) -> bool:
    """A model that reads each run's measured time: an estimate after the fact, not a prediction."""
    spec = registry.REGISTRY.get(model)
    return bool(spec is not None and spec.uses_measured_time)


def best_pre_run_baseline(validation: dict, target: str):
    """The verdict's best pre-run baseline for the target, else the pooled best of the pre-run baselines."""
    t = (
        (((validation.get("model_verdict") or {}).get("targets") or {}).get(target) or {})
        if isinstance(validation, dict) and isinstance(validation.get("model_verdict"), dict)
        else {}
    )
    if isinstance(t, dict) and t.get("best_baseline"):
        return t["best_baseline"]
    s = scores(validation)
    cand = [
        (float(field(s, m, target)), m) for m in PRE_RUN_BASELINES if finite(field(s, m, target)) is not None
    ]
    return min(cand)[1] if cand else None


def worst_split(s: pd.DataFrame, model: str, target: str) -> tuple[str | None, float | None]:
    """The cross-validation split (not pooled, not off-grid) with the model's largest held-out MAPE."""
    if s.empty:
        return None, None
    r = s[(s.model == model) & (s.target == target) & ~s.split.isin([POOLED, "holdout", "test"])].dropna(
        subset=["mape_pct"]
    )
    if r.empty:
        return None, None
    r = r.loc[r.mape_pct.idxmax()]
    return r.split, float(r.mape_pct)


# ------------------------------------------------------------------------------------------ the noise floor
def noise_floor(noise: dict) -> dict:
    """The replicate noise floor (validation.json's ``noise``, or noise.json): per target the mean absolute
    relative deviation (%) of repeated runs from their configuration's mean, how many configurations count, and
    (``exact_<target>``) what a model that knew every configuration would score against single runs."""
    out = {"time": NA, "energy": NA, "n_configs": NA, "n_runs": NA, "exact_time": NA, "exact_energy": NA}
    metrics = noise.get("metrics") if isinstance(noise, dict) else None
    if not isinstance(metrics, dict):
        return out
    for target in TARGETS:
        m = metrics.get(f"{target}_per_step")
        if (
            isinstance(m, dict)
            and finite(m.get("mape")) is not None
            and (finite(m.get("n_configs")) or 0) > 0
        ):
            out[target] = f"{100 * m['mape']:.1f} %"
            out["n_configs"], out["n_runs"] = str(int(m["n_configs"])), str(int(m.get("n_runs") or 0) or NA)
            exact = m.get("exact_model")  # what an exact model would score (noise.exact_model_floor)
            if isinstance(exact, dict) and finite(exact.get("mape")) is not None:
                out[f"exact_{target}"] = f"{100 * exact['mape']:.1f} %"
    return out


def target_ci_pct(runs: pd.DataFrame) -> str:
    """The runs' stopping target: the relative 95 % CI half-width a run measured until (from runs.csv), in %."""
    try:
        values = sorted(set(pd.to_numeric(runs["target_rel_ci"], errors="coerce").dropna() * 100))
    except (KeyError, TypeError):
        return NA
    return " or ".join(f"{v:g}" for v in values) if values else NA


# ------------------------------------------------------------------------------- the runs the scores rest on
BUSY_KEPT_FRACTION = (
    0.75  # the step-time filter keeping fewer of the sweep's runs than this says the machine was busy
)


def ci_filter_counts(validation: dict) -> tuple[dict | None, dict | None, float | None]:
    """validation.json's ``ci_filter``: the sweep's counts (None where the artifact holds none), the off-grid
    runs' counts (None where there were none) and the filter's limit (relative 95 % CI half-width)."""
    f = validation.get("ci_filter") if isinstance(validation, dict) else None
    sweep = f.get("sweep") if isinstance(f, dict) else None
    if not isinstance(sweep, dict) or not sweep.get("runs"):
        return None, None, None
    held = f.get("holdout")
    return (
        sweep,
        held if isinstance(held, dict) and held.get("runs") else None,
        finite(f.get("max_step_ci95_rel")),
    )


def busy(counts) -> bool:
    """Whether the step-time filter kept fewer than ``BUSY_KEPT_FRACTION`` of a sweep's runs, or of its parallel runs."""
    if not isinstance(counts, dict):
        return False
    pairs = [
        (counts.get("kept", 0), counts.get("runs", 0)),
        (counts.get("parallel_kept", 0), counts.get("parallel_runs", 0)),
    ]
    return any(n and k < BUSY_KEPT_FRACTION * n for k, n in pairs)


# ------------------------------------------------------------------------------------------ the verdict
def verdict_target(validation: dict, target: str) -> dict | None:
    v = validation.get("model_verdict") if isinstance(validation, dict) else None
    t = (
        (v.get("targets") or {}).get(target)
        if isinstance(v, dict) and isinstance(v.get("targets"), dict)
        else None
    )
    return t if isinstance(t, dict) else None


def verdict_model(validation: dict) -> str:
    v = validation.get("model_verdict") if isinstance(validation, dict) else None
    return model_name(v["model"]).split(",")[0] if isinstance(v, dict) and v.get("model") else NA


def coverage_consistency(t: dict) -> str:
    """Whether each split's coverage is one exact intervals show on its number of runs, naming those that are not."""
    flag, ranges, cov = (
        t.get("coverage_consistent"),
        t.get("coverage_range_pct_by_split"),
        t.get("coverage_pct_by_split"),
    )
    if flag is None:
        return NA
    if flag or not isinstance(ranges, dict) or not isinstance(cov, dict):
        return "yes" if flag else "no"
    out = [
        f"{split_label(k)} {cov[k]:.0f} % against {lo:.0f}–{hi:.0f} %"
        for k, (lo, hi) in ranges.items()
        if finite(cov.get(k)) is not None and not lo - 1e-9 <= cov[k] <= hi + 1e-9
    ]
    return "no" + (f" ({'; '.join(out)})" if out else "")


def how_often(p: float) -> str:
    """A probability as words a reader weighs at a glance: "4 % of the time"."""
    return f"{100 * p:.0f} % of the time" if p >= 0.01 else "less than 1 % of the time"


def coverage_summary(validation: dict) -> dict:
    """The primary model's interval coverage, as text: pooled per target, the lowest cross-validation split
    (over both targets), the off-grid runs per target, whether each split's is one exact intervals show, and how
    often exact intervals would put every split within the criterion's range (``chance_<target>``)."""
    s = scores(validation)
    out = {f"{k}_{t}": NA for k in ("pooled", "holdout", "consistent", "chance") for t in TARGETS} | {
        "lowest": NA
    }
    for t in TARGETS:
        v = verdict_target(validation, t)
        out[f"consistent_{t}"] = NA if v is None else coverage_consistency(v)
        if v is not None and finite(v.get("coverage_in_range_chance")) is not None:
            out[f"chance_{t}"] = how_often(v["coverage_in_range_chance"])
    if s.empty:
        return out
    for t in TARGETS:
        for key, split in (("pooled", POOLED), ("holdout", "holdout")):
            out[f"{key}_{t}"] = pct(field(s, PRIMARY, t, split, "coverage_pct"), 0)
    cv = s[(s.model == PRIMARY) & ~s.split.isin([POOLED, "holdout", "test"])].dropna(subset=["coverage_pct"])
    if len(cv):
        r = cv.loc[cv.coverage_pct.idxmin()]
        out["lowest"] = (
            f"{r.coverage_pct:.0f} % ({TARGETS.get(r.target, r.target)}, {split_label(r.split)} held out)"
        )
    return out


# ------------------------------------------------------------------------------ the paper and this build
def law_coefficients(fit: dict, law: str = "roofline_power_law") -> dict:
    """α and β of the paper's law with their intervals, as text ("not available" when the fit lacks them)."""
    out = {"alpha": NA, "beta": NA}
    try:
        from companion.energy.fit import FittedModel

        coef = FittedModel(fit).coefficient_table()
        c = coef[(coef.law == law) & (coef.target == "energy_per_step_j")].set_index("param")
        for name in out:
            out[name] = f"{c.loc[name, 'value']:.2f} [{c.loc[name, 'lo']:.2f}, {c.loc[name, 'hi']:.2f}]"
    except Exception:  # any schema change of fit.json: the headline says "not available"
        pass
    return out


def headline_record(validation: dict, noise: dict, verdict: pd.DataFrame) -> dict:
    """The numbers behind the page's tables, unrounded, for headline.json (``verdict``: the long version of
    ``tables.verdict_table``, as the page computed it)."""
    s = scores(validation)
    return {
        "scores": s.replace({np.nan: None}).to_dict("records"),
        "noise_floor": noise_floor(noise),
        "ci_filter": validation.get("ci_filter") if isinstance(validation, dict) else None,
        "verdict": verdict.to_dict("records"),
    }
