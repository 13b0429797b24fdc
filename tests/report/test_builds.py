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
                rows.append(
                    {
                        "sweep": f"2026-11-2{i}T1200-abcdef0{i}",
                        "commit": f"c{i % 2}",
                        "model": "operator_roofline",
                        "target": target,
                        "split": split,
                        "n": n,
                        "n_unbounded": 0,
                        "coverage_pct": cov + (target_shift if target == "energy" else 0.0),
                        "mape_pct": 5.0 + i,
                        "exact_floor_pct": 2.0 + i,
                    }
                )
    return pd.DataFrame(rows)


def test_every_group_inside_the_band_is_said_so_with_its_range():
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "holdout": 95.0})
    p = stored.pooled_coverage(t, 0.9, n_boot=200)
    text = builds.coverage_text(p, 0.9)
    # the splits pooled, against the nominal level, with their range from resampling builds; no group is outside
    assert text.startswith("All splits pooled") and "consistent with 90 % for time (" in text
    assert "Outside" not in text
    assert builds.coverage_over_builds_text(p) == (
        "90.0–95.0 % for time and 90.0–95.0 % for energy per split over 4 builds, every split within 85–95 %"
    )
    # the table: pooled first, the off-grid runs last, predictions summed over builds
    table = builds.coverage_table(p)
    assert table["held-out group"].tolist() == ["every split pooled", "size held out", "off-grid runs"]
    assert table.predictions.tolist() == ["80", "80", "80"]
    assert table["time %"][0].startswith("90.0 [")
    assert table["builds in 85–95 %"][0] == "4 of 4 (exact: 3.0), 4 of 4 (exact: 3.0)"  # time, energy


def test_a_group_outside_the_band_is_named_with_its_target():
    t = _table({"pooled": 90.0, "leave_one_degree_out": 80.0}, target_shift=5.0)
    p = stored.pooled_coverage(t, 0.9, n_boot=200)
    text = builds.coverage_text(p, 0.9)
    assert "Outside 85–95 %: degree held out, time (80.0 %)" in text and "energy (85.0" not in text
    assert builds.coverage_over_builds_text(p).endswith("not every split within 85–95 %")
    # the same summary for one target, as the verdict's row beside the one-build criterion says it
    assert (
        builds.coverage_over_builds_text(p, "time")
        == "no (80.0–80.0 % over 4 builds; outside: degree 80.0 %)"
    )
    assert builds.coverage_over_builds_text(p, "energy", predictions=True) == (
        "yes (85.0–85.0 % over 4 builds, 80–80 held-out predictions per split summed over them)"
    )
    # a group fewer builds measured (the test set, in the newest builds only) says how few
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "leave_one_degree_out": 80.0})
    t = t[(t.split != "leave_one_degree_out") | (t.sweep == t.sweep.iloc[0])]
    text = builds.coverage_over_builds_text(stored.pooled_coverage(t, 0.9, n_boot=50), "time")
    assert text == "no (80.0–90.0 % over 4 builds; outside: degree 80.0 % (1 build only))"
    # the test set has a row of its own in the verdict: outside the band, it is said apart and answers nothing here
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "test": 100.0})
    t = t[(t.split != "test") | (t.sweep == t.sweep.iloc[0])]
    p = stored.pooled_coverage(t, 0.9, n_boot=50)
    assert builds.coverage_over_builds_text(p, "time") == (
        "yes (90.0–90.0 % over 4 builds; the test set apart, 100.0 % (1 build only))"
    )
    assert builds.coverage_over_builds_text(p) == (
        "90.0–90.0 % for time and 90.0–90.0 % for energy per split over 4 builds, every split but the test set within 85–95 %; "
        "the test set apart, on the 1 build holding its draw: 100.0 % and 100.0 %"
    )


