"""benchmarks/error_spread.py splits a configuration's off-grid error over builds into the part every build repeats
(the model's) and the part that moves from build to build."""

import numpy as np
import pandas as pd
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("error_spread")


def rows(bias_pct: dict, swing_pct: float, builds: int = 4, replicate_pct: float = 0.0) -> pd.DataFrame:
    """Off-grid rows whose error is each configuration's bias plus a swing of +-``swing_pct`` that alternates over
    builds (mean 0, sample standard deviation ``swing_pct`` over an even number of builds), each build measuring a
    configuration twice, its replicates ``replicate_pct`` either side."""
    out = []
    for c, bias in bias_pct.items():
        for b in range(builds):
            swing = swing_pct if b % 2 == 0 else -swing_pct
            for r in (-1, 1):
                measured = 0.1 * (1 + r * replicate_pct / 100)
                error = (bias + swing) / 100
                out.append(
                    {
                        "build": f"b{b}",
                        "host": "h",
                        "group": "holdout",
                        "model": "operator_roofline",
                        "config": c,
                        "measured_s": measured,
                        "predicted_s": 0.1 * (1 + error),
                    }
                )
    return pd.DataFrame(out)


def test_the_bias_every_build_repeats_and_the_swing_between_builds_come_apart(bench):
    t = bench.decompose(rows({"a": 10.0, "b": -10.0, "c": 0.0}, swing_pct=4.0 * np.sqrt(3) / 2))
    row = t.iloc[0]
    assert row.configs == 3 and row.builds == 4 and row.runs == 24
    assert row.structural_pct == pytest.approx(np.sqrt(200 / 3))
    # +-s over 4 builds: sample variance 4 s^2 / 3
    assert row.spread_pct == pytest.approx(4.0, rel=1e-9)


def test_a_model_right_on_average_has_no_structural_error_however_much_builds_swing(bench):
    t = bench.decompose(rows({"a": 0.0, "b": 0.0}, swing_pct=12.0))
    assert t.iloc[0].structural_pct == pytest.approx(0.0, abs=1e-9)
    assert t.iloc[0].spread_pct > 12.0


def test_configurations_measured_by_too_few_builds_do_not_count(bench):
    few = rows({"rare": 50.0}, swing_pct=0.0, builds=2)
    t = bench.decompose(pd.concat([rows({"a": 5.0}, swing_pct=0.0), few]), min_builds=3)
    assert t.iloc[0].configs == 1
    assert t.iloc[0].structural_pct == pytest.approx(5.0)


def test_a_configuration_is_its_run_id_without_replicate_and_protocol_digest(bench):
    ids = pd.Series(
        ["L2-h64-a1-s64-b6_tp1-dp1@cpu-fp32.ea906f", "L2-h64-a1-s64-b6_tp1-dp1@cpu-fp32-r1.0aa11b"]
    )
    assert list(bench.configuration(ids)) == ["L2-h64-a1-s64-b6_tp1-dp1@cpu-fp32"] * 2


def test_replicates_within_a_build_are_not_a_spread_between_builds(bench):
    t = bench.decompose(rows({"a": 3.0}, swing_pct=0.0, replicate_pct=8.0))
    assert t.iloc[0].spread_pct == pytest.approx(0.0, abs=1e-9)
    assert t.iloc[0].mape_pct > 3.0  # each run is still off by its replicate's noise


def test_a_stored_builds_off_grid_errors_are_the_ones_its_cached_scores_rest_on(bench):
    """The benchmark's per-run errors of the fitted tier give the newest stored build's validation- and test-set
    MAPE as the validation page scored them (the cached scores beside the archive)."""
    from companion.energy import stored

    source = stored.stored_sweeps(bench.REFERENCE)[-1]
    rows = bench.off_grid_errors(str(source))
    cached = pd.concat(
        pd.read_csv(p) for p in (bench.REFERENCE / "scores").glob(f"{stored.sweep_name(source)}.*.csv")
    )
    fitted = rows[rows.model == "operator_roofline"]
    assert set(fitted.group) == {"holdout", "test"}
    assert set(rows.model) == set(bench.TIERS)
    for group, r in fitted.groupby("group"):
        page = cached[
            (cached.split == group) & (cached.model == "operator_roofline") & (cached.target == "time")
        ]
        mape = 100 * np.mean(np.abs(r.predicted_s / r.measured_s - 1))
        assert len(page) == 1 and mape == pytest.approx(float(page.mape_pct.iloc[0]), rel=1e-9), group
        assert int(page.n.iloc[0]) == len(r)


def test_a_spread_needs_two_builds(bench):
    with pytest.raises(ValueError, match="at least 2"):
        bench.decompose(rows({"a": 1.0}, swing_pct=1.0), min_builds=1)


def test_the_worst_configurations_are_followed_over_builds_not_runs(bench):
    t = bench.worst_configs(
        pd.concat(
            [rows({"a": 10.0, "b": 2.0}, swing_pct=1.0), rows({"rare": 50.0}, swing_pct=0.0, builds=2)]
        ),
        n=1,
    )
    assert list(t.config) == ["a"] and t.iloc[0].builds == 4 and t.iloc[0].mean_pct == pytest.approx(10.0)
