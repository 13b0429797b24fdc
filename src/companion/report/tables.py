"""The tables the results' pages show, built from ``companion.report.numbers``: the held-out scores per split
and model, the primary model's verdict criterion by criterion, the paper's claims beside this build's figures,
and the fitted coefficients with their intervals and notes. Each is a DataFrame, or a Styler as the page shows
it; a table an artifact cannot fill reads "not available" where its values would be.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from companion.energy.efficiency import kappa_fitted
from companion.energy.validation import coverage_consistent
from companion.report.builds import coverage_over_builds_text
from companion.report.numbers import (
    COEF_LEVEL,
    MODELS,
    NA,
    PAPER,
    POOLED,
    PRIMARY,
    TARGETS,
    best_pre_run_baseline,
    coverage_consistency,
    default_pct,
    field,
    finite,
    how_often,
    law_coefficients,
    level_pct,
    mape_text,
    model_label,
    model_name,
    noise_floor,
    pct,
    pick,
    reads_measured_time,
    scores,
    split_label,
    split_order,
    verdict_criteria,
    verdict_target,
    worst_split,
)
from companion.report.sentences import coefficient_words, paragraph


# ------------------------------------------------------------------------------------ the primary comparison
def _bound(x) -> str:
    """An interval bound: one decimal below 10 %, none above (the cells must stay narrow)."""
    v = finite(x)
    return "—" if v is None else (f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}")


def _cell(r: pd.Series | None, coverage_range: tuple | None, floor_in_cell: bool = True) -> str:
    if r is None or finite(r.mape_pct) is None:
        return "—"
    lo, hi = finite(r.mape_lo_pct), finite(r.mape_hi_pct)
    interval = f"[{_bound(lo)}–{_bound(hi)}]" if lo is not None and hi is not None else "[—]"
    cov = finite(r.coverage_pct)
    cov_text = "—" if cov is None else f"{cov:.0f} %"
    # the binomial range exact intervals show on as many runs, where the scores carry it; else the verdict's
    lo_c, hi_c = finite(r.get("coverage_lo_pct")), finite(r.get("coverage_hi_pct"))
    if lo_c is not None and hi_c is not None:
        outside = cov is not None and not coverage_consistent(cov, lo_c, hi_c)
    else:
        outside = (
            cov is not None and bool(coverage_range) and not coverage_range[0] <= cov <= coverage_range[1]
        )
    if outside:
        cov_text = f'<span style="color:#b00">{cov_text}</span>'
    floor = finite(r.get("runs_floor_pct")) if floor_in_cell else None
    floor_text = f"<br><small>floor {floor:.1f}</small>" if floor is not None else ""
    return f"<b>{r.mape_pct:.1f}</b> <small>{interval}</small><br><small>{cov_text}</small>{floor_text}"


def _split_floor(of_split: pd.DataFrame) -> float | None:
    """The replicate floor of a split's runs where every model's cell scores the same runs (one value), else None."""
    floors = {round(v, 1) for v in pd.to_numeric(of_split.runs_floor_pct, errors="coerce").dropna()}
    return floors.pop() if len(floors) == 1 and of_split.runs_floor_pct.notna().all() else None


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
        s = s[~s.model.map(reads_measured_time)]
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
        exact = finite(of_split.exact_floor_pct.max())
        floor = shared_floor[split] = _split_floor(of_split) if floors else None
        refs = [f"floor {floor:.1f}"] if floor is not None else []
        refs += [f"exact {exact:.1f}"] if exact is not None else []
        columns[split] = (
            f"{split_label(split)}<br><small>{int(n) if finite(n) is not None else '?'} runs</small>"
            + (f"<br><small>{', '.join(refs)}</small>" if refs else "")
        )
    rows = []
    for m in models:
        row = {"model": model_label(m)}
        for split, header in columns.items():
            row[header] = _cell(pick(s, split, m, target), rng, floors and shared_floor[split] is None)
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
        {"selector": "th", "props": "text-align: right; white-space: normal; padding-left: 0.6em;"},
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


# ------------------------------------------------------------------------------------------ the verdict
def _met(flag) -> str:
    return "met" if flag is True else "not met" if flag is False else NA


def _stretch(t: dict, limit: float | None, short: bool = False) -> str:
    """The stretch criterion: met or not, with the split whose MAPE is the most times its runs' floor."""
    ratios = t.get("floor_ratio_by_split")
    if not isinstance(ratios, dict) or not ratios:
        return NA
    known = {k: r for k, r in ratios.items() if finite(r) is not None}
    # a split past the stretch fails it even where another split has no floor
    if len(known) < len(ratios) and t.get("meets_stretch") is not False:
        missing = ", ".join(split_label(k) for k in ratios if k not in known)
        return f"{NA} (too few replicated runs for a floor: {missing})"
    worst = max(known, key=known.get)
    text = f"{_met(t.get('meets_stretch'))} ({split_label(worst)}, {known[worst]:.1f} x{'' if short else ' its floor'})"
    # where an exact model's own error (estimated from the passes) is more than the stretch times the floor, no
    # model can be expected to meet it: MAPE / floor over MAPE / exact error is the exact error over the floor
    exact = t.get("exact_floor_ratio_by_split")
    if isinstance(exact, dict) and finite(limit) is not None:
        beyond = [
            f"{split_label(k)}, {known[k] / exact[k]:.1f} x"
            for k in known
            if finite(exact.get(k)) and known[k] / exact[k] > limit
        ]
        if beyond:
            text += f"; an exact model would score above {limit:g} x the floor itself on {'; '.join(beyond)}"
    return text