def test_the_sweep_by_sweep_count_is_weighed_against_exact_intervals():
    # 18 of 20 covered in every build: never outside the band, where exact intervals fall outside a quarter of
    # the time, about equally each way; 16 of 20 in every build: below it every time; 20 of 20: above it every time
    def text(cov):
        return builds.coverage_text(
            stored.pooled_coverage(_table({"a": cov}, sweeps=40), 0.9, n_boot=50), 0.9
        )

    # the counts below and above the band, beside exact intervals' expectations (5.3 and 4.9), and which way
    for cov, below, above, lean in (
        (90.0, 0, 0, "differ from exact intervals' beyond sampling"),
        (80.0, 40, 0, "lean narrow"),
        (100.0, 0, 40, "lean wide (conservative)"),
    ):
        got = text(cov)
        assert all(x in got for x in (f"{below} of 40", f"{above} above 95 %", "5.3 and 4.9", lean)), got


def test_sweeps_sizes_and_floors_are_read_from_the_scores():
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "leave_one_mode_out": 90.0})
    t.loc[t.split == "leave_one_mode_out", "n"] = 16
    text = builds.sweeps_text(t)  # how many, from which day to which, by how many commits, on one machine
    assert all(x in text for x in ("4 stored builds", "2026-11-20", "2026-11-23", "2 commits", "one machine"))
    here = pd.concat([t, t[t.sweep == t.sweep.iloc[0]].assign(sweep=stored.THIS_BUILD)], ignore_index=True)
    assert "this build's own sweep" in builds.sweeps_text(here) and "this build" not in text
    sizes = builds.split_sizes_text(t, 0.9)  # the fewest and most held-out runs; exact intervals' spread
    assert all(x in sizes for x in ("16 to 20", "about 16", "75 to 100 %"))
    floor = builds.floor_text(t)  # MAPE rises one for one with the floor: r = 1, always 3 points above it
    assert "follows" in floor and "r = 1.00" in floor
    assert all(x in floor for x in ("5.5 %", "7.5 %", "3.0 points")), floor


def test_without_stored_sweeps_the_page_says_so():
    empty = stored.score_stored([], ["operator_roofline"], 0.9, 0.1)
    assert empty.empty and {"sweep", "split", "target", "coverage_pct"} <= set(empty.columns)
    assert builds.sweeps_text(empty) == "no stored builds"
    assert builds.coverage_text(empty, 0.9).startswith("No stored build was scored")
    assert builds.floor_text(empty).startswith("Too few stored builds (0)")
    assert builds.one_build_text(stored.builds_meeting_band(empty)).startswith("No stored build")
    assert builds.energy_text(empty) == ""


def test_builds_meeting_the_one_build_criterion_are_counted_beside_exact_intervals():
    # two groups of 20 runs each build; exact 90 % intervals put one in 85-95 % with chance 0.745, both 0.555
    t = _table({"pooled": 90.0, "leave_one_size_out": 90.0, "holdout": 90.0}, sweeps=4)
    t.loc[(t.sweep == t.sweep.iloc[0]) & (t.split == "holdout") & (t.target == "time"), "coverage_pct"] = 80.0
    got = stored.builds_meeting_band(t, 0.9).set_index("target")
    assert (got.meeting["time"], got.meeting["energy"], got.sweeps["time"]) == (3, 4, 4)
    assert abs(got.meeting_exact["time"] - 4 * 0.745**2) < 0.01
    text = builds.one_build_text(got.reset_index())
    assert all(x in text for x in ("85–95 %", "3 of 4 for time", "4 of 4 for energy", "2.2 and 2.2")), text
    # the test set is reported apart and judged by its own row, as the verdict's coverage criterion leaves it out:
    # its coverage (100 % in every build here) neither fails a build nor enters the exact-interval figure
    test = t[t.split == "holdout"].assign(split="test", coverage_pct=100.0)
    again = stored.builds_meeting_band(pd.concat([t, test], ignore_index=True), 0.9).set_index("target")
    pd.testing.assert_frame_equal(again, got)


