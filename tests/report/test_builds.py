"""The page "Across builds" (companion.report.builds): its tables and sentences say what the pooled scores hold,
name a group outside the band, and read "not available" without stored sweeps."""

import re
from pathlib import Path

import pandas as pd

from companion.energy import stored
from companion.report import builds

ROOT = Path(__file__).parents[2]


def _table(coverage_by_split: dict, sweeps: int = 4, n: int = 20, target_shift: float = 0.0) -> pd.DataFrame:
    """score_stored-like rows: every sweep covers the same share of each split."""
    rows = []
    for i in range(sweeps):
        for target in ("time", "energy"):
            for split, cov in coverage_by_split.items():
                rows.append({"sweep": f"2026-11-2{i}T1200-abcdef0{i}", "commit": f"c{i % 2}", "model": "operator_roofline",
                             "target": target, "split": split, "n": n, "n_unbounded": 0,
                             "coverage_pct": cov + (target_shift if target == "energy" else 0.0),
                             "mape_pct": 5.0 + i, "exact_floor_pct": 2.0 + i})
    return pd.DataFrame(rows)


def test_every_group_inside_the_band_is_said_so_with_its_range():
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "holdout": 95.0})
    p = stored.pooled_coverage(t, 0.9, n_boot=200)
    text = builds.coverage_text(p, 0.9)
    assert text.startswith("Pooled over the 4 stored sweeps, the nominal 90 % intervals cover between 90.0 and 95.0 %")
    assert "every group lies within 85-95 %" in text
    assert builds.coverage_short(p) == ("90.0–95.0 % for time and 90.0–95.0 % for energy per split over 4 stored "
                                        "builds, every split within 85–95 %")
    # the table: pooled first, the off-grid runs last, runs summed over sweeps
    table = builds.coverage_table(p)
    assert table["held-out runs"].tolist() == ["every split pooled", "size held out", "off-grid runs"]
    assert table.runs.tolist() == ["80", "80", "80"]
    assert table["time: coverage %"][0] == "90.0 [90.0-90.0]"  # identical sweeps: resampling them moves nothing


def test_a_group_outside_the_band_is_named_with_its_target():
    t = _table({"pooled": 90.0, "leave_one_degree_out": 80.0}, target_shift=5.0)
    p = stored.pooled_coverage(t, 0.9, n_boot=200)
    text = builds.coverage_text(p, 0.9)
    assert "outside 85-95 %: degree held out, time (80.0 %)" in text and "energy (85.0" not in text
    assert builds.coverage_short(p).endswith("not every split within 85–95 %")


def test_the_sweep_by_sweep_count_is_weighed_against_exact_intervals():
    # 18 of 20 covered in every sweep: every cell in the band, more often than exact intervals (0.745 a cell)
    many = builds.coverage_text(stored.pooled_coverage(_table({"a": 90.0}, sweeps=40), 0.9, n_boot=50), 0.9)
    assert "time 40 of 40 (exact intervals: 29.8)" in many and "more often than exact intervals" in many
    # 16 of 20 in every sweep: no cell in the band, fewer than exact intervals give
    few = builds.coverage_text(stored.pooled_coverage(_table({"a": 80.0}, sweeps=40), 0.9, n_boot=50), 0.9)
    assert "misses the band more often than exact intervals" in few


def test_sweeps_sizes_and_floors_are_read_from_the_scores():
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "leave_one_mode_out": 90.0})
    t.loc[t.split == "leave_one_mode_out", "n"] = 16
    assert builds.sweeps_text(t) == ("4 sweeps, stored from 2026-11-20 12:00 to 2026-11-23 12:00 (UTC), measured by "
                                     "2 successive commits of this project")
    assert builds.split_sizes_text(t, 0.9).startswith("from 16 runs (mode held out) to 20 (size held out)")
    assert "cover anywhere from 75 to 100 %" in builds.split_sizes_text(t, 0.9)
    floor = builds.floor_text(t)  # MAPE rises one for one with the floor: r = 1
    assert "follows the floor of its runs (Pearson r = 1.00)" in floor
    assert "the 2 sweeps of lowest floor (2.0-3.0 %) score 5.5 % on average" in floor


def test_without_stored_sweeps_the_page_says_so():
    empty = stored.score_stored([], ["operator_roofline"], 0.9, 0.1)
    assert empty.empty and {"sweep", "split", "target", "coverage_pct"} <= set(empty.columns)
    assert builds.sweeps_text(empty) == "no stored sweeps"
    assert builds.coverage_text(empty, 0.9).startswith("No stored sweep was scored")
    assert builds.floor_text(empty).startswith("Too few stored sweeps (0)")


def test_the_builds_page_types_no_number():
    """Every number of the page's prose comes from the scores through glue (the band's 85-95 % aside)."""
    source = (ROOT / "notebooks" / "07_builds.py").read_text()
    markdown = re.findall(r"^# %% \[markdown\]\n((?:#.*\n?)*)", source, flags=re.M)
    text = " ".join(line.lstrip("# ") for block in markdown for line in block.splitlines())
    for pattern in (r"\{glue:[a-z]*\}`[^`]*`", r"`[^`]*`", r"\]\([^)]*\)", r"```\{glue:[a-z]*\}[^\n]*", r"85-95 %"):
        text = re.sub(pattern, " ", text)
    assert not re.findall(r"\d", text), re.findall(r".{20}\d.{20}", text)
