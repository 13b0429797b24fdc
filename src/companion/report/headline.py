"""The book's results-first headline, computed from the stage artifacts (never typed by hand).

The primary comparison is ``validation.json``'s ``model_scores`` (per split, model and target: held-out MAPE
with its group-bootstrap interval and the coverage of the models' 90 % intervals), ``model_scores_pooled``
(every cross-validation split pooled; the off-grid holdout apart) and ``model_verdict``. The noise floor is
the replicate noise of the runs the validation scored (``validation.json``'s ``noise``; stage 02's
``noise.json``, over every run, where it has none).

Every reader reads the artifacts defensively: a missing file or a changed schema gives "not available" for
the values it would have produced, never an error, so the headline survives a rewrite of a later stage.
"""

from __future__ import annotations

import html
import inspect
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from companion.energy import registry
from companion.energy.efficiency import kappa_fitted
from companion.energy.validation import coverage_consistent

NA = "not available"
LEVEL = 0.9  # the level of the models' prediction intervals and of the MAPE's bootstrap interval
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
HOLDOUT_TEXT = (
    "the validation set: runs off the sweep's grid, predicted by models fitted on the whole sweep; design "
    "constants were chosen by these scores"
)
TEST_TEXT = (
    "the test set: other off-grid runs, drawn once, predicted the same way; nothing was chosen by them"
)
TARGETS = {"time": "time per step", "energy": "energy per step"}
TIERS = {
    "fitted": "fitted tier: coefficients fitted on this build's runs",
    "calibrated": "calibrated tier: the device's calibration at face value, nothing fitted on runs",
    "prior": "prior tier: spec-sheet roofs and priors, wide intervals",
}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return pd.DataFrame()


def _num(x) -> float | None:
    """A finite number, or None (strings, booleans, NaN and missing values are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    return float(x) if math.isfinite(float(x)) else None


def _pct(x, digits: int = 1) -> str:
    v = _num(x)
    return NA if v is None else f"{v:.{digits}f} %"


def _bound(x) -> str:
    """An interval bound: one decimal below 10 %, none above (the cells must stay narrow)."""
    v = _num(x)
    return "—" if v is None else (f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}")


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
    v = _num(validation.get("level")) if isinstance(validation, dict) else None
    return NA if v is None else f"{100 * v:.0f}"


def default_pct(module: str, qualname: str, param: str = "level") -> str:
    """A level parameter's default (%) of a function that produced an artifact's numbers, e.g. the level of the
    MAPE's group-bootstrap interval, so the page states the level that was used instead of typing it."""
    try:
        import importlib

        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        v = _num(inspect.signature(obj).parameters[param].default)
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


def _pick(s: pd.DataFrame, split: str, model: str, target: str) -> pd.Series | None:
    if s.empty:
        return None
    r = s[(s.split == split) & (s.model == model) & (s.target == target)]
    return r.iloc[0] if len(r) else None


def mape_text(s: pd.DataFrame, split: str, model: str, target: str) -> str:
    """'9.9 % [8.1, 10.8]': a held-out MAPE with its 90 % interval, or "not available"."""
    r = _pick(s, split, model, target)
    if r is None or _num(r.mape_pct) is None:
        return NA
    lo, hi = _num(r.mape_lo_pct), _num(r.mape_hi_pct)
    return f"{r.mape_pct:.1f} %" + (f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else "")


def split_order(s: pd.DataFrame) -> list[str]:
    """Pooled first, then the splits in the book's order, then any split the book does not know yet."""
    present = list(dict.fromkeys(s.split)) if len(s) else []
    return [x for x in [POOLED, *SPLITS] if x in present] + [
        x for x in present if x != POOLED and x not in SPLITS
    ]


def _cell(r: pd.Series | None, coverage_range: tuple | None, floor_in_cell: bool = True) -> str:
    if r is None or _num(r.mape_pct) is None:
        return "—"
    lo, hi = _num(r.mape_lo_pct), _num(r.mape_hi_pct)
    interval = f"[{_bound(lo)}–{_bound(hi)}]" if lo is not None and hi is not None else "[—]"
    cov = _num(r.coverage_pct)
    cov_text = "—" if cov is None else f"{cov:.0f} %"
    # the binomial range exact intervals show on as many runs, where the scores carry it; else the verdict's
    lo_c, hi_c = _num(r.get("coverage_lo_pct")), _num(r.get("coverage_hi_pct"))
    if lo_c is not None and hi_c is not None:
        outside = cov is not None and not coverage_consistent(cov, lo_c, hi_c)
    else:
        outside = (
            cov is not None and bool(coverage_range) and not coverage_range[0] <= cov <= coverage_range[1]
        )
    if outside:
        cov_text = f'<span style="color:#b00">{cov_text}</span>'
    floor = _num(r.get("runs_floor_pct")) if floor_in_cell else None
    floor_text = f"<br><small>floor {floor:.1f}</small>" if floor is not None else ""
    return f"<b>{r.mape_pct:.1f}</b> <small>{interval}</small><br><small>{cov_text}</small>{floor_text}"


def _split_floor(of_split: pd.DataFrame) -> float | None:
    """The replicate floor of a split's runs where every model's cell scores the same runs (one value), else None."""
    floors = {round(v, 1) for v in pd.to_numeric(of_split.runs_floor_pct, errors="coerce").dropna()}
    return floors.pop() if len(floors) == 1 and of_split.runs_floor_pct.notna().all() else None


def _after_the_fact(model) -> bool:
    """A model that reads each run's measured time: an estimate after the fact, not a prediction."""
    spec = registry.REGISTRY.get(model)
    return bool(spec is not None and spec.uses_measured_time)


def score_table(
    validation: dict, target: str, after_the_fact: bool = True, floors: bool = True
) -> pd.DataFrame:
    """Models as rows, splits as columns (pooled first), for one target ("time" or "energy").

    Under each split's name: its runs, the replicate floor of those runs (where every model scores the same runs;
    else each cell carries its own) and the MAPE an exact model would score on them (``exact_floor_pct``), where
    the scores carry them. Each cell (HTML): the held-out MAPE (%) in bold with its group-bootstrap interval, then
    the coverage of the model's prediction intervals, in red where it lies outside the range exact intervals show
    nine times in ten on as many runs (binomial; the verdict's range where the scores lack it). Without
    ``after_the_fact``, the models that read each run's measured time have no row; without ``floors``, no
    replicate floor is shown (the exact model's MAPE stays)."""
    s = scores(validation)
    s = s[s.target == target] if len(s) else s
    if len(s) and not after_the_fact:
        s = s[~s.model.map(_after_the_fact)]
    if s.empty:
        return pd.DataFrame()
    rng = verdict_criteria(validation).get("coverage")
    models = [m for m in MODELS if m in set(s.model)] + [m for m in dict.fromkeys(s.model) if m not in MODELS]
    columns, shared_floor = {}, {}
    for split in split_order(s):
        of_split = s[s.split == split]
        n = of_split.n.max()
        # the MAPE a model that knew every configuration's true value would score on the split's runs (the same
        # runs for every model): what the verdict's last row divides by
        exact = _num(of_split.exact_floor_pct.max())
        floor = shared_floor[split] = _split_floor(of_split) if floors else None
        refs = [f"floor {floor:.1f}"] if floor is not None else []
        refs += [f"exact {exact:.1f}"] if exact is not None else []
        columns[split] = (
            f"{split_label(split)}<br><small>{int(n) if _num(n) is not None else '?'} runs</small>"
            + (f"<br><small>{', '.join(refs)}</small>" if refs else "")
        )
    rows = []
    for m in models:
        row = {"model": model_label(m)}
        for split, header in columns.items():
            row[header] = _cell(_pick(s, split, m, target), rng, floors and shared_floor[split] is None)
        rows.append(row)
    return pd.DataFrame(rows)