def test_this_builds_scores_are_read_from_its_validation_and_marked():
    validation = {
        "model_scores_pooled": [
            {
                "model": "operator_roofline",
                "target": "time",
                "n": 50,
                "n_unbounded": 0,
                "coverage_pct": 90.0,
                "mape_pct": 5.0,
                "exact_floor_pct": 2.0,
            },
            {
                "model": "flops_power_law",
                "target": "time",
                "n": 50,
                "n_unbounded": 0,
                "coverage_pct": 70.0,
                "mape_pct": 35.0,
                "exact_floor_pct": 2.0,
            },
        ],
        "model_scores": [
            {
                "split": "holdout",
                "model": "operator_roofline",
                "target": "time",
                "n": 28,
                "n_unbounded": 0,
                "coverage_pct": 92.9,
                "mape_pct": 6.1,
                "exact_floor_pct": 2.9,
            }
        ],
    }
    runs = pd.DataFrame(
        {"device_name": ["cpu"], "energy_measured": [False], "energy_source": ["codecarbon[cpu=x]"]}
    )
    got = stored.this_build_scores(validation, runs, "abc1234", ["operator_roofline"])
    assert got.columns.tolist() == stored.SCORE_COLUMNS
    assert got.split.tolist() == ["pooled", "holdout"] and set(got.model) == {"operator_roofline"}
    assert set(got.sweep) == {stored.THIS_BUILD} and set(got.commit) == {"abc1234"}
    assert not got.energy_measured.any() and set(got.device_name) == {"cpu"}
    assert stored.this_build_scores({}, runs, None, ["operator_roofline"]).empty


def test_the_builds_page_types_no_number():
    """Every number of the page's prose comes from the scores through glue (the band's 85-95 % aside)."""
    source = (ROOT / "notebooks" / "07_builds.py").read_text()
    markdown = re.findall(r"^# %% \[markdown\]\n((?:#.*\n?)*)", source, flags=re.M)
    text = " ".join(line.lstrip("# ") for block in markdown for line in block.splitlines())
    for pattern in (r"\{glue:[a-z]*\}`[^`]*`", r"`[^`]*`", r"\]\([^)]*\)", r"```\{glue:[a-z]*\}[^\n]*"):
        text = re.sub(pattern, " ", text)
    assert not re.findall(r"\d", text), re.findall(r".{20}\d.{20}", text)


def test_each_host_has_its_own_row_before_anything_is_pooled():
    t = _table({"pooled": 90.0, "holdout": 90.0}, sweeps=4)  # mape 5, 6, 7, 8 by sweep
    t["host"] = ["amd-epyc" if s.endswith(("0", "1")) else "intel-xeon" for s in t.sweep]
    here = t[t.sweep == t.sweep.iloc[0]].assign(sweep=stored.THIS_BUILD, mape_pct=9.0)
    table = builds.per_host_table(pd.concat([t, here], ignore_index=True)).set_index("host")
    assert list(table.index) == ["AMD EPYC", "AMD EPYC (this build)", "Intel Xeon"]  # in words
    assert (
        table.loc["AMD EPYC", "builds"] == 2
        and table.loc["AMD EPYC", "pooled time MAPE %"] == "5.5 (5.0–6.0)"
    )
    assert table.loc["Intel Xeon", "off-grid energy MAPE %"] == "7.5 (7.0–8.0)"
    assert table.loc["AMD EPYC (this build)", "pooled time MAPE %"] == "9.0"  # one build: no range
    assert builds.per_host_table(t.iloc[:0]).empty
    # the page's opening names the hosts, their builds and each host's mean pooled MAPE
    both = pd.concat([t, here], ignore_index=True)
    hosts = builds.sweeps_text(both)
    assert all(x in hosts for x in ("2 kinds of host", "AMD EPYC (2 builds)", "Intel Xeon (2)")), hosts
    assert all(x in builds.hosts_text(both) for x in ("5.5 % on AMD EPYC", "7.5 % on Intel Xeon", "9.0 %"))
    assert builds.hosts_text(t[t.host == "amd-epyc"]) == ""
