"""The page "Across builds": the stored sweeps' scores (``companion.energy.stored``) as its tables and sentences.

Every function takes ``score_stored``'s rows (one per sweep x group x model x target) or ``pooled_coverage``'s
(one per group x model x target) and returns what the page shows; none reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from companion.energy.stored import BAND_PCT, THIS_BUILD
from companion.energy.validation import SPLIT_WORDS
from companion.report.numbers import NA, POOLED, TARGETS, host_slug_words, listed, split_label

GROUP_WORDS = {POOLED: "every split pooled", **SPLIT_WORDS}


def group_order(groups) -> list[str]:
    """The groups in the validation page's order: pooled first, then the splits, the off-grid validation runs and
    the test set last."""
    present = set(groups)
    middle = [g for g in GROUP_WORDS if g in present and g not in (POOLED, "holdout", "test")] + sorted(
        present - set(GROUP_WORDS)
    )
    return ([POOLED] if POOLED in present else []) + middle + [g for g in ("holdout", "test") if g in present]


def _rows(pooled: pd.DataFrame, model: str) -> dict:
    p = pooled[pooled.model == model]
    return {(r.split, r.target): r for r in p.itertuples()}


def _range(lo: float, hi: float) -> str:
    return f"{lo:.1f}–{hi:.1f}"


def coverage_table(pooled: pd.DataFrame, model: str = "operator_roofline", band=BAND_PCT) -> pd.DataFrame:
    """One row per group: its held-out predictions over all builds; for time and energy, the coverage pooled
    over the builds with its range from resampling builds (``pooled_coverage``'s ``interval``; the caption says
    which); how many builds' own coverage lies in ``band`` (time, energy) beside how many exact intervals would
    put there."""
    rows, cells = [], _rows(pooled, model)
    for group in group_order(pooled[pooled.model == model].split):
        got = {target: cells.get((group, target)) for target in TARGETS}
        first = next((r for r in got.values() if r is not None), None)
        row = {
            "held-out group": GROUP_WORDS.get(group, group),
            "predictions": "-" if first is None else f"{first.n:,}",
        }
        for target, r in got.items():
            row[f"{target} %"] = (
                "-"
                if r is None
                else f"{r.coverage_pct:.1f} [{r.coverage_lo_pct:.1f}, {r.coverage_hi_pct:.1f}]"
            )
        row[f"builds in {band[0]:.0f}–{band[1]:.0f} %"] = ", ".join(
            "-" if r is None else f"{r.sweeps_in_band} of {r.sweeps} (exact: {r.sweeps_in_band_exact:.1f})"
            for r in got.values()
        )
        rows.append(row)
    return pd.DataFrame(rows)


def mape_table(pooled: pd.DataFrame, model: str = "operator_roofline") -> pd.DataFrame:
    """One row per group: for time and energy, the builds' mean held-out MAPE with their lowest and highest,
    beside the mean exact-model floor of the runs scored."""
    rows, cells = [], _rows(pooled, model)
    for group in group_order(pooled[pooled.model == model].split):
        row = {"held-out group": GROUP_WORDS.get(group, group)}
        for target in TARGETS:
            r = cells.get((group, target))
            row[f"{target} MAPE %"] = (
                "-" if r is None else f"{r.mape_pct:.1f} ({_range(r.mape_min_pct, r.mape_max_pct)})"
            )
            row[f"{target} floor %"] = (
                "-" if r is None or pd.isna(r.exact_floor_pct) else f"{r.exact_floor_pct:.1f}"
            )
        rows.append(row)
    return pd.DataFrame(rows)


def per_host_table(table: pd.DataFrame, model: str = "operator_roofline") -> pd.DataFrame:
    """One row per host (CPU model) and this build: its builds, and for every split pooled and for the off-grid
    runs, the builds' mean held-out MAPE of time and energy with their lowest and highest. Each host's own
    figures, before anything is pooled across hosts."""
    t = table[table.model == model]
    if t.empty:
        return pd.DataFrame()
    hosts = (
        t.host.fillna("unknown-cpu").astype(str) if "host" in t else pd.Series("unknown-cpu", index=t.index)
    )
    hosts = hosts.map(host_slug_words)
    t = t.assign(host=hosts.where(t.sweep != THIS_BUILD, hosts + " (this build)"))
    rows = []
    for host, g in t.groupby("host", sort=True):
        row = {"host": host, "builds": g.sweep.nunique()}
        for group, word in ((POOLED, "pooled"), ("holdout", "off-grid")):
            for target in TARGETS:
                m = g[(g.split == group) & (g.target == target)].mape_pct.dropna()
                row[f"{word} {target} MAPE %"] = (
                    "-"
                    if m.empty
                    else f"{m.mean():.1f}"
                    if len(m) == 1
                    else f"{m.mean():.1f} ({_range(m.min(), m.max())})"
                )
        rows.append(row)
    return pd.DataFrame(rows)


def sweeps_text(table: pd.DataFrame) -> str:
    """Which builds were scored: how many stored, from which day to which, by how many commits, on which hosts
    (``one machine`` where the scores name none or one); and whether this build's own sweep is among them."""
    if table.empty:
        return "no stored builds"
    names = sorted(set(table.sweep) - {THIS_BUILD})
    here = THIS_BUILD in set(table.sweep)
    if not names:
        return "no stored builds, only this build's own sweep"
    stored = table[table.sweep != THIS_BUILD]
    commits = {c for c in stored.get("commit", pd.Series(dtype=object)).dropna()}
    first, last = names[0][:10], names[-1][:10]  # 2026-11-24: the day of the calibration (UTC)
    when = f"from {first} to {last}" if first != last else f"on {first}"
    made = f" by {len(commits)} commits" if len(commits) > 1 else ""
    hosts = (
        stored.dropna(subset=["host"]).groupby("host").sweep.nunique()
        if "host" in stored
        else pd.Series(dtype=int)
    )
    where = (
        f"{len(hosts)} kinds of host, "
        + listed(
            [
                f"{host_slug_words(h)} ({n} builds)" if i == 0 else f"{host_slug_words(h)} ({n})"
                for i, (h, n) in enumerate(hosts.items())
            ]
        )
        if len(hosts) > 1
        else "one machine"
    )
    own = ""
    if here:
        mine = table[table.sweep == THIS_BUILD].get("host", pd.Series(dtype=object)).dropna()
        named = host_slug_words(mine.iloc[0]) + ", " if len(hosts) > 1 and len(mine) else ""
        own = f", and this build's own sweep ({named}marked in the figure)"
    return f"{len(names)} stored builds, made {when}{made} on {where}{own}"