def _exact_ratio(t: dict) -> str:
    """The pooled MAPE over the exact model's expected error, and the split where that ratio is the largest."""
    ratios = t.get("exact_floor_ratio_by_split")
    known = {k: r for k, r in ratios.items() if finite(r) is not None} if isinstance(ratios, dict) else {}
    if "pooled" not in known:
        return NA
    splits = {k: r for k, r in known.items() if k != "pooled"}
    worst = max(splits, key=splits.get) if splits else None
    return f"{known['pooled']:.1f} x" + (f" ({split_label(worst)}, {splits[worst]:.1f} x)" if worst else "")


def _test_cell(t: dict, short: bool = False) -> str:
    """The test set's row of the verdict: its MAPE against the target, its coverage and its ratio to the
    calibrated tier, or why there is none."""
    if finite(t.get("test_mape_pct")) is None:
        return "no test-set runs" if short else f"{NA} (no test-set runs in this build)"
    ratio = finite(t.get("test_over_calibrated_tier"))
    span = t.get("test_mape_range_pct")
    # against the runs as measured (the host's speed left in): shown where the host-speed correction moved it
    raw = finite(t.get("test_as_measured_mape_pct"))
    raw = raw if raw is not None and round(raw, 1) != round(t["test_mape_pct"], 1) else None
    return (
        f"{pct(t['test_mape_pct'])}"
        + (f" [{span[0]:.1f}, {span[1]:.1f}]" if span else "")
        + f": {_met(t.get('meets_test'))} ({t.get('test_runs', 0)} runs; "
        + (f"{pct(raw)} as measured; " if raw is not None else "")
        + (
            f"floor {pct(t['test_noise_floor_pct'])}; "
            if finite(t.get("test_noise_floor_pct")) is not None
            else ""
        )
        + "coverage "
        f"{pct(t.get('test_coverage_pct'), 0)}"
        + (
            f"; {ratio:.2f} × calibrated: {_met(t.get('test_beats_calibrated_tier'))}"
            if ratio is not None
            else ""
        )
        + ")"
    )


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
    ratio = f"{c['calibrated_ratio']:g}" if "calibrated_ratio" in c else NA
    rows = {
        "pooled": f"pooled held-out MAPE at most {fmt('target_pct')}",
        "split": f"held-out MAPE at most {fmt('split_pct')} in every split (the worst one)",
        "half": "at most half the MAPE of the best baseline that predicts before running",
        "coverage": f"coverage of the {level} % intervals within "
        f"{f'{rng[0]:.0f}–{rng[1]:.0f} %' if rng else NA} in every split, the validation set's off-grid runs included (the "
        "test set's: its own row)",
        "consistent": f"coverage of every split within the range exact {level} % intervals show nine times in ten "
        "on as many runs (binomial; no criterion)",
        "builds": "beside it, not the criterion: each split's coverage with its held-out predictions pooled over the "
        "stored builds (page Across builds), within the same range",
        "holdout": f"off-grid runs' MAPE at most {fmt('target_pct')} (their own replicate noise floor in brackets)",
        "stretch": f"stretch: every MAPE above at most {c['stretch'] if 'stretch' in c else NA:g} x the replicate "
        "floor of the runs it scores (the worst ratio)",
        "exact": "pooled MAPE ÷ the MAPE an exact model would score on the same runs, and the split with the "
        "largest such ratio (estimated from the passes; no criterion)",
        "calibrated": f"pooled MAPE at most {ratio} × its own calibrated tier's (the strongest baseline: the same "
        "model with nothing fitted to the sweep)",
        "test": f"test set (nothing chosen by it): MAPE at most {fmt('target_pct')}, its coverage, and its MAPE at most "
        f"{ratio} × the calibrated tier's on the same runs",
    }
    if short:
        stretch = f"{c['stretch']:g}" if "stretch" in c else NA
        rows = {
            "pooled": f"pooled MAPE ≤ {fmt('target_pct')}",
            "split": f"worst split's MAPE ≤ {fmt('split_pct')}",
            "half": "≤ half the best pre-run baseline's MAPE",
            "coverage": f"coverage {f'{rng[0]:.0f}–{rng[1]:.0f} %' if rng else NA} in every split (test set apart)",
            # every split's coverage against the binomial range is the score tables' red; not repeated here
            "consistent": "",
            "builds": "the same, over the stored builds (no criterion)",
            "holdout": f"off-grid MAPE ≤ {fmt('target_pct')}",
            "stretch": f"stretch: MAPE ≤ {stretch} × replicate floor in every split",
            "exact": "",  # the score tables give an exact model's MAPE under each split
            "calibrated": f"pooled MAPE ≤ {ratio} × the calibrated tier's",
            "test": f"test set MAPE ≤ {fmt('target_pct')} and ≤ {ratio} × calibrated",
        }
    table = {"criterion": list(rows.values())}
    for target, what in TARGETS.items():
        t = verdict_target(validation, target)
        if t is None:
            table[what] = [NA] * len(rows)
            continue
        best = t.get("best_baseline")
        cov = t.get("coverage_pct_by_split")
        outside = (
            [
                f"{split_label(k)} {x:.0f} %"
                for k, x in cov.items()
                if finite(x) is not None and rng and not rng[0] <= x <= rng[1]
            ]
            if isinstance(cov, dict)
            else []
        )
        worst = t.get("worst_split")
        table[what] = [
            f"{pct(t.get('pooled_mape_pct'))}: {_met(t.get('meets_pooled'))}",
            f"{split_label(worst) if worst else NA}, {pct(t.get('worst_split_mape_pct'))}: "
            f"{_met(t.get('meets_every_split'))}",
            f"{_met(t.get('beats_half_best_baseline'))} ({'' if short else 'the '}"
            f"{model_name(best) if best else NA}{'' if short else ' at'} {pct(t.get('best_baseline_mape_pct'))})",
            _met(t.get("coverage_in_range"))
            + (f" (outside: {', '.join(outside)})" if outside else "")
            + (f" ({t['unbounded_intervals']} unbounded intervals)" if t.get("unbounded_intervals") else "")
            + (
                (
                    f" (exact intervals would meet it {how_often(t['coverage_in_range_chance'])})"
                    if short
                    else "; exact intervals would meet it on splits of these sizes about "
                    f"{how_often(t['coverage_in_range_chance'])}"
                )
                if finite(t.get("coverage_in_range_chance")) is not None
                else ""
            ),
            coverage_consistency(t),
            coverage_over_builds_text(builds, target, PRIMARY, rng, predictions=not short),
            f"{pct(t.get('holdout_mape_pct'))}: {_met(t.get('meets_holdout'))}"
            + (
                ""
                if short
                else f" (floor {pct(t['holdout_noise_floor_pct'])})"
                if finite(t.get("holdout_noise_floor_pct")) is not None
                else " (measured once each: no floor of their own)"
            ),
            _stretch(t, c.get("stretch"), short),
            _exact_ratio(t),
            (
                f"{_met(t.get('beats_calibrated_tier'))} ("
                + (
                    f"{finite(t['over_calibrated_tier']):.2f} ×)"
                    if finite(t.get("over_calibrated_tier")) is not None
                    else f"{NA})"
                )
            )
            if short
            else f"{_met(t.get('beats_calibrated_tier'))} (calibrated tier {pct(t.get('calibrated_tier_mape_pct'))}"
            + (
                f", ratio {finite(t['over_calibrated_tier']):.2f})"
                if finite(t.get("over_calibrated_tier")) is not None
                else ")"
            ),
            _test_cell(t, short),
        ]
    out = pd.DataFrame(table)
    return out[out.criterion != ""].reset_index(drop=True) if short else out