def styled_scores(table: pd.DataFrame, caption: str = ""):
    """The score table as the page shows it (narrow: fits the text column), or a paragraph saying it is
    not available."""
    if table is None or table.empty:
        return paragraph(
            f"{caption or 'The held-out scores'}: {NA} (the validation stage wrote no held-out scores)."
        )
    styles = [
        {
            "selector": "td",
            "props": "white-space: nowrap; min-width: 0; text-align: right; line-height: 1.25; "
            "padding: 0.3em 0 0.3em 0.8em; border-top: 1px solid #e5e5e5;",
        },
        {
            "selector": "td.col0",
            "props": "white-space: normal; text-align: left; max-width: 11em; padding-left: 0;",
        },
        {"selector": "th", "props": "text-align: right; white-space: nowrap; padding-left: 0.8em;"},
        {"selector": "th.col_heading.col0", "props": "text-align: left; padding-left: 0;"},
        {
            "selector": "caption",
            "props": "caption-side: top; text-align: left; font-weight: 600; "
            "color: inherit; padding-bottom: 0.3em;",
        },
    ]
    styled = (
        table.style.hide(axis="index")
        .set_table_styles(styles)
        .set_table_attributes('class="companion-scores"')
    )
    return styled.set_caption(html.escape(caption)) if caption else styled


def split_items(validation: dict) -> list[tuple[str, str]]:
    """(column name, what it holds out) for every column of the score tables, in validation.json's own words."""
    splits = validation.get("model_splits") if isinstance(validation, dict) else None
    if not isinstance(splits, dict) or not splits:
        return []
    s = scores(validation)
    if s.empty:  # nothing scored: no column to explain
        return []
    present = set(s.split)
    order = [k for k in [*SPLITS, *splits] if k in present and (k in splits or k in ("holdout", "test"))]
    n_cv = len([k for k in splits if k in present])
    return [
        (
            POOLED,
            f"the {n_cv} cross-validation splits together (a run held out by two splits counts twice)",
        )
    ] + [
        (split_label(k), str(splits[k]) if k in splits else TEST_TEXT if k == "test" else HOLDOUT_TEXT)
        for k in dict.fromkeys(order)
    ]


def split_legend(validation: dict) -> str:
    items = split_items(validation)
    return "; ".join(f"{k}: {v}" for k, v in items) if items else NA


def legend_html(validation: dict):
    """The split legend as a short HTML list (column name in bold, then what it holds out), for ``glue``."""
    from IPython.display import HTML

    items = split_items(validation)
    if not items:
        return HTML(f"<p>What each column holds out is {NA}.</p>")
    # "what each column holds out": the splits' own "hold out every run of ..." said once, by the heading
    lis = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(re.sub(r'^hold out every run of ', '', v))}</li>"
        for k, v in items
    )
    return HTML(f'<ul class="companion-legend" style="font-size: 0.9em; margin-top: 0">{lis}</ul>')


def styled_prose(table: pd.DataFrame, first_width: str = "32%", nowrap: tuple = ()):
    """A table of sentences: cells wrap and align at the top; the first column takes ``first_width``; the
    columns numbered in ``nowrap`` (numbers, intervals) never wrap."""
    if table is None or table.empty:
        return paragraph(f"This table is {NA}.")
    styles = [
        {
            "selector": "td",
            "props": "vertical-align: top; white-space: normal; padding: 0.35em 0.6em 0.35em 0; "
            "border-top: 1px solid #e5e5e5;",
        },
        {"selector": "td.col0", "props": f"width: {first_width};"},
        {"selector": "th", "props": "text-align: left; vertical-align: bottom;"},
    ]
    styles += [{"selector": f"td.col{i}", "props": "white-space: nowrap;"} for i in nowrap]
    return (
        table.style.hide(axis="index")
        .set_table_styles(styles)
        .set_table_attributes('class="companion-prose"')
    )


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
        if isinstance(m, dict) and _num(m.get("mape")) is not None and (_num(m.get("n_configs")) or 0) > 0:
            out[target] = f"{100 * m['mape']:.1f} %"
            out["n_configs"], out["n_runs"] = str(int(m["n_configs"])), str(int(m.get("n_runs") or 0) or NA)
            exact = m.get("exact_model")  # what an exact model would score (noise.exact_model_floor)
            if isinstance(exact, dict) and _num(exact.get("mape")) is not None:
                out[f"exact_{target}"] = f"{100 * exact['mape']:.1f} %"
    return out


def pass_drift_text(noise: dict) -> str:
    """How far the later pass of the sweep ran from the first (noise.json's ``between_passes``, time per step):
    the median change, signed, and the median size of the change."""
    d = ((noise or {}).get("between_passes") or {}).get("time_per_step") if isinstance(noise, dict) else None
    ratio = _num(d.get("median_ratio")) if isinstance(d, dict) else None
    size = _num(d.get("median_abs_change")) if isinstance(d, dict) else None
    if ratio is None or size is None:
        return NA
    way = "slower" if ratio > 1 else "faster"
    n = d.get("n_configs")
    over = f"over the {n} configurations scored in both passes, " if isinstance(n, int) and n > 0 else ""
    return (
        f"a median {abs(ratio - 1) * 100:.0f} % {way} than the first ({over}the median size of a "
        f"configuration's change between the passes, either way, was {size * 100:.0f} %)"
    )


def noise_text(noise: dict) -> str:
    f = noise_floor(noise)
    if f["time"] == NA and f["energy"] == NA:
        return (
            "The replicate noise floor is not available: no configuration of this build has more than one "
            "run among the runs scored (or validation.json and noise.json are missing)."
        )
    text = (
        f"The replicate noise floor, the mean distance of repeated runs of one configuration from that "
        f"configuration's mean, is {f['time']} for time per step and {f['energy']} for energy per step "
        f"({f['n_configs']} configurations with more than one run among the runs scored, {f['n_runs']} runs). "
        f"It is how far the same fine-tune measured again disagrees with itself."
    )
    drift = pass_drift_text(noise)
    if drift != NA:
        text += f" The later pass of the sweep ran {drift}."
    perfect, exact = perfect_model_mape(noise), exact_model_text(noise)
    if exact:
        text += " " + exact
    elif perfect:
        text += (
            f" A model that knew every configuration's true mean would still score, against single runs, "
            f"between the floor (noise that is a shift shared by a whole pass of the sweep) and the floor times "
            f"{perfect['factor']} (noise of each run its own, {perfect['replicates']} replicates per "
            f"configuration): {perfect['time']} for time and {perfect['energy']} for energy."
        )
    return text


def exact_model_text(noise: dict) -> str:
    """What a model that knew every configuration's true mean would score against single runs: the passes
    separate a shift of the whole pass (which the floor counts in full) from each run's own scatter (of which it
    counts 1 / sqrt(2) with two replicates); noise.json's ``exact_model``
    (``companion.energy.noise.exact_model_floor``). "" where the replicates cannot tell."""
    metrics = (noise or {}).get("metrics") if isinstance(noise, dict) else None
    if not isinstance(metrics, dict):
        return ""
    found = {t: (metrics.get(f"{t}_per_step") or {}).get("exact_model") for t in TARGETS}
    if not all(isinstance(x, dict) and _num(x.get("mape")) is not None for x in found.values()):
        return ""
    t = found["time"]
    shift = max(abs(x) for x in t["pass_shift_log"]) if t.get("pass_shift_log") else 0.0
    sd = t["scatter_sd_log"]
    return (
        f"A model that knew every configuration's true mean (an exact model) would still score more than the "
        f"floor against single runs, since a configuration's mean shares part of each run's noise. Taking the "
        f"noise as a shift of each whole pass of the sweep plus each run's own scatter, the passes estimate both: "
        f"in time per step a pass sat {100 * (math.exp(shift) - 1):.1f} % off the mean of the passes (a mean "
        f"over configurations in logs, which weighs them otherwise than the median ratio of the passes), and a run "
        f"scattered about its configuration with a standard deviation of {100 * sd:.1f} % in logs (a mean "
        f"distance of {100 * sd * math.sqrt(2 / math.pi):.1f} %; {t['n_configs']} configurations measured in "
        f"every pass). So an exact model would score about {100 * t['mape']:.1f} % for time and "
        f"{100 * found['energy']['mape']:.1f} % for energy (estimated the same way). It is an estimate, not a lower bound: "
        "noise that moves both replicates of a configuration alike (a slowdown lasting the whole sweep) is missing "
        "from it, and because it is estimated from the same runs a model is scored on, a model can score below "
        "it."
    )


BUSY_KEPT_FRACTION = (
    0.75  # the step-time filter keeping fewer of the sweep's runs than this says the machine was busy
)
FEW_RUNS = 8  # a split scored on fewer runs than this says little about the model


def _ci_filter(validation: dict) -> tuple[dict | None, dict | None, float | None]:
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
        _num(f.get("max_step_ci95_rel")),
    )


