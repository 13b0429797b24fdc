"""The stored sweeps a change of a model is scored on (companion.energy.stored, benchmarks/model_accuracy.py):
packing is deterministic, leaves out what is not a record, and unpacks to the layout the scorer reads; coverage
pooled over sweeps counts what each sweep covered."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import load_benchmark

from companion.energy import stored
from companion.errors import ConfigError


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("model_accuracy")


def _sweep(data: Path) -> None:
    for profile, n in (("cpu", 3), ("holdout", 2)):
        (data / "runs" / profile / "failed").mkdir(parents=True)
        (data / "runs" / profile / "logs").mkdir()
        for i in range(n):
            (data / "runs" / profile / f"run{i}.json").write_text(json.dumps({"run_id": f"{profile}{i}"}))
        (data / "runs" / profile / "failed" / "old.json").write_text("{}")
        (data / "runs" / profile / "logs" / "ws1.log").write_text("log")
    (data / "devices").mkdir()
    (data / "devices" / "cpu.json").write_text(
        json.dumps({"provenance": {"measured_at": "2026-11-24T22:07:51+00:00"}})
    )


def test_pack_is_deterministic_and_unpacks_to_the_scored_layout(tmp_path):
    data = tmp_path / "data"
    _sweep(data)
    first = stored.pack(data, tmp_path / "a")
    second = stored.pack(data, tmp_path / "b")
    assert first.name == second.name and first.name.startswith("2026-11-24T2207-")
    assert first.read_bytes() == second.read_bytes()  # file times and owners are not packed
    got = stored.unpacked(first, tmp_path / "x")
    files = sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file())
    assert files == [
        "devices/cpu.json",
        *[f"runs/cpu/run{i}.json" for i in range(3)],
        *[f"runs/holdout/run{i}.json" for i in range(2)],
    ]  # set-aside records and logs left out
    (data / "runs" / "cpu" / "run0.json").write_text(json.dumps({"run_id": "changed"}))
    assert stored.pack(data, tmp_path / "c").name != first.name  # another sweep, another name
    assert stored.stored_sweeps(tmp_path / "a") == [first] and stored.stored_sweeps(tmp_path / "none") == []


def test_a_host_named_calibration_is_packed_under_the_device_s_name(tmp_path):
    from companion.runs.provenance import cpu_model, host_slug

    data = tmp_path / "data"
    _sweep(data)
    plain = stored.pack(data, tmp_path / "a")
    (data / "devices" / "cpu.json").rename(data / "devices" / f"cpu-{host_slug(cpu_model())}.json")
    named = stored.pack(data, tmp_path / "b")
    assert named.read_bytes() == plain.read_bytes()  # the same sweep, the same archive
    assert stored.unpacked(data, tmp_path / "x") == data  # the folder itself is a sweep too


def test_pack_and_scoring_refuse_what_is_not_a_sweep(bench, tmp_path):
    with pytest.raises(ConfigError, match="holds no sweep"):
        stored.pack(tmp_path, tmp_path / "out")
    for source in (tmp_path, tmp_path / "missing.tar.gz"):
        with pytest.raises(ConfigError, match="is not a stored sweep"):
            stored.unpacked(source, tmp_path / "x")
    with pytest.raises(SystemExit, match="error: .*holds no sweep"):  # the benchmark: one line, no traceback
        bench.main(["--pack", str(tmp_path)])


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


def test_the_coverage_count_stands_beside_what_exact_intervals_would_give():
    # 18 of 20 covered is in the band, 8 of 8 is not; an all-unbounded cell (coverage NaN) never counts
    t = pd.DataFrame({"n": [20, 8, 5], "n_unbounded": [0, 0, 5], "coverage_pct": [90.0, 100.0, float("nan")]})
    line = stored.coverage_cells(t, 0.9)
    # exact 90 % intervals: 17-19 of 20 with chance 0.745, 7 of 8 with 0.383
    assert "1 of 3 cells" in line and "1.1 expected" in line


def _scores(covered_of_n, split="leave_one_degree_out", unbounded=None):
    n = [n for _, n in covered_of_n]
    unb = unbounded or [0] * len(n)
    return pd.DataFrame(
        {
            "sweep": [f"s{i}" for i in range(len(n))],
            "model": "operator_roofline",
            "target": "time",
            "split": split,
            "n": [a + b for a, b in zip(n, unb)],
            "n_unbounded": unb,
            "coverage_pct": [100 * k / m for k, m in covered_of_n],
            "mape_pct": np.arange(len(n)) + 5.0,
            "exact_floor_pct": 2.0,
        }
    )


def test_coverage_pooled_over_sweeps_counts_covered_runs_not_sweep_means():
    # 10 of 10 and 80 of 100: the pooled share is 90/110 = 81.8 %, not the sweeps' mean (90 %); runs with an
    # unbounded interval count in neither
    got = stored.pooled_coverage(_scores([(10, 10), (80, 100)], unbounded=[3, 0]), n_boot=400).iloc[0]
    assert (got.n, got.covered, got.sweeps) == (110, 90, 2)
    assert got.coverage_pct == pytest.approx(100 * 90 / 110)
    assert not got.in_band and got.sweeps_in_band == 0
    assert got.coverage_lo_pct <= got.coverage_pct <= got.coverage_hi_pct
    assert (got.mape_pct, got.mape_min_pct, got.mape_max_pct) == (5.5, 5.0, 6.0)


def test_the_range_of_pooled_coverage_resamples_sweeps_and_narrows_with_more():
    # sweeps that scatter (75 % and 100 % alternately) pool to 87.5 %; the range from resampling whole sweeps
    # (and each one's count) is wide for four sweeps and narrower for forty, narrower still for steady sweeps,
    # and never of no width: sweeps that happen to agree still hold a finite number of runs each
    few = stored.pooled_coverage(_scores([(15, 20), (20, 20)] * 2), n_boot=2000).iloc[0]
    many = stored.pooled_coverage(_scores([(15, 20), (20, 20)] * 20), n_boot=2000).iloc[0]
    steady = stored.pooled_coverage(_scores([(35, 40)] * 40), n_boot=2000).iloc[0]
    one = stored.pooled_coverage(_scores([(18, 20)]), n_boot=2000).iloc[0]
    assert few.coverage_pct == many.coverage_pct == steady.coverage_pct == 87.5
    width = lambda r: r.coverage_hi_pct - r.coverage_lo_pct  # noqa: E731
    assert width(few) > 2 * width(many) > 0 and 0 < width(steady) < width(many)
    assert width(one) >= 10  # one build of 20 runs: about the binomial range of 20 runs, not a point
    assert few.in_band and few.sweeps_in_band == 0  # no sweep's own coverage lies in 85-95 %, their pool does
    # a sweep without a bounded interval in the group counts in none of the figures
    none = _scores([(18, 20), (1, 5)])
    none.loc[1, ["n_unbounded", "coverage_pct"]] = [5, float("nan")]  # its 5 intervals all unbounded
    skip = stored.pooled_coverage(none, n_boot=100).iloc[0]
    assert (skip.sweeps, skip.n, skip.covered) == (1, 20, 18)
    assert stored.pooled_coverage(none.iloc[1:], n_boot=10).empty


@pytest.mark.slow  # two scoring processes
def test_a_stored_sweep_is_scored_as_the_validation_page_scores_it_in_any_number_of_processes(
    tmp_path, monkeypatch
):
    # the newest stored archive scored here, in this process, and as committed (benchmarks/model_accuracy.py scored
    # it in worker processes, on another host): alike, every split and the off-grid runs, both targets, with the
    # device, the host, the energy's kind and the commit that measured it
    reference = Path(__file__).parents[2] / "data" / "reference" / "cpu"
    newest = stored.stored_sweeps(reference)[-1]
    cache = tmp_path / "scores"
    here = stored.score_stored([newest], ["operator_roofline"], 0.9, 0.1, cache=cache)
    # its scores are kept under a key of the archive, the scoring code and the arguments, and read back as computed
    (kept,) = cache.glob("*.csv")
    assert kept.name.startswith(stored.sweep_name(newest) + ".")

    def never(*_, **__):
        raise AssertionError(
            "scored again although its scores are cached (after a change to the scoring code, "
            "`python benchmarks/model_accuracy.py` re-keys data/reference/cpu/scores/)"
        )

    monkeypatch.setattr(stored, "_score_one", never)
    pd.testing.assert_frame_equal(
        stored.score_stored([newest], ["operator_roofline"], 0.9, 0.1, cache=cache), here
    )
    committed = stored.score_stored([newest], ["operator_roofline"], 0.9, 0.1, cache=reference / "scores")
    with pytest.raises(AssertionError, match="scored again"):  # another level: another key
        stored.score_stored([newest], ["operator_roofline"], 0.8, 0.1, cache=cache)
    monkeypatch.undo()
    t = pd.concat([here, committed], ignore_index=True)
    assert t.columns.tolist() == stored.SCORE_COLUMNS  # the columns this build's own rows have too
    first, second = (
        g.drop(columns="sweep").reset_index(drop=True) for _, g in t.groupby(t.index // (len(t) // 2))
    )
    pd.testing.assert_frame_equal(first, second)
    from companion.energy.validation import MODEL_SPLITS

    # the test set's split where the build measured it (the newest ones do)
    assert (
        {"pooled", "holdout", *MODEL_SPLITS}
        <= set(first.split)
        <= {"pooled", "holdout", "test", *MODEL_SPLITS}
    )
    assert set(first.target) == {"time", "energy"}
    assert (
        set(first.device_name) == {"cpu"} and first.energy_measured.nunique() == 1
    )  # one kind of energy a sweep
    assert first.host.nunique() == 1 and first.host.iloc[0] in ("intel-xeon", "amd-epyc")
    assert first.commit.str.fullmatch(r"[0-9a-f]{7}").all()
    assert ((first.coverage_pct >= 0) & (first.coverage_pct <= 100)).all() and (first.mape_pct > 0).all()
    pooled = stored.pooled_coverage(t, 0.9, n_boot=100)
    assert (
        pooled.n
        == 2
        * first.set_index(["split", "target"])
        .loc[list(zip(pooled.split, pooled.target))]
        .eval("n - n_unbounded")
        .to_numpy()
    ).all()


def test_the_benchmark_caches_only_the_scores_the_builds_page_reads(bench, monkeypatch):
    # the committed cache holds one file per archive: scoring other models must not replace that file
    seen = []

    def score_stored(sweeps, models, level, max_rel, workers=1, cache=None):
        seen.append(cache)
        raise ConfigError("stop here")

    monkeypatch.setattr(bench.stored, "score_stored", score_stored)
    for models in (bench.BUILDS_PAGE_MODELS, ["operator_roofline", "calibrated_tier"]):
        with pytest.raises(SystemExit, match="stop here"):
            bench.main(["--models", *models])
    assert seen == [bench.REFERENCE / "scores", None]
