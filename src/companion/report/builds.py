"""The page "Across builds": the stored sweeps' scores (``companion.energy.stored``) as its tables and sentences.

Every function takes ``score_stored``'s rows (one per sweep x group x model x target) or ``pooled_coverage``'s
(one per group x model x target) and returns what the page shows; none reads a file.
"""

from __future__ import annotations

import pandas as pd

from companion.energy.stored import BAND_PCT
from companion.energy.validation import SPLIT_WORDS

POOLED = "pooled"
GROUP_WORDS = {POOLED: "every split pooled", **SPLIT_WORDS}
TARGETS = ("time", "energy")


def group_order(groups) -> list[str]:
    """The groups in the validation page's order: pooled first, then the splits, the off-grid runs last."""
    present = set(groups)
    middle = [g for g in GROUP_WORDS if g in present and g not in (POOLED, "holdout")] + sorted(present - set(GROUP_WORDS))
    return ([POOLED] if POOLED in present else []) + middle + (["holdout"] if "holdout" in present else [])


def _rows(pooled: pd.DataFrame, model: str) -> dict:
    p = pooled[pooled.model == model]
    return {(r.split, r.target): r for r in p.itertuples()}


def coverage_table(pooled: pd.DataFrame, model: str = "operator_roofline", band=BAND_PCT) -> pd.DataFrame:
    """One row per group: its held-out runs over all sweeps; for time and energy, the coverage pooled over the
    sweeps with its range from resampling sweeps; how many sweeps' own coverage lies in ``band`` (time / energy)
    beside how many exact intervals would put there."""
    rows, cells = [], _rows(pooled, model)
    for group in group_order(pooled[pooled.model == model].split):
        got = {target: cells.get((group, target)) for target in TARGETS}
        first = next((r for r in got.values() if r is not None), None)
        row = {"held-out runs": GROUP_WORDS.get(group, group), "runs": "-" if first is None else str(first.n)}
        for target, r in got.items():
            row[f"{target}: coverage %"] = ("-" if r is None else
                                            f"{r.coverage_pct:.1f} [{r.coverage_lo_pct:.1f}-{r.coverage_hi_pct:.1f}]")
        seen = " / ".join("-" if r is None else str(r.sweeps_in_band) for r in got.values())
        row[f"sweeps in {band[0]:.0f}-{band[1]:.0f} %: time / energy"] = (
            "-" if first is None else f"{seen} of {first.sweeps} (exact: {first.sweeps_in_band_exact:.1f})")
        rows.append(row)
    return pd.DataFrame(rows)


def mape_table(pooled: pd.DataFrame, model: str = "operator_roofline") -> pd.DataFrame:
    """One row per group: for time and energy, the sweeps' mean held-out MAPE with their lowest and highest,
    beside the mean exact-model floor of the runs scored."""
    rows, cells = [], _rows(pooled, model)
    for group in group_order(pooled[pooled.model == model].split):
        row = {"held-out runs": GROUP_WORDS.get(group, group)}
        for target in TARGETS:
            r = cells.get((group, target))
            row[f"{target}: MAPE %"] = "-" if r is None else f"{r.mape_pct:.1f} ({r.mape_min_pct:.1f}-{r.mape_max_pct:.1f})"
            row[f"{target}: floor %"] = "-" if r is None or pd.isna(r.exact_floor_pct) else f"{r.exact_floor_pct:.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def sweeps_text(table: pd.DataFrame) -> str:
    """Which sweeps were scored: how many, stored from when to when, measured by how many commits."""
    if table.empty:
        return "no stored sweeps"
    names = sorted(set(table.sweep))
    commits = {c for c in table.get("commit", pd.Series(dtype=object)).dropna()}
    first, last = names[0][:15], names[-1][:15]  # 2026-11-24T2207: the calibration's time (UTC)
    when = f"{_time(first)} to {_time(last)}" if len(names) > 1 else _time(first)
    made = f", measured by {len(commits)} successive commits of this project" if len(commits) > 1 else ""
    return f"{len(names)} sweeps, stored from {when} (UTC){made}"


def _time(stamp: str) -> str:
    """'2026-11-24T2207' -> '2026-11-24 22:07'."""
    day, _, hm = stamp.partition("T")
    return f"{day} {hm[:2]}:{hm[2:4]}" if len(hm) >= 4 else stamp