def _counts_words(sweep: dict, par: str, held: dict | None, validation: dict) -> str:
    """'106 of the sweep's 106 runs (...), 28 of the 28 off-grid runs and 0 of the 10 test-set runs': the runs the
    step-time filter kept of the sweep, the off-grid runs and the test set (validation.json's ``ci_filter``)."""
    t = (validation.get("ci_filter") or {}).get("test") if isinstance(validation, dict) else None
    parts = [f"{sweep['kept']} of the sweep's {sweep['runs']} runs{par}"]
    parts += [f"{held['kept']} of the {held['runs']} off-grid runs"] if held else []
    parts += (
        [f"{t['kept']} of the {t['runs']} test-set runs"] if isinstance(t, dict) and t.get("runs") else []
    )
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def _off_grid_words(held: dict | None) -> str:
    return f" and {held['kept']} of the {held['runs']} off-grid runs" if held else ""


def scored_runs_text(validation: dict, sweep_noise: dict | None = None) -> str:
    """Which runs the scores rest on: how many the step-time filter kept of the sweep (and of its parallel runs) and of
    the off-grid runs (validation.json's ``ci_filter``), the floor over every run of the sweep beside the floor
    over the runs scored (``sweep_noise``: noise.json), and, where the filter left out many, that the machine
    was busy and which splits rest on few runs."""
    sweep, held, limit = _ci_filter(validation)
    if sweep is None:
        return f"How many runs the scores rest on is {NA} (validation.json holds no ci_filter)."
    par = (
        f" ({sweep['parallel_kept']} of its {sweep['parallel_runs']} parallel runs)"
        if sweep.get("parallel_runs")
        else ""
    )
    text = (
        f"These scores rest on {_counts_words(sweep, par, held, validation)}: "
        f"the step-time filter leaves out a run whose step time is not known to within "
        f"±{_pct(100 * limit, 0) if limit is not None else NA} (95 % interval), a sign of other load on the "
        f"machine."
    )
    every, scored = noise_floor(sweep_noise or {}), noise_floor(validation.get("noise") or {})
    if every["time"] != NA and scored["time"] != NA and every["time"] != scored["time"]:
        text += (
            f" Over every run of the sweep the replicate floor is {every['time']} for time, against "
            f"{scored['time']} over the runs scored."
        )
    if _busy(sweep) or _busy(held):
        s = scores(validation)
        few = (
            s[(s.model == PRIMARY) & (s.target == "time") & ~s.split.isin([POOLED]) & (s.n < FEW_RUNS)]
            if not s.empty
            else s
        )
        named = ", ".join(f"{split_label(r.split)} on {int(r.n)} runs" for r in few.itertuples())
        rest = f", and some splits rest on few ({named}), which say little" if len(few) else ""
        text += (
            f" The machine was busy while the runs were measured: the filter left out many runs{rest}. The "
            f"verdict is judged on what remains; measure again on a quiet machine (the page on reproducing says "
            f"how) before reading it as the model's accuracy."
        )
    return text


def scored_and_filter_text(validation: dict, sweep_noise: dict | None = None, runs=None) -> str:
    """``scored_runs_text``, and where the step-time filter left runs out, the figures with and without it."""
    f = validation.get("filter_sensitivity") if isinstance(validation, dict) else None
    dropped = isinstance(f, dict) and isinstance(f.get("dropped"), dict) and any(f["dropped"].values())
    text = scored_runs_text(validation, sweep_noise)
    return f"{text} {filter_sensitivity_text(validation, runs)}" if dropped else text


def _busy(counts) -> bool:
    """Whether the step-time filter kept fewer than ``BUSY_KEPT_FRACTION`` of a sweep's runs, or of its parallel runs."""
    if not isinstance(counts, dict):
        return False
    pairs = [
        (counts.get("kept", 0), counts.get("runs", 0)),
        (counts.get("parallel_kept", 0), counts.get("parallel_runs", 0)),
    ]
    return any(n and k < BUSY_KEPT_FRACTION * n for k, n in pairs)


def scored_runs_short(validation: dict) -> str:
    """The runs the verdict judges, in a few words: the step-time filter's kept runs of the sweep and the off-grid runs,
    and whether the machine was busy (the filter kept fewer than ``BUSY_KEPT_FRACTION`` of them)."""
    sweep, held, _ = _ci_filter(validation)
    if sweep is None:
        return f"the runs the step-time filter kept (how many: {NA})"
    text = f"{sweep['kept']} of the sweep's {sweep['runs']} runs{_off_grid_words(held)}"
    return text + (
        ", the rest left out by the step-time filter on a busy machine (see above)"
        if _busy(sweep) or _busy(held)
        else ", those the step-time filter kept"
    )


def perfect_model_mape(noise: dict) -> dict:
    """The range of held-out MAPE an exact model (one that knew each configuration's true mean) would score
    against single runs, from the replicate floor. Noise independent from run to run: a run's distance from the
    mean of k replicates carries (1 - 1/k) of its noise variance, its distance from the true value all of it, so
    the exact model scores the floor / sqrt(1 - 1/k). Noise that is a shift common to a pass of the sweep (one
    replicate per pass): both distances are the shift, so it scores the floor. {} where the floor is missing."""
    metrics = (noise or {}).get("metrics") or {}
    out = {}
    for target in TARGETS:
        m = metrics.get(f"{target}_per_step")
        if not isinstance(m, dict) or _num(m.get("mape")) is None or not (_num(m.get("n_configs")) or 0) > 0:
            return {}
        k = (_num(m.get("n_runs")) or 0) / m["n_configs"]
        if k <= 1:
            return {}
        factor = (1 - 1 / k) ** -0.5
        out[target] = f"{100 * m['mape']:.1f}–{100 * m['mape'] * factor:.1f} %"
        out["factor"], out["replicates"] = f"{factor:.2f}", f"{k:g}"
    return out


def replicates_words(runs: pd.DataFrame) -> str:
    """How many times each configuration of the sweep was measured, in words ("twice"), from runs.csv."""
    try:
        n = int(pd.to_numeric(runs["replicate"], errors="coerce").max()) + 1 if "replicate" in runs else 1
    except (TypeError, ValueError):
        return NA
    return {1: "once", 2: "twice", 3: "three times"}.get(n, f"{n} times") if len(runs) else NA


def target_ci_pct(runs: pd.DataFrame) -> str:
    """The runs' stopping target: the relative 95 % CI half-width a run measured until (from runs.csv), in %."""
    try:
        values = sorted(set(pd.to_numeric(runs["target_rel_ci"], errors="coerce").dropna() * 100))
    except (KeyError, TypeError):
        return NA
    return " or ".join(f"{v:g}" for v in values) if values else NA


def coverage_summary(validation: dict) -> dict:
    """The primary model's interval coverage, as text: pooled per target, the lowest cross-validation split
    (over both targets), the off-grid runs per target, whether each split's is one exact intervals show, and how
    often exact intervals would put every split within the criterion's range (``chance_<target>``)."""
    s = scores(validation)
    out = {f"{k}_{t}": NA for k in ("pooled", "holdout", "consistent", "chance") for t in TARGETS} | {
        "lowest": NA
    }
    for t in TARGETS:
        v = _verdict_target(validation, t)
        out[f"consistent_{t}"] = NA if v is None else _consistent(v)
        if v is not None and _num(v.get("coverage_in_range_chance")) is not None:
            out[f"chance_{t}"] = _chance(v["coverage_in_range_chance"])
    if s.empty:
        return out
    for t in TARGETS:
        for key, split in (("pooled", POOLED), ("holdout", "holdout")):
            out[f"{key}_{t}"] = _pct(_field(s, PRIMARY, t, split, "coverage_pct"), 0)
    cv = s[(s.model == PRIMARY) & ~s.split.isin([POOLED, "holdout", "test"])].dropna(subset=["coverage_pct"])
    if len(cv):
        r = cv.loc[cv.coverage_pct.idxmin()]
        out["lowest"] = (
            f"{r.coverage_pct:.0f} % ({TARGETS.get(r.target, r.target)}, {split_label(r.split)} held out)"
        )
    return out


# ------------------------------------------------------------------------------------------ the verdict
def _met(flag) -> str:
    return "met" if flag is True else "not met" if flag is False else NA


def _consistent(t: dict) -> str:
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
        if _num(cov.get(k)) is not None and not lo - 1e-9 <= cov[k] <= hi + 1e-9
    ]
    return "no" + (f" ({'; '.join(out)})" if out else "")


