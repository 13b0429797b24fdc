"""The sentences the results' pages say, from the numbers of ``companion.report.numbers``: plain text for a
``glue`` and the few HTML pieces a page pastes (a paragraph, the split legend, the answer box).

Each says "not available" for whatever an artifact lacks. The sentences about the runs themselves and how they
were measured (stages 01 to 03, the calibrations) are ``companion.report.prose``'.
"""

from __future__ import annotations

import html
import re

import pandas as pd

from companion.energy.validation import CRITERIA_WORDS
from companion.report.numbers import (
    MODELS,
    NA,
    PAPER,
    POOLED,
    PREDICT_LEVEL,
    PRIMARY,
    SPLITS,
    best_pre_run_baseline,
    busy,
    ci_filter_counts,
    verdict_criteria,
    default_pct,
    field,
    finite,
    model_name,
    noise_floor,
    pct,
    reads_measured_time,
    scores,
    span,
    split_label,
    verdict_target,
)


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


# ---------------------------------------------------------------------------------------- the held-out scores
# what the off-grid columns hold out (validation.json's model_splits says it of the cross-validation splits)
HOLDOUT_TEXT = "the validation set, predicted by fits on the whole sweep; constants were chosen by it"
TEST_TEXT = "other off-grid runs, drawn with their own seed; nothing was chosen by them"


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
            f"the {n_cv} cross-validation splits together (a run held out twice counts twice)",
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


def summary_text(validation: dict, noise: dict) -> str:
    """One sentence for the introduction: the primary model, the paper's law and the best pre-run baseline."""
    s = scores(validation)
    f = noise_floor(noise)
    if s.empty:
        return f"The held-out comparison of the models is {NA}."
    out = []
    for name, what in ((PRIMARY, "the operator roofline"), (PAPER, "the paper's law")):
        out.append(
            f"{what} {pct(field(s, name, 'time'))} for time and {pct(field(s, name, 'energy'))} for energy"
        )
    best = best_pre_run_baseline(validation, "energy")
    return (
        f"Pooled over the cross-validation splits, the held-out MAPE is: {out[0]}; {out[1]}; the best baseline "
        f"that predicts before running ({model_name(best) if best else NA}) {pct(field(s, best, 'time'))} and "
        f"{pct(field(s, best, 'energy'))}. The replicate noise floor is {f['time']} (time) and {f['energy']} "
        f"(energy)."
    )