def coverage_text(pooled: pd.DataFrame, level: float, model: str = "operator_roofline", band=BAND_PCT) -> str:
    """The page's verdict on the intervals: per target, the range of the pooled coverage over the groups, and
    whether every group lies within ``band``; then the sweep-by-sweep count beside exact intervals'."""
    p = pooled[pooled.model == model]
    if p.empty:
        return "No stored sweep was scored, so nothing is said here about the intervals across builds."
    pct, lo, hi = f"{level * 100:.0f} %", f"{band[0]:.0f}", f"{band[1]:.0f} %"
    parts, outside = [], []
    for target in [t for t in TARGETS if t in set(p.target)]:
        t = p[p.target == target]
        lead = "" if parts else "of a group's held-out runs "
        parts.append(f"between {t.coverage_pct.min():.1f} and {t.coverage_pct.max():.1f} % {lead}for {target}")
        outside += [f"{GROUP_WORDS.get(r.split, r.split)}, {target} ({r.coverage_pct:.1f} %)"
                    for r in t[~t.in_band].itertuples()]
    verdict = (f"every group lies within {lo}-{hi}" if not outside else f"outside {lo}-{hi}: " + "; ".join(outside))
    sweeps = int(p.sweeps.max())
    counts = []
    for target in [t for t in TARGETS if t in set(p.target)]:
        t = p[p.target == target]
        seen, cells, exact = int(t.sweeps_in_band.sum()), int(t.sweeps.sum()), float(t.sweeps_in_band_exact.sum())
        counts.append((target, seen, cells, exact))
    count = "; ".join(f"{target} {seen} of {cells} (exact intervals: {exact:.1f})" for target, seen, cells, exact in counts)
    # sampling alone: the count's binomial spread about what exact intervals give (each cell a draw)
    spread = [2 * (exact * (1 - exact / cells)) ** 0.5 for _, _, cells, exact in counts]
    gaps = [seen - exact for _, seen, _, exact in counts]
    if all(abs(g) <= s for g, s in zip(gaps, spread)):
        how = "a single build misses the band about as often as exact intervals would on groups of its sizes"
    elif all(g > -s for g, s in zip(gaps, spread)):
        how = "a single build lands in the band more often than exact intervals would on groups of its sizes"
    else:
        how = "a single build misses the band more often than exact intervals would on groups of its sizes"
    return (f"Pooled over the {sweeps} stored sweeps, the nominal {pct} intervals cover {', '.join(parts)}: {verdict}. Sweep by sweep, the groups whose own coverage lies within "
            f"{lo}-{hi} number {count}: {how}")


def split_sizes_text(table: pd.DataFrame, level: float, model: str = "operator_roofline") -> str:
    """How many held-out runs a split of one sweep scores (the median over the stored sweeps, the smallest and
    largest split), and the coverage range exact ``level`` intervals show nine times in ten on the smallest."""
    from companion.energy.validation import coverage_range_pct

    t = table[(table.model == model) & (table.target == "time") & (table.split != POOLED)]
    if t.empty:
        return "a few dozen runs or fewer"
    sizes = (t.n - t.n_unbounded).groupby(t.split).median().sort_values()
    small = int(sizes.iloc[0])
    lo, hi = coverage_range_pct(small, level)
    return (f"from {small} runs ({GROUP_WORDS.get(sizes.index[0], sizes.index[0])}) to {int(sizes.iloc[-1])} "
            f"({GROUP_WORDS.get(sizes.index[-1], sizes.index[-1])}), the median over the stored sweeps; on {small} "
            f"runs even exact {level * 100:.0f} % intervals cover anywhere from {lo:.0f} to {hi:.0f} % of them "
            "nine times in ten")


def coverage_short(pooled: pd.DataFrame, model: str = "operator_roofline", band=BAND_PCT) -> str:
    """The pooled coverage for another page's sentence: its range over the groups per target, how many sweeps,
    and whether every group lies within ``band``."""
    p = pooled[(pooled.model == model) & (pooled.split != POOLED)]
    if p.empty:
        return "not available (no stored sweep was scored)"
    ranges = [f"{p[p.target == t].coverage_pct.min():.1f}–{p[p.target == t].coverage_pct.max():.1f} % for {t}"
              for t in TARGETS if t in set(p.target)]
    inside = bool(p.in_band.all())
    return (f"{' and '.join(ranges)} per split over {int(p.sweeps.max())} stored builds, "
            + (f"every split within {band[0]:.0f}–{band[1]:.0f} %" if inside else
               f"not every split within {band[0]:.0f}–{band[1]:.0f} %"))


def floor_text(table: pd.DataFrame, model: str = "operator_roofline", target: str = "time") -> str:
    """How a sweep's pooled held-out MAPE follows the replicate floor of its runs: their correlation over the
    sweeps, and the MAPE of the quieter half of the sweeps beside the noisier half's."""
    t = table[(table.model == model) & (table.target == target) & (table.split == POOLED)].dropna(
        subset=["mape_pct", "exact_floor_pct"]).sort_values("exact_floor_pct")
    if len(t) < 4:
        return f"Too few stored sweeps ({len(t)}) to say how a sweep's error follows its floor"
    r = float(t.mape_pct.corr(t.exact_floor_pct))
    half = len(t) // 2
    quiet, busy = t.iloc[:half], t.iloc[-half:]
    follows = "follows" if r >= 0.5 else "hardly follows"
    return (f"Over the {len(t)} sweeps, a sweep's pooled {target} MAPE {follows} the floor of its runs (Pearson r = "
            f"{r:.2f}): the {half} sweeps of lowest floor ({quiet.exact_floor_pct.min():.1f}-"
            f"{quiet.exact_floor_pct.max():.1f} %) score {quiet.mape_pct.mean():.1f} % on average, the {half} of "
            f"highest ({busy.exact_floor_pct.min():.1f}-{busy.exact_floor_pct.max():.1f} %) "
            f"{busy.mape_pct.mean():.1f} %")