def _stretch(t: dict, limit: float | None, short: bool = False) -> str:
    """The stretch criterion: met or not, with the split whose MAPE is the most times its runs' floor."""
    ratios = t.get("floor_ratio_by_split")
    if not isinstance(ratios, dict) or not ratios:
        return NA
    known = {k: r for k, r in ratios.items() if _num(r) is not None}
    if len(known) < len(ratios):
        missing = ", ".join(split_label(k) for k in ratios if k not in known)
        return f"{NA} (too few replicated runs for a floor: {missing})"
    worst = max(known, key=known.get)
    text = f"{_met(t.get('meets_stretch'))} ({split_label(worst)}, {known[worst]:.1f} x{'' if short else ' its floor'})"
    # where an exact model's own error (estimated from the passes) is more than the stretch times the floor, no
    # model can be expected to meet it: MAPE / floor over MAPE / exact error is the exact error over the floor
    exact = t.get("exact_floor_ratio_by_split")
    if isinstance(exact, dict) and _num(limit) is not None:
        beyond = [
            f"{split_label(k)}, {known[k] / exact[k]:.1f} x"
            for k in known
            if _num(exact.get(k)) and known[k] / exact[k] > limit
        ]
        if beyond:
            text += f"; an exact model would score above {limit:g} x the floor itself on {'; '.join(beyond)}"
    return text


def _verdict_target(validation: dict, target: str) -> dict | None:
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


def verdict_table(validation: dict, builds: pd.DataFrame | None = None, short: bool = False) -> pd.DataFrame:
    """The primary model's verdict (``model_verdict``), criterion by criterion (rows), time and energy (columns).

    The criteria's thresholds are ``model_verdict``'s own; a value the artifact lacks reads "not available".
    ``builds``: the coverage pooled over the stored builds (``companion.energy.stored.pooled_coverage`` of stage
    07's ``builds.csv``): how close to the nominal level each split comes on many builds' predictions, where one
    build's splits are too small to say; without it that row reads "not available". ``short``: the page's
    version, the same rows and figures in fewer words (headline.json keeps the long one)."""
    c = verdict_criteria(validation)
    rng = c.get("coverage")
    level = level_pct(validation)
    fmt = lambda key: f"{c[key]:.0f} %" if key in c else NA  # noqa: E731
    rows = {
        "pooled": f"pooled held-out MAPE at most {fmt('target_pct')}",
        "split": f"held-out MAPE at most {fmt('split_pct')} in every split (the worst one)",
        "half": "at most half the MAPE of the best baseline that predicts before running",
        "coverage": f"coverage of the {level} % intervals within "
        f"{f'{rng[0]:.0f}–{rng[1]:.0f} %' if rng else NA} in every split, off-grid runs included",
        "consistent": f"coverage of every split within the range exact {level} % intervals show nine times in ten "
        "on as many runs (binomial; no criterion)",
        "builds": "beside it, not the criterion: each split's coverage with its held-out predictions pooled over the "
        "stored builds (page Across builds), within the same range",
        "holdout": f"off-grid runs' MAPE at most {fmt('target_pct')} (their own replicate noise floor in brackets)",
        "stretch": f"stretch: every MAPE above at most {c['stretch'] if 'stretch' in c else NA:g} x the replicate "
        "floor of the runs it scores (the worst ratio)",
        "exact": "pooled MAPE ÷ the MAPE an exact model would score on the same runs, and the split with the "
        "largest such ratio (estimated from the passes; no criterion)",
        "calibrated": f"pooled MAPE at most {c['calibrated_ratio'] if 'calibrated_ratio' in c else NA:g} × its own "
        "calibrated tier's (the strongest baseline: the same model with nothing fitted to the sweep)",
        "test": f"test set (nothing chosen by it): MAPE at most {fmt('target_pct')}, its coverage, and its MAPE ÷ the "
        "calibrated tier's on the same runs",
    }
    if short:
        stretch = f"{c['stretch']:g}" if "stretch" in c else NA
        ratio = f"{c['calibrated_ratio']:g}" if "calibrated_ratio" in c else NA
        rows = {
            "pooled": f"pooled MAPE ≤ {fmt('target_pct')}",
            "split": f"worst split's MAPE ≤ {fmt('split_pct')}",
            "half": "≤ half the best pre-run baseline's MAPE",
            "coverage": f"coverage {f'{rng[0]:.0f}–{rng[1]:.0f} %' if rng else NA} in every split",
            # every split's coverage against the binomial range is the score tables' red; not repeated here
            "consistent": "",
            "builds": "the same, over the stored builds (no criterion)",
            "holdout": f"off-grid MAPE ≤ {fmt('target_pct')}",
            "stretch": f"stretch: MAPE ≤ {stretch} × replicate floor in every split",
            "exact": "",  # the score tables give an exact model's MAPE under each split
            "calibrated": f"pooled MAPE ≤ {ratio} × the calibrated tier's",
            "test": f"test set MAPE ≤ {fmt('target_pct')}",
        }
    table = {"criterion": list(rows.values())}
    for target, what in TARGETS.items():
        t = _verdict_target(validation, target)
        if t is None:
            table[what] = [NA] * len(rows)
            continue
        best = t.get("best_baseline")
        cov = t.get("coverage_pct_by_split")
        outside = (
            [
                f"{split_label(k)} {x:.0f} %"
                for k, x in cov.items()
                if _num(x) is not None and rng and not rng[0] <= x <= rng[1]
            ]
            if isinstance(cov, dict)
            else []
        )
        worst = t.get("worst_split")
        table[what] = [
            f"{_pct(t.get('pooled_mape_pct'))}: {_met(t.get('meets_pooled'))}",
            f"{split_label(worst) if worst else NA}, {_pct(t.get('worst_split_mape_pct'))}: "
            f"{_met(t.get('meets_every_split'))}",
            f"{_met(t.get('beats_half_best_baseline'))} ({'' if short else 'the '}"
            f"{model_name(best) if best else NA}{'' if short else ' at'} {_pct(t.get('best_baseline_mape_pct'))})",
            _met(t.get("coverage_in_range"))
            + (f" (outside: {', '.join(outside)})" if outside else "")
            + (f" ({t['unbounded_intervals']} unbounded intervals)" if t.get("unbounded_intervals") else "")
            + (
                (
                    f"; exact intervals pass {_chance(t['coverage_in_range_chance'])}"
                    if short
                    else "; exact intervals would meet it on splits of these sizes about "
                    f"{_chance(t['coverage_in_range_chance'])}"
                )
                if _num(t.get("coverage_in_range_chance")) is not None
                else ""
            ),
            _consistent(t),
            builds_coverage(builds, target, rng, short),
            f"{_pct(t.get('holdout_mape_pct'))}: {_met(t.get('meets_holdout'))}"
            + (
                ""
                if short
                else f" (floor {_pct(t['holdout_noise_floor_pct'])})"
                if _num(t.get("holdout_noise_floor_pct")) is not None
                else " (measured once each: no floor of their own)"
            ),
            _stretch(t, c.get("stretch"), short),
            _exact_ratio(t),
            (
                f"{_met(t.get('beats_calibrated_tier'))} ("
                + (
                    f"{_num(t['over_calibrated_tier']):.2f} ×)"
                    if _num(t.get("over_calibrated_tier")) is not None
                    else f"{NA})"
                )
            )
            if short
            else f"{_met(t.get('beats_calibrated_tier'))} (calibrated tier {_pct(t.get('calibrated_tier_mape_pct'))}"
            + (
                f", ratio {_num(t['over_calibrated_tier']):.2f})"
                if _num(t.get("over_calibrated_tier")) is not None
                else ")"
            ),
            _test_cell(t, short),
        ]
    out = pd.DataFrame(table)
    return out[out.criterion != ""].reset_index(drop=True) if short else out


def _test_cell(t: dict, short: bool = False) -> str:
    """The test set's row of the verdict: its MAPE against the target, its coverage and its ratio to the
    calibrated tier, or why there is none."""
    if _num(t.get("test_mape_pct")) is None:
        return "no test-set runs" if short else f"{NA} (no test-set runs in this build)"
    ratio = _num(t.get("test_over_calibrated_tier"))
    return (
        f"{_pct(t['test_mape_pct'])}: {_met(t.get('meets_test'))} ({t.get('test_runs', 0)} runs; coverage "
        f"{_pct(t.get('test_coverage_pct'), 0)}"
        + (f"; {ratio:.2f} × the calibrated tier" if ratio is not None else "")
        + ")"
    )