def energy_honesty_text(validation: dict, runs: pd.DataFrame) -> str:
    """Where the runs' energy is estimated (a power model times the measured time), that the energy error is not
    a test of its own, and the power model's error alone (given each run's measured time) beside the energy
    error with predicted time; where it is measured, that it is."""
    if runs is None or runs.empty or "energy_measured" not in runs:
        return f"How this build's energy was obtained is {NA}."
    s = scores(validation)
    after = [
        f"{pct(field(s, m, 'energy'))} for the {model_name(m)}"
        for m in MODELS
        if reads_measured_time(m) and finite(field(s, m, "energy")) is not None
    ]
    given = (
        f" Given each run's measured time (after the fact), energy errs by {' and '.join(after)}, pooled."
        if after
        else ""
    )
    if runs.energy_measured.astype(bool).all():
        return (
            f"This build's energy is measured (an energy counter), so its error is a test of its own.{given}"
        )
    return (
        "Energy here is estimated, not measured (a power model × the measured time): its error largely repeats "
        f"the time error, not an independent test.{given}"
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
            "Every band's coverage lies within the range in which exact intervals' coverage falls nine times in "
            "ten on as many predictions: on this sweep, coverage does not fall with the share of overheads."
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


# -------------------------------------------------------------------------------------------- the noise floor
def pass_drift_text(noise: dict, kept: bool = True) -> str:
    """How far the later pass of the sweep ran from the first (noise.json's ``between_passes``, time per step):
    the median change, signed, and the median size of the change; ``kept``: the noise is the step-time filter's
    kept runs' (validation.json's), not every run's."""
    d = ((noise or {}).get("between_passes") or {}).get("time_per_step") if isinstance(noise, dict) else None
    ratio = finite(d.get("median_ratio")) if isinstance(d, dict) else None
    size = finite(d.get("median_abs_change")) if isinstance(d, dict) else None
    if ratio is None or size is None:
        return NA
    way = "slower" if ratio > 1 else "faster"
    n = d.get("n_configs")
    both = "kept in both passes" if kept else "measured in both passes"
    over = f" over the {n} configurations {both}" if isinstance(n, int) and n > 0 else ""
    # a median change that rounds to 0 % has no direction to name
    pace = (
        "at the first's pace, in the median"
        if round(abs(ratio - 1) * 100) == 0
        else f"a median {abs(ratio - 1) * 100:.0f} % {way} than the first"
    )
    return f"{pace} (median absolute change{over}: {size * 100:.0f} %)"


def host_speed_sentence(runs: pd.DataFrame, noise: dict | None) -> str:
    """What the host-speed reference (``companion.runs.hostspeed``) did to this build's runs: how many it
    reached, the range of its factors and the replicate floor of time as measured and at the sweep's typical host
    speed (``noise.json``'s ``as_measured``); or that it reached none, so every time is as measured."""
    raw = (noise or {}).get("as_measured") if isinstance(noise, dict) else None
    factor = runs["host_speed_factor"].dropna() if "host_speed_factor" in runs else pd.Series(dtype=float)
    if not raw or factor.empty:
        return "Every time here is as measured: no run timed the host-speed reference."
    floor = ((noise.get("metrics") or {}).get("time_per_step") or {}).get("mape")
    was = (raw.get("mape") or {}).get("time_per_step")
    spread = (
        f" Replicates fall {pct(was * 100)} from their configuration's mean as measured, {pct(floor * 100)} at "
        "the typical speed."
        if finite(was) is not None and finite(floor) is not None
        else ""
    )
    return (
        "A shared host's speed wanders by tens of per cent over seconds, and every step's time with it: each "
        f"one-rank run timed a small fixed workload just before and after its windows, and its step time and "
        f"energy are divided by that timing over the sweep's median ({factor.min():.2f} to {factor.max():.2f}, "
        f"{len(factor)} of {len(runs)} runs; runs of several ranks keep their measured times). Every model is "
        f"fitted and scored on these times.{spread}"
    )


def replicates_words(runs: pd.DataFrame) -> str:
    """How many times each configuration of the sweep was measured, in words, from runs.csv: "twice" where every
    configuration was, "twice (41 configurations) or once (24)" where a group of the profile sets its own count (the
    most measured first)."""
    if not len(runs):
        return NA
    if "replicate" not in runs:
        return "once"
    # a frame from before config ids: one count, its most replicates
    config = runs["config_id"] if "config_id" in runs else pd.Series(0, index=runs.index)
    try:
        per_config = (pd.to_numeric(runs["replicate"], errors="coerce") + 1).groupby(config).max().astype(int)
    except (TypeError, ValueError):
        return NA
    counts = per_config.value_counts().sort_index(ascending=False)
    words = [{1: "once", 2: "twice", 3: "three times"}.get(n, f"{n} times") for n in counts.index]
    if len(counts) == 1:
        return words[0]
    return " or ".join(
        f"{w} ({c}{' configurations' if i == 0 else ''})" for i, (w, c) in enumerate(zip(words, counts))
    )


# -------------------------------------------------------------------------------- the runs the scores rest on
FEW_RUNS = 8  # a split scored on fewer runs than this says little about the model


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
    sweep, held, limit = ci_filter_counts(validation)
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
        f"±{pct(100 * limit, 0) if limit is not None else NA} (95 % interval), a sign of other load on the "
        f"machine."
    )
    every, scored = noise_floor(sweep_noise or {}), noise_floor(validation.get("noise") or {})
    if every["time"] != NA and scored["time"] != NA and every["time"] != scored["time"]:
        text += (
            f" Over every run of the sweep the replicate floor is {every['time']} for time, against "
            f"{scored['time']} over the runs scored."
        )
    if busy(sweep) or busy(held):
        s = scores(validation)
        few = (
            s[(s.model == PRIMARY) & (s.target == "time") & ~s.split.isin([POOLED]) & (s.n < FEW_RUNS)]
            if not s.empty
            else s
        )
        named = ", ".join(f"{split_label(r.split)} on {int(r.n)} runs" for r in few.itertuples())
        rest = f", and some splits rest on few ({named})" if len(few) else ""
        text += (
            f" The machine was busy: the filter left out many runs{rest}. Measure again on a quiet machine "
            "before reading the verdict as the model's accuracy."
        )
    return text


def scored_and_filter_text(validation: dict, sweep_noise: dict | None = None, runs=None) -> str:
    """``scored_runs_text``, and where the step-time filter left runs out, the figures with and without it."""
    f = validation.get("filter_sensitivity") if isinstance(validation, dict) else None
    dropped = isinstance(f, dict) and isinstance(f.get("dropped"), dict) and any(f["dropped"].values())
    text = scored_runs_text(validation, sweep_noise)
    # the counts kept are said already: the runs left out are not counted again
    return f"{text} {filter_sensitivity_text(validation, runs, counts=False)}" if dropped else text