def hosts_text(table: pd.DataFrame, model: str = "operator_roofline", target: str = "time") -> str:
    """The pooled held-out MAPE per host, the builds' mean (this build apart): a clause, or nothing where the
    scores name fewer than two hosts."""
    t = table[(table.model == model) & (table.split == POOLED) & (table.target == target)]
    if "host" not in t or t.host.dropna().nunique() < 2:
        return ""
    stored = t[t.sweep != THIS_BUILD].dropna(subset=["mape_pct", "host"])
    means = stored.groupby("host").mape_pct.mean()
    here = t[t.sweep == THIS_BUILD].mape_pct.dropna()
    return (
        f"its pooled held-out {target} MAPE averages "
        + listed([f"{m:.1f} % on {host_slug_words(h)}" for h, m in means.items()])
        + (f" (this build: {here.iloc[0]:.1f} %)" if len(here) else "")
    )


def split_sizes_text(table: pd.DataFrame, level: float, model: str = "operator_roofline") -> str:
    """How many held-out predictions a group of one build holds (the fewest and the most over the builds), and
    the coverage range exact ``level`` intervals show nine times in ten on a typical split."""
    from companion.energy.validation import coverage_range_pct

    t = table[(table.model == model) & (table.target == "time") & (table.split != POOLED)]
    if t.empty:
        return "a few dozen held-out runs or fewer"
    n = t.n - t.n_unbounded
    small = n[~t.split.isin(["leave_one_size_out"])]
    typical = int((small if len(small) else n).median())
    lo, hi = coverage_range_pct(typical, level)
    return (
        f"from {int(n.min())} to {int(n.max())} held-out runs, most about {typical}; on {typical} runs even exact "
        f"{level * 100:.0f} % intervals cover anywhere from {lo:.0f} to {hi:.0f} % nine times in ten"
    )