def builds_coverage(builds: pd.DataFrame | None, target: str, band, short: bool = False) -> str:
    """Each split's coverage on the stored builds' pooled predictions, for ``target``: whether every split lies
    within ``band`` (a related question, not the one-build criterion), the range over the splits (off-grid runs
    included), the splits outside ``band`` and how many builds and predictions (``builds.coverage_over_builds``;
    ``short``: the builds without the predictions)."""
    from companion.report.builds import coverage_over_builds

    if builds is None or not len(builds) or not band:
        return NA
    c = coverage_over_builds(builds, target, PRIMARY, band)
    if c is None:
        return NA
    outside = [f"{split_label(k)} {v:.1f} %" for k, v in c["outside"].items()]
    if short:
        return (
            f"{'yes' if not outside else 'no'} ({c['lo']:.1f}–{c['hi']:.1f} % over {c['builds']} builds"
            + (f"; outside: {', '.join(outside)}" if outside else "")
            + ")"
        )
    return (
        f"{'yes' if not outside else 'no'} ({c['lo']:.1f}–{c['hi']:.1f} % over {c['builds']} builds, "
        f"{c['n_lo']:,}–{c['n_hi']:,} held-out predictions per split summed over them"
        + (f"; outside: {', '.join(outside)}" if outside else "")
        + ")"
    )


def coverage_bands_text(table: pd.DataFrame) -> str:
    """Which bands of ``validation.coverage_by_overhead``'s table have a coverage outside the range exact
    intervals show nine times in ten on as many predictions, in words; or that none has."""
    from companion.energy.validation import coverage_consistent

    t = table[table.n > 0]
    if t.empty:
        return "No held-out prediction has a bounded interval and a share, so no band is counted."
    out = t[~coverage_consistent(t.coverage_pct, t.range_lo_pct, t.range_hi_pct)]
    if out.empty:
        return (
            "Every band's coverage lies within the range exact intervals show nine times in ten on as many "
            "predictions: on this sweep, coverage does not fall with the share of overheads."
        )
    cells = [
        f"{r.target} at a share of {r.overhead_share} ({r.coverage_pct:.0f} % against "
        f"{r.range_lo_pct:.0f}–{r.range_hi_pct:.0f} %, {'wider' if r.coverage_pct > r.range_hi_pct else 'narrower'} "
        f"than its errors)"
        for r in out.itertuples()
    ]
    return (
        f"Outside the range exact intervals show nine times in ten: {'; '.join(cells)}. On this sweep the "
        "scaling of the widths with the share of overheads does not even out the coverage there."
    )


def _chance(p: float) -> str:
    """A probability as words a reader weighs at a glance: "4 % of the time"."""
    return f"{100 * p:.0f} % of the time" if p >= 0.01 else "less than 1 % of the time"


def _exact_ratio(t: dict) -> str:
    """The pooled MAPE over the exact model's expected error, and the split where that ratio is the largest."""
    ratios = t.get("exact_floor_ratio_by_split")
    known = {k: r for k, r in ratios.items() if _num(r) is not None} if isinstance(ratios, dict) else {}
    if "pooled" not in known:
        return NA
    splits = {k: r for k, r in known.items() if k != "pooled"}
    worst = max(splits, key=splits.get) if splits else None
    return f"{known['pooled']:.1f} x" + (f" ({split_label(worst)}, {splits[worst]:.1f} x)" if worst else "")


def paragraph(text: str):
    """A sentence of the page as an HTML paragraph (numbers with their unit in bold, `commands` as code), for
    ``glue``: pasted text would be bold from end to end, and a pasted paragraph can travel to another page."""
    from IPython.display import HTML

    body = html.escape(str(text), quote=False)
    number = r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?"
    body = re.sub(
        rf"(?<![\w.,^+-])((?:{number})(?:–(?:{number}))?(?: %| kWh| h)?)(?!\w|\.\d|,\d)", r"<b>\1</b>", body
    )
    body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)  # a command, as the book's text sets one
    return HTML(f'<p class="companion-glued">{body}</p>')


def summary_text(validation: dict, noise: dict) -> str:
    """One sentence for the introduction: the primary model, the paper's law and the best pre-run baseline."""
    s = scores(validation)
    f = noise_floor(noise)
    if s.empty:
        return f"The held-out comparison of the models is {NA}."
    out = []
    for name, what in ((PRIMARY, "the operator roofline"), (PAPER, "the paper's law")):
        out.append(
            f"{what} {_pct(_field(s, name, 'time'))} for time and {_pct(_field(s, name, 'energy'))} for energy"
        )
    best = best_pre_run_baseline(validation, "energy")
    return (
        f"Pooled over the cross-validation splits, the held-out MAPE is: {out[0]}; {out[1]}; the best baseline "
        f"that predicts before running ({model_name(best) if best else NA}) {_pct(_field(s, best, 'time'))} and "
        f"{_pct(_field(s, best, 'energy'))}. The replicate noise floor is {f['time']} (time) and {f['energy']} "
        f"(energy)."
    )


def filter_sensitivity_text(validation: dict, runs: pd.DataFrame | None = None) -> str:
    """The primary model's headline figures with and without the step-time filter, and the runs it left out
    (their configurations, from ``runs``), from validation.json's ``filter_sensitivity``."""
    f = validation.get("filter_sensitivity") if isinstance(validation, dict) else None
    if not isinstance(f, dict):
        return f"The headline figures without the step-time filter are {NA}."
    dropped = [r for ids in (f.get("dropped") or {}).values() for r in ids]
    if not dropped or not isinstance(f.get("without_filter"), dict):
        return "The step-time filter left out no run: the figures are the same without it."

    def figures_of(d: dict, target: str) -> str:
        t = d.get(target) or {}
        worst = t.get("worst_split")
        parts = [
            f"{_pct(t.get('pooled_mape_pct'))} pooled",
            f"{split_label(worst) if worst else NA} {_pct(t.get('worst_split_mape_pct'))} at worst",
        ]
        if _num(t.get("holdout_mape_pct")) is not None:
            parts.append(f"off-grid {_pct(t['holdout_mape_pct'])}")
        if _num(t.get("test_mape_pct")) is not None:
            parts.append(f"test set {_pct(t['test_mape_pct'])}")
        return ", ".join(parts)

    named = []
    if runs is not None and len(runs) and "run_id" in runs:
        rows = runs[runs.run_id.isin(dropped)]
        named = [
            f"{r.layers} layers × {r.hidden} wide, {r.seq_len} tokens × {r.batch_size} "
            f"({'single process' if r.world_size == 1 else f'{r.mode} on {r.world_size} ranks'})"
            for r in rows.itertuples()
        ]
    text = (
        f"The filter left out {len(dropped)} runs. The operator roofline's held-out MAPE with it: time "
        f"{figures_of(f['with_filter'], 'time')}; energy {figures_of(f['with_filter'], 'energy')}. Without it: "
        f"time {figures_of(f['without_filter'], 'time')}; energy {figures_of(f['without_filter'], 'energy')}."
    )
    if named:
        text += f" The sweep's runs it left out: {'; '.join(named)}."
    return text


VERDICT_KEYS = (
    "meets_pooled",
    "meets_every_split",
    "beats_half_best_baseline",
    "beats_calibrated_tier",
    "coverage_in_range",
    "meets_holdout",
)


