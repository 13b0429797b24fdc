"""The stored sweeps a change of a model is scored on (benchmarks/model_accuracy.py): packing is deterministic,
leaves out what is not a record, and unpacks to the layout the scorer reads."""

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

BENCH = Path(__file__).parents[2] / "benchmarks" / "model_accuracy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("model_accuracy", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sweep(data: Path) -> None:
    for profile, n in (("cpu", 3), ("holdout", 2)):
        (data / "runs" / profile / "failed").mkdir(parents=True)
        (data / "runs" / profile / "logs").mkdir()
        for i in range(n):
            (data / "runs" / profile / f"run{i}.json").write_text(json.dumps({"run_id": f"{profile}{i}"}))
        (data / "runs" / profile / "failed" / "old.json").write_text("{}")
        (data / "runs" / profile / "logs" / "ws1.log").write_text("log")
    (data / "devices").mkdir()
    (data / "devices" / "cpu.json").write_text(json.dumps({"provenance": {"measured_at": "2026-11-24T22:07:51+00:00"}}))


def test_pack_is_deterministic_and_unpacks_to_the_scored_layout(bench, tmp_path):
    data = tmp_path / "data"
    _sweep(data)
    first = bench.pack(data, tmp_path / "a")
    second = bench.pack(data, tmp_path / "b")
    assert first.name == second.name and first.name.startswith("2026-11-24T2207-")
    assert first.read_bytes() == second.read_bytes()  # file times and owners are not packed
    got = bench.unpacked(first, tmp_path / "x")
    files = sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file())
    assert files == ["devices/cpu.json", *[f"runs/cpu/run{i}.json" for i in range(3)],
                     *[f"runs/holdout/run{i}.json" for i in range(2)]]  # set-aside records and logs left out
    (data / "runs" / "cpu" / "run0.json").write_text(json.dumps({"run_id": "changed"}))
    assert bench.pack(data, tmp_path / "c").name != first.name  # another sweep, another name


def test_pack_and_scoring_refuse_what_is_not_a_sweep(bench, tmp_path):
    with pytest.raises(SystemExit, match="holds no sweep"):
        bench.pack(tmp_path, tmp_path / "out")
    for source in (tmp_path, tmp_path / "missing.tar.gz"):
        with pytest.raises(SystemExit, match="is not a stored sweep"):
            bench.unpacked(source, tmp_path / "x")


def test_an_unknown_model_is_refused_before_any_sweep_is_read(bench, tmp_path):
    # the sweep named does not exist: the model's name is checked first, with the names to choose from
    with pytest.raises(SystemExit, match=r"unknown model\(s\) \['nope'\]; choose from .*operator_roofline"):
        bench.main([str(tmp_path / "missing.tar.gz"), "--models", "nope"])


def test_a_sweep_given_after_models_is_named_as_such(bench, tmp_path):
    # argparse gives --models every word after it: a sweep there is refused with the way to write it
    sweep = tmp_path / "sweep.tar.gz"
    sweep.write_bytes(b"")
    with pytest.raises(SystemExit, match="put them before it"):
        bench.main(["--models", "operator_roofline", str(sweep)])


def test_the_coverage_count_stands_beside_what_exact_intervals_would_give(bench):
    # 18 of 20 covered is in the band, 8 of 8 is not; an all-unbounded cell (coverage NaN) never counts
    t = pd.DataFrame({"n": [20, 8, 5], "n_unbounded": [0, 0, 5], "coverage_pct": [90.0, 100.0, float("nan")]})
    line = bench.coverage_cells(t)
    # exact 90 % intervals: 17-19 of 20 with chance 0.745, 7 of 8 with 0.383
    assert "1 of 3 cells" in line and "1.1 expected" in line