@dataclass(frozen=True)
class BuildsCoverage:
    """One target's coverage pooled over the stored builds (``pooled_coverage``'s rows): its lowest and highest
    over the groups, the builds, the fewest and most held-out predictions of a group, and the groups outside the
    band ({group: coverage})."""

    lo: float
    hi: float
    builds: int
    n_lo: int
    n_hi: int
    outside: dict[str, float]
    builds_by_group: dict[str, int] = field(
        default_factory=dict
    )  # groups fewer builds measured (the test set)


def coverage_over_builds(
    pooled: pd.DataFrame, target: str, model: str = "operator_roofline", band=BAND_PCT
) -> BuildsCoverage | None:
    """The coverage pooled over the stored builds for ``target``, over the groups (every split pooled apart);
    None where no build was scored."""
    from companion.energy.validation import coverage_consistent

    p = pooled[(pooled.model == model) & (pooled.split != POOLED) & (pooled.target == target)]
    if p.empty:
        return None
    return BuildsCoverage(
        lo=float(p.coverage_pct.min()),
        hi=float(p.coverage_pct.max()),
        builds=int(p.sweeps.max()),
        n_lo=int(p.n.min()),
        n_hi=int(p.n.max()),
        outside={
            r.split: float(r.coverage_pct)
            for r in p.itertuples()
            if not coverage_consistent(r.coverage_pct, *band)
        },
        builds_by_group={
            r.split: int(r.sweeps) for r in p.itertuples() if int(r.sweeps) < int(p.sweeps.max())
        },
    )