def answer_box(
    validation: dict, runs: pd.DataFrame, gpu: dict | None = None, device: str = NA, noise: dict | None = None
):
    """The introduction's one-screen answer (HTML, a short list): the hardware, how energy was obtained, the
    primary model's held-out and test-set errors with its verdict beside the replicate noise floor (``noise``),
    the paper's law against the best baseline, and the GPU's figures."""
    from IPython.display import HTML

    s = scores(validation)
    t = _verdict_target(validation, "time") or {}
    e = _verdict_target(validation, "energy") or {}
    measured = (
        runs is not None
        and len(runs)
        and "energy_measured" in runs
        and runs.energy_measured.astype(bool).all()
    )
    n = len(runs) if runs is not None else 0
    judged = [k for k in VERDICT_KEYS if isinstance(t.get(k), bool)]
    met = sum(bool(t[k]) for k in judged)
    best = best_pre_run_baseline(validation, "energy")
    paper, base = _field(s, PAPER, "energy"), _field(s, best, "energy") if best else None
    beats = _num(paper) is not None and _num(base) is not None and paper < base
    test = (
        f"; on the test set {_pct(t.get('test_mape_pct'))} time, {_pct(e.get('test_mape_pct'))} energy"
        if _num(t.get("test_mape_pct")) is not None
        else "; no test-set runs"
    )
    ws = (
        pd.to_numeric(runs.world_size, errors="coerce")
        if n and "world_size" in runs
        else pd.Series(dtype=float)
    )
    ranks = (
        f" on {int(ws.min())} to {int(ws.max())} ranks"
        if len(ws.dropna()) and ws.min() != ws.max()
        else f" on {int(ws.min())} rank{'s' if ws.min() > 1 else ''}"
        if len(ws.dropna())
        else ""
    )
    floor = noise_floor(noise or {})
    floor_text = (
        f" (runs measured twice differ by {floor['time']} and {floor['energy']})"
        if floor["time"] != NA and floor["energy"] != NA
        else ""
    )
    verdict = (
        f"{met} of {len(judged)} criteria met for time"
        if judged
        else "no verdict (too few runs to hold out whole groups)"
    )
    items = [
        f"<b>Hardware</b>: {html.escape(str(device))}, {n} runs{ranks}.",
        "<b>Energy</b>: "
        + (
            "measured by a hardware counter."
            if measured
            else "estimated (a power model × measured time), so its error largely repeats the time error."
        ),
        f"<b>Primary model</b> (operator roofline, fitted), on runs it never saw: {_pct(t.get('pooled_mape_pct'))} "
        f"time, {_pct(e.get('pooled_mape_pct'))} energy pooled{floor_text}{html.escape(test)}; {verdict}; "
        f"{_ratio_words(t)}.",
        f"<b>The paper's law</b>: {_pct(paper)} energy pooled, against {_pct(base)} for the best baseline "
        f"({html.escape(model_name(best)) if best else NA})"
        + (
            f": it {'beats' if beats else 'does not beat'} it."
            if _num(paper) is not None and _num(base) is not None
            else ": no comparison in this build."
        ),
    ]
    one = (gpu or {}).get("one_machine") or {}
    if one and "test" in one.get("tiers", {}):
        c, r = one["tiers"]["test"]["calibrated"], one["tiers"]["reference"]["calibrated"]
        items.append(
            f"<b>On a GPU</b> ({html.escape(str(gpu.get('device')))}, energy measured): from a calibration of "
            f"the same machine, fitted on nothing, {_pct(c.get('time_mape_pct'))} time and "
            f"{_pct(c.get('energy_mape_pct'))} energy over {one['runs']['test']} test runs never tuned on "
            f"({_pct(r.get('time_mape_pct'))} / {_pct(r.get('energy_mape_pct'))} over "
            f"{one['runs']['reference']} reference runs); a calibration describes its own machine's host."
        )
    elif gpu and gpu.get("tiers"):
        g = gpu["tiers"].get("calibrated", {})
        items.append(
            f"<b>On a GPU</b> ({html.escape(str(gpu.get('device')))}, energy measured): the calibrated "
            f"model, fitted on nothing, {_pct(g.get('time_mape_pct'))} time and "
            f"{_pct(g.get('energy_mape_pct'))} energy over {gpu.get('runs')} runs"
            + (
                f"; on {t['runs']} test runs from another machine the prior is off by "
                f"{_pct(t['tiers']['prior']['time_mape_pct'])} / {_pct(t['tiers']['prior']['energy_mape_pct'])}, "
                f"the calibrated tier by {_pct(t['tiers']['calibrated']['time_mape_pct'])} (host speed differs "
                "between machines)."
                if (t := gpu.get("test"))
                else "."
            )
        )
    body = "".join(f"<li>{i}</li>" for i in items)
    return HTML(
        '<div class="admonition companion-answer"><p class="admonition-title">The answer in one screen</p>'
        f"<ul>{body}</ul></div>"
    )


def _ratio_words(t: dict) -> str:
    r = _num(t.get("over_calibrated_tier"))
    return (
        f"{r:.2f} × the error of its calibrated tier (nothing fitted)"
        if r is not None
        else "its calibrated tier's error is not available"
    )


def energy_honesty_text(validation: dict, runs: pd.DataFrame) -> str:
    """Where the runs' energy is estimated (a power model times the measured time), that the energy error is not
    a test of its own, and the power model's error alone (given each run's measured time) beside the energy
    error with predicted time; where it is measured, that it is."""
    if runs is None or runs.empty or "energy_measured" not in runs:
        return f"How this build's energy was obtained is {NA}."
    s = scores(validation)
    after = [
        f"{_pct(_field(s, m, 'energy'))} for the {model_name(m)}"
        for m in MODELS
        if _after_the_fact(m) and _num(_field(s, m, "energy")) is not None
    ]
    given = (
        f" Given each held-out run's measured time (after the fact; not in the table), energy errs by "
        f"{' and '.join(after)}, pooled."
        if after
        else ""
    )
    if runs.energy_measured.astype(bool).all():
        return (
            f"This build's energy is measured (an energy counter), so its error is a test of its own.{given}"
        )
    return (
        "Energy here is estimated, not measured: a power model times the measured time, so its error largely "
        f"repeats the time error and is not an independent test.{given}"
    )


def _field(s: pd.DataFrame, model, target: str, split: str = POOLED, col: str = "mape_pct"):
    r = _pick(s, split, model, target) if model else None
    return None if r is None else r[col]


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
        (float(_field(s, m, target)), m) for m in PRE_RUN_BASELINES if _num(_field(s, m, target)) is not None
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


# ------------------------------------------------------------------------------------------ the answer
def absolute_answer(explore: pd.DataFrame, predict_params: dict, energy_label: str, device: str = NA) -> str:
    """One sentence a reader can use: a planned fine-tune's energy (kWh) and time with their intervals, naming the
    model and tier that produced it and the energy (measured or estimated, on which device) it learned from."""
    try:
        r = explore.iloc[0]
        p = predict_params if isinstance(predict_params, dict) else {}
        examples, epochs = p.get("examples"), p.get("epochs")
        if _num(examples) is None or _num(epochs) is None:
            return NA
        batch = f", batch size {p['batch_size']}" if _num(p.get("batch_size")) is not None else ""
        what = (
            f"Fine-tuning {r.model} (sequence length {int(r.seq_len)}{batch}) on {int(examples):,} examples for "
            f"{int(epochs)} epochs"
        )
        where = f" on {device}" if device and device != NA else ""
        kind = r.get("energy_kind")
        learned = (
            energy_label
            if energy_label and energy_label != NA
            else (f"{kind} energy" if isinstance(kind, str) else NA)
        )

        def kwh(col):
            lo, hi = r.get(f"{col}_lo"), r.get(f"{col}_hi")
            if _num(r.get(col)) is None:
                return None
            interval = (
                f" ({default_pct(*PREDICT_LEVEL)} % interval {lo:#.2g}–{hi:#.2g} kWh)"
                if _num(lo) is not None and _num(hi) is not None
                else ""
            )
            return f"{r[col]:.3g} kWh{interval}"

        paper, op = kwh("energy_kwh"), kwh("op_energy_kwh")
        if op is not None and isinstance(r.get("op_tier"), str):
            tier = r.op_tier
            time = f" and {r.op_time_h:.2g} h" if _num(r.get("op_time_h")) is not None else ""
            text = f"{what} costs {op}{time}{where}, by the operator roofline in its {TIERS.get(tier, f'{tier} tier')}"
            if tier == "fitted":
                text += ", whose energy is " + re.sub(r"^(measured|estimated) energy", r"\1", learned)
            return text + (f". The paper's law, fitted to the same runs, says {paper}." if paper else ".")
        if paper:
            return f"{what} costs {paper}{where}, by the paper's law fitted to this build's runs ({learned})"
        return NA
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return NA


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