def scored_runs_short(validation: dict) -> str:
    """The runs the verdict judges, in a few words: the step-time filter's kept runs of the sweep and the off-grid runs,
    and whether the machine was busy (the filter kept fewer than ``BUSY_KEPT_FRACTION`` of them)."""
    sweep, held, _ = ci_filter_counts(validation)
    if sweep is None:
        return f"the runs the step-time filter kept (how many: {NA})"
    text = f"{sweep['kept']} of the sweep's {sweep['runs']} runs{_off_grid_words(held)}"
    return text + (
        ", the rest left out by the step-time filter on a busy machine (see above)"
        if busy(sweep) or busy(held)
        else ", those the step-time filter kept"
    )


def filter_sensitivity_text(validation: dict, runs: pd.DataFrame | None = None, counts: bool = True) -> str:
    """The primary model's headline figures with and without the step-time filter, and the runs it left out
    (their configurations, from ``runs``; with ``counts``, first how many of each group), from validation.json's
    ``filter_sensitivity``."""
    f = validation.get("filter_sensitivity") if isinstance(validation, dict) else None
    if not isinstance(f, dict):
        return f"The headline figures without the step-time filter are {NA}."
    dropped = [r for ids in (f.get("dropped") or {}).values() for r in ids]
    if not dropped or not isinstance(f.get("without_filter"), dict):
        return "The step-time filter left out no run: the figures are the same without it."

    groups = {"sweep": "of the sweep", "holdout": "of the validation set", "test": "of the test set"}
    left_out = [f"{len(ids)} {groups.get(k, k)}" for k, ids in (f.get("dropped") or {}).items() if ids]
    # each headline figure with and without the filter: the largest change says it in one number
    keys = ("pooled_mape_pct", "worst_split_mape_pct", "holdout_mape_pct", "test_mape_pct")
    changes = []
    for target in ("time", "energy"):
        a, b = f["with_filter"].get(target) or {}, f["without_filter"].get(target) or {}
        for key in keys:
            x, y = finite(a.get(key)), finite(b.get(key))
            if x is not None and y is not None:
                changes.append((y - x, target, key, x, y))
    words = {
        "pooled_mape_pct": "pooled",
        "worst_split_mape_pct": "worst split",
        "holdout_mape_pct": "off-grid",
        "test_mape_pct": "test set",
    }
    named = []
    if runs is not None and len(runs) and "run_id" in runs:
        # single-process and parallel runs apart, with their depths (validation.json names every run): a line
        # whatever the number left out
        rows = runs[runs.run_id.isin(dropped)]
        for where, part in rows.groupby(rows.world_size > 1):
            lo, hi = int(part.layers.min()), int(part.layers.max())
            depth = f"{lo} layer{'s' if lo > 1 else ''}" if lo == hi else f"{lo}-{hi} layers"
            named.append(f"{len(part)} {'parallel' if where else 'single-process'} ({depth})")
    text = f"The filter left out {len(dropped)} runs ({', '.join(left_out)}). " if counts else ""
    if changes:
        d, target, key, x, y = max(changes, key=lambda c: abs(c[0]))
        text += (
            f"Without the filter the operator roofline's held-out errors move by at most {abs(d):.1f} points "
            f"({target}, {words[key]}: {x:.1f} % with it, {y:.1f} % without)."
        )
    if named:
        text += f" The sweep's runs it left out: {', '.join(named)}."
    return text.strip()


# ------------------------------------------------------------------------------------------------- the answer
def _test_over_builds(builds: pd.DataFrame | None) -> str:
    """' (11.4 % and 11.0 % over 2 builds)': the primary model's test-set MAPE, time and energy, averaged over the
    builds that measured the current draw (this one among them), as the page Across builds gives it
    (``stored.pooled_coverage``'s rows); empty with fewer than two."""
    if builds is None or not len(builds):
        return ""
    rows = builds[(builds.split == "test") & (builds.model == PRIMARY)].set_index("target")
    if rows.empty or rows.sweeps.max() < 2:
        return ""
    mape = rows.mape_pct
    return f" ({pct(mape.get('time'))} and {pct(mape.get('energy'))} over {int(rows.sweeps.max())} builds)"


# the summary page's verdict, as a link from the book's root (where the introduction is)
VERDICT_HREF = "generated/06_headline.html#the-verdict-on-the-primary-model"
VERDICT_KEYS = tuple(CRITERIA_WORDS)  # the verdict table's criteria, its stretch goal apart