def coverage_over_builds_text(
    pooled: pd.DataFrame | None,
    target: str | None = None,
    model: str = "operator_roofline",
    band=BAND_PCT,
    predictions: bool = False,
) -> str:
    """The coverage pooled over the stored builds in words: the one summary the pages quote.

    For every target (``target`` None), a sentence for another page: each target's range over the groups, how
    many builds, and whether every group lies within ``band`` ("88.6–95.4 % for time and 87.1–93.0 % for energy
    per split over 20 builds, not every split but the test set within 85–95 %; the test set apart, on the 3 builds
    holding its draw: ..."). For one ``target``, the verdict's row beside the one-build criterion: whether every
    group lies within ``band``, then the range, the builds, with ``predictions`` the held-out predictions per group
    summed over them, and the groups outside ("no (88.6–95.4 % over 20 builds; outside: off-grid 95.4 %)"). "not
    available" where no build was scored or no band is given."""
    found = {}
    if pooled is not None and len(pooled) and band:
        targets = TARGETS if target is None else (target,)
        found = {t: c for t in targets if (c := coverage_over_builds(pooled, t, model, band)) is not None}
    if not found:
        return f"{NA} (no stored build was scored)" if target is None else NA
    # the verdict judges the test set on its own row, as the one build's coverage criterion does: the groups'
    # range and whether they lie within the band are the other groups', the test set's coverage is said apart
    cv = pooled[pooled.split != "test"]
    rest = {t: coverage_over_builds(cv, t, model, band) or c for t, c in found.items()}
    if target is None:
        ranges = " and ".join(f"{_range(c.lo, c.hi)} % for {t}" for t, c in rest.items())
        inside = not any(c.outside for c in rest.values())
        builds = max(c.builds for c in rest.values())
        test = pooled[(pooled.split == "test") & (pooled.model == model)].set_index("target")
        apart = (
            f"; the test set apart, on the {int(test.sweeps.max())} build{'s' if test.sweeps.max() > 1 else ''} "
            "holding its draw: "
            + " and ".join(f"{test.coverage_pct[t]:.1f} %" for t in found if t in test.index)
            if len(test)
            else ""
        )
        splits = "split but the test set" if len(test) else "split"
        return f"{ranges} per split over {builds} builds, " + (
            f"{'every' if inside else 'not every'} {splits} within {band[0]:.0f}–{band[1]:.0f} %{apart}"
        )
    everything, c = found[target], rest[target]
    test = everything.outside.get("test")

    def builds_of(k):
        n = everything.builds_by_group.get(k)
        return f" ({n} build{'s' if n > 1 else ''} only)" if n else ""

    # (where no other group was scored, ``rest`` falls back to every group: the test set still stays apart)
    outside = [f"{split_label(k)} {v:.1f} %{builds_of(k)}" for k, v in c.outside.items() if k != "test"]
    return (
        f"{'no' if outside else 'yes'} ({_range(c.lo, c.hi)} % over {c.builds} builds"
        + (f", {c.n_lo:,}–{c.n_hi:,} held-out predictions per split summed over them" if predictions else "")
        + (f"; outside: {', '.join(outside)}" if outside else "")
        + (f"; the test set apart, {test:.1f} %{builds_of('test')}" if test is not None else "")
        + ")"
    )


def _lean(seen_below: int, seen_above: int, exp_below: float, exp_above: float, cells: int) -> str:
    """Which way a count of misses leans against exact intervals', each beyond twice its binomial spread."""

    def beyond(seen, exp):
        return abs(seen - exp) > 2 * (exp * (1 - exp / max(cells, 1))) ** 0.5

    over, under = seen_above - exp_above, seen_below - exp_below
    if beyond(seen_above, exp_above) and over > 0 and not (beyond(seen_below, exp_below) and under > 0):
        return "more often above, so the intervals lean wide (conservative)"
    if beyond(seen_below, exp_below) and under > 0 and not (beyond(seen_above, exp_above) and over > 0):
        return "more often below, so the intervals lean narrow"
    if beyond(seen_below, exp_below) or beyond(seen_above, exp_above):
        return "the misses differ from exact intervals' beyond sampling"
    return "as often, each way, as exact intervals"


def coverage_text(pooled: pd.DataFrame, level: float, model: str = "operator_roofline", band=BAND_PCT) -> str:
    """The page's statistics on the intervals (their range over the groups is ``coverage_over_builds_text``'s, each group's
    range the figure's): the splits pooled, against ``level``; any group outside ``band``; then how often single
    builds' groups fall below and above the band, against exact intervals."""
    p = pooled[pooled.model == model] if "model" in pooled else pooled.iloc[:0]
    if p.empty:
        return "No stored build was scored, so nothing is said here about the intervals across builds."
    pct, lo, hi = f"{level * 100:.0f} %", f"{band[0]:.0f}", f"{band[1]:.0f} %"
    groups = p[p.split != POOLED]
    outside, misses = [], []
    for target in [t for t in TARGETS if t in set(groups.target)]:
        t = groups[groups.target == target]
        most = int(t.sweeps.max())
        outside += [
            f"{GROUP_WORDS.get(r.split, r.split)}, {target} ({r.coverage_pct:.1f} %"
            + (f", {int(r.sweeps)} build{'s' if r.sweeps > 1 else ''} only)" if r.sweeps < most else ")")
            for r in t[~t.in_band].itertuples()
        ]
        cells = int(t.sweeps.sum())
        b, a, eb, ea = (
            int(t.sweeps_below.sum()),
            int(t.sweeps_above.sum()),
            float(t.sweeps_below_exact.sum()),
            float(t.sweeps_above_exact.sum()),
        )
        misses.append(
            (
                f"{b} of {cells} groups fall below {lo} % and {a} above {hi} for {target} (exact intervals: "
                f"{eb:.1f} and {ea:.1f})"
                if not misses
                else f"{b} and {a} of {cells} for {target} ({eb:.1f} and {ea:.1f})"
            )
            + f"; {_lean(b, a, eb, ea, cells)}"
        )
    whole = []
    for r in p[p.split == POOLED].itertuples():
        side = (
            "above"
            if r.coverage_lo_pct > level * 100
            else "below"
            if r.coverage_hi_pct < level * 100
            else "consistent with"
        )
        whole.append(f"{side} {pct} for {r.target} ({_range(r.coverage_lo_pct, r.coverage_hi_pct)} %)")
    out = f"All splits pooled, coverage is {' and '.join(whole)}." if whole else ""
    if outside:
        out += f" Outside {lo}–{hi}: " + "; ".join(outside) + "."
    return (out + f" Build by build, {'; '.join(misses)}.").strip()