# ------------------------------------------------------------------------------ the paper and this build
def _beats(s: pd.DataFrame, model: str, other, target: str) -> str:
    """Whether ``model`` has the lower pooled MAPE than ``other``, and whether their intervals separate them."""
    a, b = pick(s, POOLED, model, target), pick(s, POOLED, other, target) if other else None
    if a is None or b is None or finite(a.mape_pct) is None or finite(b.mape_pct) is None:
        return f"whether the law beats it is {NA}"
    apart = None
    if all(finite(x) is not None for x in (a.mape_lo_pct, a.mape_hi_pct, b.mape_lo_pct, b.mape_hi_pct)):
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
    off = field(s, model, target, "holdout")
    return text + (f", off-grid runs {off:.1f} %" if finite(off) is not None else "")


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
        return pct(field(s, model, "energy", split))

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
        return pct(field(s, model, "energy", split))

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


# ------------------------------------------------------------------------------------- the coefficients
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
    idle_w, shared = finite(dev.get("idle_w")), bool(dev.get("shared_node"))
    thread = finite(dev.get("thread_exponent")) if shared else None
    rows = []
    for r in coefficient_rows(
        op.get("time") or {}, op.get("energy") or {}, op.get("layout_scale") or {}, thread
    ):
        name, value = r["param"], r["value"]
        if finite(value) is None:
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