def answer_box(
    validation: dict,
    runs: pd.DataFrame,
    gpu: dict | None = None,
    device: str = NA,
    noise: dict | None = None,
    builds: pd.DataFrame | None = None,
):
    """The introduction's one-screen answer (HTML, a short list): the hardware, how energy was obtained, the
    primary model's held-out and test-set errors with its verdict beside the replicate noise floor (``noise``)
    and, where ``builds`` (the stored builds' scores pooled, ``stored.pooled_coverage``) holds other builds of the
    test set, their mean,
    the paper's law against the best baseline, and the GPU's figures."""
    from IPython.display import HTML

    s = scores(validation)
    t = verdict_target(validation, "time") or {}
    e = verdict_target(validation, "energy") or {}
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
    paper, base = field(s, PAPER, "energy"), field(s, best, "energy") if best else None
    beats = finite(paper) is not None and finite(base) is not None and paper < base
    # their 90 % intervals (resampling groups) overlapping: a lower MAPE that does not tell the two apart
    bounds = [
        field(s, m, "energy", col=c) if m else None
        for m in (PAPER, best)
        for c in ("mape_lo_pct", "mape_hi_pct")
    ]
    overlap = all(finite(b) is not None for b in bounds) and not (
        bounds[1] < bounds[2] or bounds[3] < bounds[0]
    )
    test = (
        f"; on the test set {pct(t.get('test_mape_pct'))} time, {pct(e.get('test_mape_pct'))} energy"
        + _test_over_builds(builds)
        if finite(t.get("test_mape_pct")) is not None
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
        f" (replicate floor {floor['time']} and {floor['energy']})"
        if floor["time"] != NA and floor["energy"] != NA
        else ""
    )
    verdict = (
        # the criteria are listed on the summary page (the box is pasted into the introduction, at the root)
        f'{met} of {len(judged)} <a href="{VERDICT_HREF}">criteria</a> met for time'
        if judged
        else "no verdict (too few runs to hold out whole groups)"
    )
    sweep, _, _ = ci_filter_counts(validation)
    kept = (
        f", {sweep['kept']}"
        + ("" if sweep["runs"] == n else f" of the grid's {sweep['runs']}")
        + " kept by the step-time filter"
        if sweep and isinstance(sweep.get("kept"), int) and sweep["kept"] < sweep["runs"]
        else ""
    )
    items = [
        f"<b>Hardware</b>: {html.escape(str(device))}, {n} runs{ranks}{kept}.",
        "<b>Energy</b>: "
        + (
            "measured by a hardware counter."
            if measured
            else "estimated (power model × measured time): its error repeats time's."
        ),
        f"<b>Primary model</b> (operator roofline, fitted), held out: {pct(t.get('pooled_mape_pct'))} "
        f"time, {pct(e.get('pooled_mape_pct'))} energy pooled{floor_text}{html.escape(test)}; {verdict}; "
        f"{_ratio_words(t, verdict_criteria(validation).get('calibrated_ratio'))}.",
        f"<b>The paper's law</b>: {pct(paper)} energy pooled; the best baseline "
        f"({html.escape(model_name(best)) if best else NA}) {pct(base)}"
        + (
            (
                ": no better (intervals overlap)."
                if overlap
                else f": it {'beats' if beats else 'does not beat'} it."
            )
            if finite(paper) is not None and finite(base) is not None
            else ": no comparison in this build."
        ),
    ]
    sets = [one for one in (gpu or {}).get("one_machines") or [] if "test" in one.get("tiers", {})]
    if sets:

        def over(split, tier, target):
            """The range over the machines, or None where a machine lacks the figure (no partial range)."""
            values = [(one["tiers"][split].get(tier) or {}).get(f"{target}_mape_pct") for one in sets]
            return span(values, 1) if all(finite(v) is not None for v in values) else None

        # the caveat: a calibration describes its own machine's host (another machine's, on these runs; and an
        # earlier calibration of the test machine, from a host probe of two depths, missed its own runs)
        other = [
            *((gpu.get("host_speed") or {}).get("calibrated_from_probe_machine") or {}).values(),
            (((gpu.get("test") or {}).get("tiers") or {}).get("calibrated") or {}),
        ]
        others = sorted(v["time_mape_pct"] for v in other if finite(v.get("time_mape_pct")) is not None)
        prior = [over("test", "prior", t) for t in ("time", "energy")]
        items.append(
            f"<b>On a GPU</b> ({html.escape(str(gpu.get('device')))}, energy measured), nothing fitted: "
            + (
                f"{len(sets)} machines' own calibrations miss"
                if len(sets) > 1
                else "a machine's own calibration misses"
            )
            + f" {sets[0]['runs']['test']} test runs by {over('test', 'calibrated', 'time') or NA} time, "
            f"{over('test', 'calibrated', 'energy') or NA} energy"
            + (f"; datasheet priors by {prior[0]} and {prior[1]}" if None not in prior else "")
            + (
                f" (another machine's: {others[0]:.0f}–{others[-1]:.0f} % time)."
                if others
                else f" ({over('reference', 'calibrated', 'time') or NA} / "
                f"{over('reference', 'calibrated', 'energy') or NA} over {sets[0]['runs']['reference']} reference runs)."
            )
        )
    elif gpu and gpu.get("tiers"):
        g = gpu["tiers"].get("calibrated", {})
        items.append(
            f"<b>On a GPU</b> ({html.escape(str(gpu.get('device')))}, energy measured): the calibrated "
            f"model, fitted on nothing, {pct(g.get('time_mape_pct'))} time and "
            f"{pct(g.get('energy_mape_pct'))} energy over {gpu.get('runs')} runs"
            + (
                f"; on {t['runs']} test runs from another machine the prior is off by "
                f"{pct(t['tiers']['prior']['time_mape_pct'])} / {pct(t['tiers']['prior']['energy_mape_pct'])}, "
                f"the calibrated tier by {pct(t['tiers']['calibrated']['time_mape_pct'])} (host speed differs "
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


def _ratio_words(t: dict, mark: float | None = None) -> str:
    """The pooled ratio to the calibrated tier's error, with ``mark`` (the verdict's own criterion) and whether
    it was met, where the verdict judged it."""
    r, met = finite(t.get("over_calibrated_tier")), t.get("beats_calibrated_tier")
    judged = f" (≤ {mark:g} ×: {'met' if met else 'not met'})" if finite(mark) is not None else ""
    return (
        f"{r:.2f} × its calibrated tier's error" + (judged if isinstance(met, bool) else "")
        if r is not None
        else "its calibrated tier's error is not available"
    )


TIERS = {
    "fitted": "fitted tier: coefficients fitted on this build's runs",
    "calibrated": "calibrated tier: the device's calibration at face value, nothing fitted on runs",
    "prior": "prior tier: spec-sheet roofs and priors, wide intervals",
}


def absolute_answer(explore: pd.DataFrame, predict_params: dict, energy_label: str, device: str = NA) -> str:
    """One sentence a reader can use: a planned fine-tune's energy (kWh) and time with their intervals, naming the
    model and tier that produced it and the energy (measured or estimated, on which device) it learned from."""
    try:
        r = explore.iloc[0]
        p = predict_params if isinstance(predict_params, dict) else {}
        examples, epochs = p.get("examples"), p.get("epochs")
        if finite(examples) is None or finite(epochs) is None:
            return NA
        batch = f", batch size {p['batch_size']}" if finite(p.get("batch_size")) is not None else ""
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
            if finite(r.get(col)) is None:
                return None
            interval = (
                f" ({default_pct(*PREDICT_LEVEL)} % interval {lo:#.2g}–{hi:#.2g} kWh)"
                if finite(lo) is not None and finite(hi) is not None
                else ""
            )
            return f"{r[col]:.3g} kWh{interval}"

        paper, op = kwh("energy_kwh"), kwh("op_energy_kwh")
        if op is not None and isinstance(r.get("op_tier"), str):
            tier = r.op_tier
            time = f" and {r.op_time_h:.2g} h" if finite(r.get("op_time_h")) is not None else ""
            text = f"{what} costs {op}{time}{where}, by the operator roofline in its {TIERS.get(tier, f'{tier} tier')}"
            if tier == "fitted":
                text += ", whose energy is " + re.sub(r"^(measured|estimated) energy", r"\1", learned)
            return text + (f". The paper's law, fitted to the same runs, says {paper}." if paper else ".")
        if paper:
            return f"{what} costs {paper}{where}, by the paper's law fitted to this build's runs ({learned})"
        return NA
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return NA


# ------------------------------------------------------------------------------------------- the coefficients
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
    "side_by_side": "side-by-side ranks' compute",
}


def coefficient_words(name: str) -> str:
    """A coefficient's name in words: 'gemm_s' -> 'GEMMs', 'alpha' -> 'α, exponent of FLOPs'; a layout's factor
    'layout_scale[tp2-dp1]' -> 'factor on layout tp2-dp1'; an unknown name as it is."""
    from companion.report.figures import OPERATOR_WORDS

    if name.startswith("layout_scale[") and name.endswith("]"):
        return f"factor on layout {name[len('layout_scale[') : -1]}"
    return COEFFICIENT_WORDS.get(name) or OPERATOR_WORDS.get(name) or name
