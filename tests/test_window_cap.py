"""benchmarks/window_cap_scores.py replays a record's windows under a shorter cap: at the record's own cap it
gives the record back; under a shorter one, the windows the runner would have kept, and the time that follows."""

import statistics
from pathlib import Path

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("window_cap_scores")


def record(windows: list[float], steps: int = 4) -> dict:
    return {
        "status": "ok",
        "config": {"protocol": {"max_time_s": 1.4, "min_windows": 3, "target_rel_ci": 0.0}},
        "time": {
            "per_window_step_s": windows,
            "window_steps": steps,
            "step_mean_s": statistics.mean(windows),
            "measured_s": sum(windows) * steps,
        },
        "energy": {
            "per_step_mean_j": 2.0 * statistics.mean(windows),
            "per_window_step_j": [2.0 * w for w in windows],
        },
    }


def test_a_shorter_cap_keeps_the_windows_the_runner_would_have_kept(bench):
    windows = [0.05, 0.06, 0.07, 0.08, 0.05, 0.06]  # 4 steps a window: 0.2-0.32 s each, 1.48 s in all
    rec = record(windows)
    same, full, measured = bench.capped(rec, 1.0)
    assert same["time"]["windows"] == 6 and full == measured == pytest.approx(1.48)
    short, full, measured = bench.capped(rec, 0.5)  # a 0.7 s cap: three windows (the minimum) reach 0.72 s
    assert short["time"]["windows"] == 3 and measured == pytest.approx(0.72) and full == pytest.approx(1.48)
    assert short["time"]["step_mean_s"] == pytest.approx(0.06) and short["time"]["steps_measured"] == 12
    assert short["energy"]["per_step_mean_j"] == pytest.approx(2.0 * 0.06)  # the kept windows' energy
    assert rec["time"]["step_mean_s"] == pytest.approx(
        statistics.mean(windows)
    )  # the record is left as it was


def test_the_cap_waits_for_the_minimum_of_windows_as_the_runner_does(bench):
    # windows of 0.4 s against a 0.7 s cap: the second passes the cap, the runner still measures a third
    short, _, measured = bench.capped(record([0.1] * 6), 0.5)
    assert short["time"]["windows"] == 3 and measured == pytest.approx(1.2)


def test_at_its_own_cap_every_stored_run_keeps_the_windows_it_measured(bench):
    """The replay is the runner's stopping rule: on the newest stored build's every run (grid, validation and test
    sets), at factor 1 it stops where the run stopped and gives back its step time and energy per step."""
    import json
    import tarfile

    newest = sorted((Path(__file__).parents[1] / "data" / "reference" / "cpu").glob("*.tar.gz"))[-1]
    checked = 0
    with tarfile.open(newest) as tf:
        for member in tf.getmembers():
            if not (member.name.startswith("runs/") and member.name.endswith(".json")):
                continue
            rec = json.load(tf.extractfile(member))
            if rec.get("status") != "ok" or len(rec["time"].get("per_window_step_s") or []) < 2:
                continue
            same, _, _ = bench.capped(rec, 1.0)
            assert same["time"]["windows"] == len(rec["time"]["per_window_step_s"]), member.name
            assert same["time"]["step_mean_s"] == pytest.approx(rec["time"]["step_mean_s"], rel=1e-12)
            assert same["energy"]["per_step_mean_j"] == pytest.approx(
                rec["energy"]["per_step_mean_j"], rel=1e-12
            )
            checked += 1
    assert checked >= 100