# ------------------------------------------------------------------------------ the paper and this build
def _beats(s: pd.DataFrame, model: str, other, target: str) -> str:
    """Whether ``model`` has the lower pooled MAPE than ``other``, and whether their intervals separate them."""
    a, b = _pick(s, POOLED, model, target), _pick(s, POOLED, other, target) if other else None
    if a is None or b is None or _num(a.mape_pct) is None or _num(b.mape_pct) is None:
        return f"whether the law beats it is {NA}"
    apart = None
    if all(_num(x) is not None for x in (a.mape_lo_pct, a.mape_hi_pct, b.mape_lo_pct, b.mape_hi_pct)):
        apart = a.mape_hi_pct < b.mape_lo_pct or b.mape_hi_pct < a.mape_lo_pct
    # compared as the page prints them (one decimal), so the gap is the difference of the two printed figures
    ra, rb = round(float(a.mape_pct), 1), round(float(b.mape_pct), 1)
    gap = abs(ra - rb)
    verdict = (
        f"the law beats it by {gap:.1f} points"
        if ra < rb
        else f"the law does not beat it ({gap:.1f} points worse)"
        if ra > rb
        else "the law ties with it at the printed precision"
    )
    if apart is None:
        return verdict
    return verdict + (
        "; their MAPE intervals do not overlap"
        if apart
        else "; their MAPE intervals overlap, so neither is clearly better"
    )


def _model_summary(s: pd.DataFrame, model: str, target: str) -> str:
    split, worst = worst_split(s, model, target)
    text = f"{mape_text(s, POOLED, model, target)} pooled, worst split " + (
        f"{split_label(split)} at {worst:.1f} %" if split else NA
    )
    off = _field(s, model, target, "holdout")
    return text + (f", off-grid runs {off:.1f} %" if _num(off) is not None else "")


def paper_vs_reproduction(
    validation: dict, fit: dict, energy_label: str, noise: dict | None = None
) -> pd.DataFrame:
    """What the paper claims (as this project states it) against what this build's artifacts show."""
    s = scores(validation)
    coef = law_coefficients(fit)
    floor = noise_floor(noise or {})
    best = best_pre_run_baseline(validation, "energy")
    best_text = f"the {model_name(best)}, {mape_text(s, POOLED, best, 'energy')}" if best else NA

    def at(split, model):
        return _pct(_field(s, model, "energy", split))

    return pd.DataFrame(
        [
            {
                "the paper's claim": "Fine-tuning energy follows E = c·F^α·Q^β / η(p) in compute F, memory traffic Q "
                "and the efficiency factor η(p) (fitted with p·η(p) where one meter reads a node's p "
                "ranks).",
                "this reproduction": f"Fitted on {energy_label}: α = {coef['alpha']}, β = {coef['beta']} ({default_pct(*COEF_LEVEL)} % intervals).",
            },
            {
                "the paper's claim": "The three lightweight proxies predict a fine-tune's energy before it runs.",
                "this reproduction": f"The paper's law on runs it never saw: energy MAPE {_model_summary(s, PAPER, 'energy')} "
                f"(replicate noise floor {floor['energy']}). Best baseline that predicts before "
                f"running: {best_text} pooled; {_beats(s, PAPER, best, 'energy')}.",
            },
            {
                "the paper's claim": "Dividing by η(p) carries the law across parallel degrees and layouts.",
                "this reproduction": f"Energy MAPE with a whole parallel degree held out: paper's law {at('leave_one_degree_out', PAPER)}, "
                f"operator roofline {at('leave_one_degree_out', PRIMARY)}; with a whole parallel mode "
                f"held out: {at('leave_one_mode_out', PAPER)} and {at('leave_one_mode_out', PRIMARY)}. A "
                "mode held out has no η(p) curve of its own, so the law takes η = 1 (no parallel loss) "
                "for TP or FSDP held out (2-D held out is composed from the TP and FSDP curves): two of "
                "the mode split's three folds score the law with no η at all.",
            },
            {
                "the paper's claim": "(This companion, not the paper.) A roofline over the step's operators predicts time "
                "and energy without a power law.",
                "this reproduction": f"Operator roofline, held out: time MAPE {_model_summary(s, PRIMARY, 'time')}; energy "
                f"MAPE {_model_summary(s, PRIMARY, 'energy')} (noise floor {floor['time']} and "
                f"{floor['energy']}).",
            },
            {
                "the paper's claim": "Energy is measured on the hardware that trains.",
                "this reproduction": f"{energy_label[:1].upper() + energy_label[1:] if energy_label else NA}.",
            },
        ]
    )


def paper_claims(validation: dict, fit: dict) -> pd.DataFrame:
    """The paper's claims against this build in few words, for the introduction (headline.json keeps
    ``paper_vs_reproduction``'s longer table; how energy was obtained is the answer box's)."""
    s = scores(validation)
    coef = law_coefficients(fit)
    best = best_pre_run_baseline(validation, "energy")

    def at(split, model):
        return _pct(_field(s, model, "energy", split))

    degree, mode = "leave_one_degree_out", "leave_one_mode_out"
    return pd.DataFrame(
        [
            {
                "the paper's claim": "Energy follows E = c·F^α·Q^β / η(p).",
                "this build": f"α = {coef['alpha']}, β = {coef['beta']} ({default_pct(*COEF_LEVEL)} % intervals).",
            },
            {
                "the paper's claim": "The proxies predict a fine-tune's energy before it runs.",
                "this build": f"Held-out energy MAPE {mape_text(s, POOLED, PAPER, 'energy')} pooled; the "
                f"{model_name(best) if best else NA} "
                f"{mape_text(s, POOLED, best, 'energy')}: {_beats(s, PAPER, best, 'energy')}.",
            },
            {
                "the paper's claim": "Dividing by η(p) carries the law across parallel degrees and modes.",
                "this build": f"Energy MAPE with a parallel degree held out {at(degree, PAPER)} (operator roofline "
                f"{at(degree, PRIMARY)}), with a mode held out {at(mode, PAPER)} ({at(mode, PRIMARY)}): a "
                "held-out TP or FSDP has no η(p) curve, so the law takes η = 1.",
            },
        ]
    )


def headline_record(validation: dict, noise: dict, builds: pd.DataFrame | None = None) -> dict:
    """The numbers behind the page's tables, unrounded, for headline.json (``builds``: as ``verdict_table``)."""
    s = scores(validation)
    return {
        "scores": s.replace({np.nan: None}).to_dict("records"),
        "noise_floor": noise_floor(noise),
        "ci_filter": validation.get("ci_filter") if isinstance(validation, dict) else None,
        "verdict": verdict_table(validation, builds).to_dict("records"),
    }


H100_J_PER_FLOP = 700 / 989e12  # an H100's TDP (W) over its dense bf16 peak (FLOP/s): energy per FLOP at best


# coefficients fitted under a non-negativity constraint: at exactly 0 the fit gave the term no weight (the USL's;
# tokens-linear's slope and intercept, nnls; the energy roofline's energies per FLOP and per byte, lsq_linear)
NON_NEGATIVE = ("sigma", "kappa", "a_j_per_token", "b_j", "eps_F_j_per_flop", "eps_Q_j_per_byte")
AT_ZERO = "at its bound 0: these runs give the term no weight (it is absent, or they cannot tell it from the others)"


def usl_one_degree_note(name: str, degrees: list, interval: str = "interval") -> dict:
    """A USL fitted at one parallel degree: κ is fixed at 0, not fitted (one point on the curve cannot tell the
    two apart), and σ carries the whole loss at that degree; the cells that say so."""
    at = f"one degree only ({degrees[0] if degrees else '?'})"
    if name == "kappa":
        return {interval: "—", "note": f"fixed at 0, not fitted: measured at {at}, κ cannot be told from σ"}
    return {"note": f"measured at {at}: σ carries the whole loss there, with κ fixed at 0"}


