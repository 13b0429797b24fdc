"""benchmarks/reproduce_cost.py reads a finished `make reproduce` from its outputs: a tree whose times are known
gives those times back, phase by phase."""

import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import load_benchmark

T0 = datetime(2026, 11, 27, 4, 0, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("reproduce_cost")


def _touch(path: Path, at_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    t = (T0 + timedelta(seconds=at_s)).timestamp()
    os.utime(path, (t, t))


def _notebook(folder: Path, stage: str, start_s: float, end_s: float, profile: str = "cpu") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "start_time": (T0 + timedelta(seconds=start_s)).isoformat(),
        "end_time": (T0 + timedelta(seconds=end_s)).isoformat(),
        "parameters": {"profile": profile},
    }
    (folder / f"{stage}.ipynb").write_text(json.dumps({"metadata": {"papermill": meta}, "cells": []}))


def _record(
    folder: Path,
    name: str,
    world: int,
    start_s: int,
    end_s: int,
    measured_s: float,
    probe_s: float,
    status="ok",
    stop_reason="max_time",
):
    folder.mkdir(parents=True, exist_ok=True)
    stamp = lambda s: (T0 + timedelta(seconds=s)).isoformat(timespec="seconds")  # noqa: E731
    rec = {
        "status": status,
        "config": {"world_size": world},
        "provenance": {"started_at": stamp(start_s), "finished_at": stamp(end_s)},
        "time": {"measured_s": measured_s, "probe_step_s": [probe_s], "stop_reason": stop_reason},
    }
    (folder / f"{name}.json").write_text(json.dumps(rec))


def _tree(root: Path) -> None:
    _touch(root / ".venv" / "pyvenv.cfg", 0)
    _touch(root / ".venv" / ".setup-done", 30)
    gen = root / "book" / "generated"
    _notebook(gen, "01_runs", 31, 131)
    runs = root / "data" / "runs"
    # grid: two 1-rank runs of 10 s (6 s measured, 1 s probe), one 4-rank run of 20 s (8 s, 2 s); the validation
    # and test sets' runs measured alongside: one 2-rank run of 15 s (5 s, 1 s) each; a failed run counts nowhere
    _record(runs / "cpu", "a", 1, 35, 45, 6.0, 1.0)
    _record(runs / "cpu", "b", 1, 50, 60, 6.0, 1.0, stop_reason="converged")
    _record(runs / "cpu", "c", 4, 70, 90, 8.0, 2.0)
    _record(runs / "cpu", "d", 4, 90, 99, 1.0, 1.0, status="failed")
    _record(runs / "holdout", "e", 2, 95, 110, 5.0, 1.0)
    _record(runs / "testset", "f", 2, 110, 125, 5.0, 1.0)
    _record(runs / "cpu", "earlier", 1, -900, -890, 6.0, 1.0)  # an earlier sweep's record: not this build's
    (root / "data" / "devices").mkdir(parents=True)
    (root / "data" / "devices" / "cpu-some-host.json").write_text(
        json.dumps({"provenance": {"wall_s": 40.0}})
    )
    _notebook(gen, "02_proxies", 175, 185)
    _notebook(gen, "03_fit", 188, 200)
    _notebook(gen, "04_validation", 203, 253)
    _touch(root / "_build" / "html" / "index.html", 263)


def test_phases_of_a_known_tree(bench, tmp_path):
    _tree(tmp_path)
    c = bench.cost(tmp_path, "cpu", None)
    assert c.setup_s == 30 and c.sweep_s == 100 and c.calibrate_s == 40
    assert {w: (g.runs, g.wall_s, g.measured_s, g.probe_s) for w, g in c.by_world.items()} == {
        1: (2, 20.0, 12.0, 2.0),
        2: (2, 30.0, 10.0, 2.0),
        4: (1, 20.0, 8.0, 2.0),
    }
    assert c.by_world[4].other_s == 10.0
    assert {w: g.at_cap for w, g in c.by_world.items()} == {1: 1, 2: 2, 4: 1}
    assert c.outside_runs_s == (125 - 35) - 70  # the span of the runs less their walls
    assert c.sweep_rest_s == 100 - (125 - 35)  # stage 01 outside that span
    assert c.stages_s == {"02_proxies": 10.0, "03_fit": 12.0, "04_validation": 50.0}
    assert c.stages_span_s == 253 - 175 and c.between_stages_s == (253 - 175) - 72
    assert c.book_s == 10 and c.total_s == 263
    text = bench.report(c, budget_s=250)
    assert "over by 13 s" in text
    assert "in none of the above" in text and "263 s" in text
    assert "runs measured to their time cap: 4 of 5 " in text
    assert "within" in bench.report(c, budget_s=300)
    assert re.search(r"in none of the above +5 s", text)  # 263 - (30 + 100 + 40 + 78 + 10)
    # stages run two at a time: the span counts once, the time in no stage is what no stage covers
    _notebook(tmp_path / "book" / "generated", "08_gpu", 180, 230)
    c = bench.cost(tmp_path, "cpu", None)
    assert c.stages_span_s == 253 - 175 and c.between_stages_s == 0  # 08 covers the gaps between 02, 03, 04
    assert re.search(r"in none of the above +5 s", bench.report(c, budget_s=250))
    # the profile given as its .yaml path, as make's PROFILE may be, reads the same notebooks and folders
    assert bench.cost(tmp_path, "src/companion/runs/profiles/cpu.yaml", None).total_s == 263


def test_an_environment_made_before_the_build_counts_neither_set_up_nor_total(bench, tmp_path):
    _tree(tmp_path)
    _touch(tmp_path / ".venv" / "pyvenv.cfg", -4000)
    _touch(tmp_path / ".venv" / ".setup-done", -3970)
    c = bench.cost(tmp_path, "cpu", None)
    assert c.setup_s is None and c.total_s is None and c.sweep_s == 100
    assert "predates this build" in bench.report(c, budget_s=600)


def test_a_tree_without_a_build_says_so(bench, tmp_path):
    c = bench.cost(tmp_path, "cpu", None)
    assert c.total_s is None and c.sweep_s is None and not c.by_world
    assert "no total" in bench.report(c, budget_s=600)


def test_notebooks_of_another_profile_are_refused(bench, tmp_path):
    _tree(tmp_path)
    with pytest.raises(SystemExit, match="executed for profile 'cpu', not 'ci'; pass --profile cpu"):
        bench.cost(tmp_path, "ci", None)