def one_build_text(meeting: pd.DataFrame, band=BAND_PCT) -> str:
    """How many builds meet the one-build criterion (every group within ``band`` at once), per target, beside
    how many would with exact intervals (``companion.energy.stored.builds_meeting_band``)."""
    if meeting.empty:
        return "No stored build was scored."
    parts = [f"{r.meeting} of {r.sweeps} for {r.target}" for r in meeting.itertuples()]
    exact = " and ".join(f"{r.meeting_exact:.1f}" for r in meeting.itertuples())
    return (
        f"Builds with every group within {band[0]:.0f}–{band[1]:.0f} % at once, as the criterion asks: "
        f"{' and '.join(parts)}; exact intervals would manage roughly {exact}."
    )


def energy_text(table: pd.DataFrame) -> str:
    """What the energy scores add to the time scores, from how the builds' energy was obtained: a sentence with
    its full stop, or nothing."""
    t = table.dropna(subset=["energy_measured"]) if "energy_measured" in table else table.iloc[:0]
    if t.empty:
        return ""
    measured = set(t.energy_measured.astype(bool))
    if measured == {False}:
        return "These builds' energy is estimated: its scores follow time's."
    if measured == {True}:
        return "The energy of these builds is measured, so its scores are a second result beside the time's."
    return "Some builds' energy is measured and some estimated; the two kinds are pooled here."


def floor_text(table: pd.DataFrame, model: str = "operator_roofline", target: str = "time") -> str:
    """How a build's pooled held-out MAPE follows the exact-model floor of its runs: their correlation over the
    builds, and the MAPE above the floor in the quieter half of the builds beside the noisier half."""
    t = (
        table[(table.model == model) & (table.target == target) & (table.split == POOLED)]
        .dropna(subset=["mape_pct", "exact_floor_pct"])
        .sort_values("exact_floor_pct")
    )
    if len(t) < 4:
        return f"Too few stored builds ({len(t)}) to say how a build's error follows its floor."
    r = float(t.mape_pct.corr(t.exact_floor_pct))
    half = len(t) // 2
    quiet, busy = t.iloc[:half], t.iloc[-half:]
    follows = "follows" if r >= 0.5 else "hardly follows"

    def above(x):
        return f"{(x.mape_pct - x.exact_floor_pct).mean():.1f}"

    return (
        f"A build's pooled {target} MAPE {follows} its exact-model floor (r = {r:.2f} over {len(t)} "
        f"builds; noisier runs raise both): the {half} quietest builds score {quiet.mape_pct.mean():.1f} %, "
        f"{above(quiet)} points above their floor, the {half} noisiest {busy.mape_pct.mean():.1f} %, "
        f"{above(busy)} points above."
    )