def usl_table(fits: list[dict]) -> pd.DataFrame:
    """USL fits (fit.json's ``usl`` or ``usl_per_size``) as the page shows them: σ and κ to three figures, the
    degrees they were fitted on, and a note where one degree left κ fixed at 0."""
    rows = []
    for u in fits:
        degrees = list(u.get("degrees") or [])
        one = not kappa_fitted(degrees)
        row = {"size": u["size"]} if "size" in u else {}
        row.update(
            {
                "mode": u["mode"],
                "σ": f"{u['sigma']:.3g}",
                "κ": "0 (fixed)" if one else f"{u['kappa']:.3g}",
                "degrees": ", ".join(str(d) for d in degrees) or "—",
                "note": usl_one_degree_note("sigma", degrees)["note"] if one else "",
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _flag(param: str, value: float, lo: float, hi: float) -> str:
    """Words for a coefficient that these runs cannot identify or that no device could produce."""
    notes = []
    if param == "alpha" and value < 0:
        notes.append("negative: energy or time would fall as FLOPs grow, which is unphysical")
    if param == "beta" and value < 0:
        notes.append("negative: energy would fall as memory traffic grows, which is unphysical")
    if param in NON_NEGATIVE and value == 0:
        notes.append(AT_ZERO)
    elif param in NON_NEGATIVE and lo <= 0 < hi:
        notes.append("its interval reaches its bound 0: these runs cannot tell this term from none")
    if param == "eps_F_j_per_flop" and value < H100_J_PER_FLOP / 100:
        notes.append(
            f"far below any device's energy per FLOP (an H100 at peak and TDP: {H100_J_PER_FLOP:.1e} J)"
        )
    if lo < 0 < hi and not param.startswith("log_"):
        notes.append("its interval spans zero: not identified by these runs")
    elif lo > 0 and hi / lo > 100:
        notes.append("its interval spans more than two orders of magnitude: poorly identified")
    if param == "k" and value > 1:
        notes.append(
            "above 1: the hardware table has no TDP for this device (taken as 1 W; CodeCarbon's estimate "
            "uses a TDP of its own), so k is the mean power drawn in W"
        )
    if lo == hi == value and not (param in NON_NEGATIVE and value == 0):
        notes.append("fixed or held at a bound (no spread across bootstrap replicates)")
    return "; ".join(notes)


def _units() -> dict:
    """Units of every coefficient name the models use (read from the modules that define them)."""
    units = {}
    try:
        from companion.energy import models, opmodel

        units.update(models.UNITS)
        units.update(opmodel.TIME_UNITS)
        units.update(opmodel.ENERGY_UNITS)
    except Exception:  # a renamed table: the unit column stays empty
        pass
    return units


def _held_terms() -> tuple:
    try:
        from companion.energy.opmodel import HELD_TIME_TERMS

        return tuple(HELD_TIME_TERMS)
    except Exception:
        return ()


def operator_coefficients(fit: dict) -> list[dict]:
    """The operator roofline's fitted coefficients (point values: its uncertainty is in its prediction intervals,
    from held-out residuals), as rows of ``coefficient_table``."""
    op = fit.get("operator_model") if isinstance(fit, dict) else None
    if not isinstance(op, dict):
        return []
    from companion.energy.opmodel import coefficient_rows

    held = _held_terms()
    dev = op.get("dev") if isinstance(op.get("dev"), dict) else {}
    idle_w, shared = _num(dev.get("idle_w")), bool(dev.get("shared_node"))
    thread = _num(dev.get("thread_exponent")) if shared else None
    rows = []
    for r in coefficient_rows(
        op.get("time") or {}, op.get("energy") or {}, op.get("layout_scale") or {}, thread
    ):
        name, value = r["param"], r["value"]
        if _num(value) is None:
            continue
        rows.append(
            {
                "model": "operator roofline",
                "target": "time" if r["target"] == "step_s" else "energy",
                "coefficient": name,
                "value": f"{value:.3g}",
                "unit": r["unit"],
                "interval": "—",
                "note": ""
                if name == "thread_exponent"
                else "held at its calibrated value, not fitted"
                if name in held
                # every coefficient is fitted non-negative (a time multiplier no run uses stays at 1,
                # an energy term no run uses at 0, a layout's factor at 0 drops its overheads), so 0 is
                # the bound
                else AT_ZERO
                if value == 0
                else _below_idle(value, idle_w, shared)
                if name == "P_static_w"
                else "",
            }
        )
    return rows


def _below_idle(static_w: float, idle_w: float | None, shared_node: bool) -> str:
    """A fitted static power below the calibration's idle power. On a shared CPU node every run keeps cores busy,
    so the static power and the power per busy core trade off (their sum at a run's busy cores is what the runs
    fix); on a device of its own, the fit and the calibration disagree."""
    if idle_w is None or not idle_w > 0 or static_w >= idle_w:
        return ""
    why = (
        "every run keeps at least one core busy, so static and per-core power trade off and only their sum at "
        "a run's busy cores is fixed by these runs"
        if shared_node
        else "the runs' energies and the calibration's idle reading disagree"
    )
    return f"below the calibration's idle power ({idle_w:.3g} W): {why}"


def usl_coefficient_rows(fits: list[dict], interval: str = "interval") -> list[dict]:
    """σ and κ of each USL fit as coefficient-table rows, with their bootstrap intervals and notes."""
    rows = []
    for u in fits:
        degrees = u.get("degrees") or []
        for name in ("sigma", "kappa"):
            lo, hi = (u.get(f"{name}_ci90") or [np.nan, np.nan])[:2]
            rows.append(
                {
                    "model": f"USL η(p), {u['mode']}",
                    "target": "η",
                    "coefficient": name,
                    "value": f"{u[name]:.3g}",
                    "unit": "",
                    interval: f"[{lo:.3g}, {hi:.3g}]",
                    "note": _flag(name, u[name], lo, hi),
                }
            )
            if not kappa_fitted(degrees):
                rows[-1].update(usl_one_degree_note(name, degrees, interval))
    return rows


# What each coefficient of the laws, the USL and the operator roofline's energy is, in words (the operator
# roofline's time terms take the words of its step-time figure, ``figures.OPERATOR_WORDS``).
COEFFICIENT_WORDS = {
    "log_c": "log of the scale c",
    "alpha": "α, exponent of FLOPs",
    "beta": "β, exponent of memory traffic",
    "eps_F_j_per_flop": "ε_F, energy per FLOP",
    "eps_Q_j_per_byte": "ε_Q, energy per byte moved",
    "P0_w": "P₀, static power",
    "u_compute": "u, share of the compute roof reached",
    "v_memory": "v, share of the memory roof reached",
    "a_j_per_token": "a, energy per padded token",
    "b_j": "b, energy per step beyond the tokens",
    "k": "k, the fitted power (as a share of TDP)",
    "sigma": "σ, contention (USL)",
    "kappa": "κ, coherency (USL)",
    "P_static_w": "static power",
    "P_core_w": "power per busy core",
    "P_busy_w": "power above idle while the GPU computes",
    "e_flop_j": "energy per FLOP",
    "e_byte_j": "energy per byte moved",
    "e_comm_j": "energy per byte communicated",
    "thread_exponent": "thread-scaling exponent",
}


def coefficient_words(name: str) -> str:
    """A coefficient's name in words: 'gemm_s' -> 'GEMMs', 'alpha' -> 'α, exponent of FLOPs'; a layout's factor
    'layout_scale[tp2-dp1]' -> 'factor on layout tp2-dp1'; an unknown name as it is."""
    from companion.report.figures import OPERATOR_WORDS

    if name.startswith("layout_scale[") and name.endswith("]"):
        return f"factor on layout {name[len('layout_scale[') : -1]}"
    return COEFFICIENT_WORDS.get(name) or OPERATOR_WORDS.get(name) or name


def coefficient_table(fit: dict) -> pd.DataFrame:
    """Every fitted coefficient with its interval and, in words, why it cannot be trusted where it cannot:
    the operator roofline first (point values), then the laws and the USL curves (bootstrap intervals)."""
    try:
        from companion.energy.fit import FittedModel

        interval = f"{default_pct(*COEF_LEVEL)} % interval"
        units = _units()
        rows = [
            {(interval if k == "interval" else k): v for k, v in r.items()}
            for r in operator_coefficients(fit)
        ]
        coef = FittedModel(fit).coefficient_table()
        targets = {"energy_per_step_j": "energy", "step_s": "time"}
        from companion.energy.laws import LAWS

        rows += [
            {
                "model": LAWS[r.law].label if r.law in LAWS else r.law.replace("_", " "),
                "target": targets.get(r.target, r.target),
                "coefficient": r.param,
                "value": f"{r.value:.3g}",
                "unit": units.get(r.param, ""),
                interval: f"[{r.lo:.3g}, {r.hi:.3g}]",
                "note": _flag(r.param, r.value, r.lo, r.hi),
            }
            for r in coef.itertuples()
        ]
        rows += usl_coefficient_rows(fit.get("usl", []), interval)
        table = pd.DataFrame(rows)
        table.insert(
            table.columns.get_loc("coefficient") + 1, "meaning", table.coefficient.map(coefficient_words)
        )
        return table
    except Exception:  # any schema change of fit.json: the table is "not available"
        return pd.DataFrame()
