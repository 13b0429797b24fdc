import json

import numpy as np
import pandas as pd
import pytest

from companion.energy.noise import replicate_noise
from companion.energy.tables import runs_frame
from companion.runs.carbon import carbon_intensity
from companion.runs.config import build_run
from companion.runs.records import load_records
from companion.runs.train import run_plan

TINY = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "vocab": 256,
    "max_positions": 64,
    "seq_len": 16,
    "batch_size": 4,
    "warmup_steps": 1,
    "window_steps": 2,
    "min_windows": 2,
    "max_steps": 4,
    "target_rel_ci": 0.0,
    "meter": "codecarbon",
    "country": "FRA",
}


def test_replicate_noise_by_hand():
    frame = pd.DataFrame(
        {
            "run_id": ["a", "a.r1", "b", "b.r1", "b.r2", "c"],
            "config_id": ["a", "a", "b", "b", "b", "c"],
            "replicate": [0, 1, 0, 1, 2, 0],
            "step_s": [1.0, 3.0, 2.0, 2.0, 2.0, 5.0],
            "energy_per_step_j": [10.0, 10.0, None, None, None, 1.0],
            "converged": [True, False, True, True, False, True],
        }
    )
    noise = replicate_noise(frame)
    t = noise["metrics"]["time_per_step"]
    # a: mean 2, deviations -0.5 and +0.5; b: all 0; c has one replicate and is left out
    assert t["n_configs"] == 2 and t["n_runs"] == 5
    assert t["mape"] == pytest.approx(1.0 / 5) and t["median_ape"] == 0.0 and t["max_ape"] == 0.5
    e = noise["metrics"]["energy_per_step"]
    assert e["n_configs"] == 1 and e["mape"] == 0.0  # b has no energy
    assert noise["converged_fraction"] == pytest.approx(4 / 6) and noise["n_configs"] == 3
    # between passes: a went 1 -> 3, b stayed at 2 (last replicate over first)
    drift = noise["between_passes"]["time_per_step"]
    assert drift["n_configs"] == 2 and drift["median_ratio"] == pytest.approx(2.0)
    assert drift["median_abs_change"] == pytest.approx(1.0)
    from companion.report.sentences import pass_drift_text

    assert pass_drift_text(noise).startswith("a median 100 % slower than the first")
    # no direction where the median change rounds to nothing
    even = {
        "between_passes": {
            "time_per_step": {"median_ratio": 1.003, "median_abs_change": 0.06, "n_configs": 23}
        }
    }
    assert pass_drift_text(even) == (
        "at the first's pace, in the median (median absolute change over the 23 configurations kept in both "
        "passes: 6 %)"
    )
    assert pass_drift_text({}) == pass_drift_text({"between_passes": None}) != ""
    runs = {r["run_id"]: r for r in noise["runs"]}
    assert runs["a"]["time_per_step_rel_dev"] == pytest.approx(-0.5) and "c" not in runs
    json.dumps(noise, allow_nan=False)  # strict JSON: no NaN anywhere


def _passes(sd: float, shift: float, configs: int = 400, seed: int = 0) -> tuple[pd.DataFrame, float]:
    """Two passes of a sweep: log step time = configuration + the pass's shift (+-shift) + scatter (sd), and the
    MAPE of the exact model (each configuration's true value at the mean shift) on these very runs."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(-3, 0, configs)
    rows, ape = [], []
    for c in range(configs):
        for r, s in ((0, shift), (1, -shift)):
            x = float(np.exp(mu[c] + s + sd * rng.standard_normal()))
            rows.append(
                {
                    "run_id": f"c{c}r{r}",
                    "config_id": f"c{c}",
                    "replicate": r,
                    "converged": True,
                    "step_s": x,
                    "energy_per_step_j": 3 * x,
                }
            )
            ape.append(abs(np.exp(mu[c]) - x) / x)
    return pd.DataFrame(rows), float(np.mean(ape))


@pytest.mark.parametrize("sd, shift", [(0.08, 0.0), (0.08, 0.04), (0.03, 0.08), (0.0, 0.05)])
def test_the_exact_model_floor_is_what_an_exact_model_scores(sd, shift):
    from companion.energy.noise import exact_model_floor

    frame, truth = _passes(sd, shift)
    noise = replicate_noise(frame)
    exact = noise["metrics"]["time_per_step"]["exact_model"]
    assert exact["mape"] == pytest.approx(truth, rel=0.08, abs=1e-4)
    assert exact["scatter_sd_log"] == pytest.approx(sd, rel=0.1, abs=2e-3)
    assert exact["pass_shift_log"] == pytest.approx([shift, -shift], abs=0.01) and exact["passes"] == 2
    floor = noise["metrics"]["time_per_step"]["mape"]
    if shift == 0:  # each run's own noise: the floor counts 1 / sqrt(2) of it
        assert exact["mape"] == pytest.approx(floor * 2**0.5, rel=0.08)
    if sd == 0:  # a shift of the whole pass: the floor counts all of it
        assert exact["mape"] == pytest.approx(floor, rel=0.05)
    # too few configurations measured in both passes: no estimate, never a guess
    assert exact_model_floor(frame.head(4), "step_s") is None


def test_frame_has_replicates_and_co2_from_energy_at_analysis_time(tmp_path):
    cfgs = [build_run({**TINY, "replicate": r}) for r in (0, 1)]
    assert run_plan(cfgs, tmp_path, "unit") == 0
    records = load_records(tmp_path)
    frame = runs_frame(records).set_index("replicate")
    assert set(frame.config_id) == {cfgs[0].run_id} and set(frame.run_id) == {c.run_id for c in cfgs}
    g_per_kwh = carbon_intensity("FRA")["g_per_kwh"]
    assert frame.co2_per_step_kg.tolist() == pytest.approx(
        (frame.energy_per_step_j / 3.6e6 * g_per_kwh / 1000).tolist()
    )
    assert (frame.threads_per_rank >= 1).all()
    assert set(frame.data_source) == {"synthetic"} and not frame.oversubscribed.any()  # one rank on this host
    shares = (
        frame.ram_energy_share.dropna()
    )  # what part CodeCarbon's RAM model is, where it metered components
    assert ((shares > 0) & (shares < 1)).all()
    if frame.energy_source.str.startswith("codecarbon").all():
        assert len(shares) == len(frame)
    # a record written before CO2 moved to analysis (a stored carbon block, no config_id) reads the same way
    old = json.loads(json.dumps(records[0]))
    old["energy"]["carbon"] = {"co2_kg": 123.0, "g_per_kwh": 1.0, "country": "FRA"}
    del old["config_id"], old["threads"]
    row = runs_frame([old]).iloc[0]
    assert row.config_id == old["run_id"] and row.co2_per_step_kg == pytest.approx(
        old["energy"]["per_step_mean_j"] / 3.6e6 * g_per_kwh / 1000
    )
    assert replicate_noise(runs_frame(records))["metrics"]["time_per_step"]["n_configs"] == 1


def test_eta_reference_uses_the_parallel_ranks_thread_budget_and_every_replicate():
    from companion.energy.efficiency import CONFIG_KEY, measured_eta

    shape = {k: 1 for k in CONFIG_KEY}
    rows = [  # T_1 at 2 threads (fast), T_1 at 1 thread twice (replicates), TP=2 at 1 thread per rank
        {**shape, "run_id": "s2", "world_size": 1, "mode": "single", "step_s": 1.0, "threads_per_rank": 2},
        {**shape, "run_id": "s1a", "world_size": 1, "mode": "single", "step_s": 1.8, "threads_per_rank": 1},
        {**shape, "run_id": "s1b", "world_size": 1, "mode": "single", "step_s": 2.2, "threads_per_rank": 1},
        {**shape, "run_id": "tp", "world_size": 2, "mode": "tp", "step_s": 1.25, "threads_per_rank": 1},
    ]
    eta = measured_eta(pd.DataFrame(rows)).set_index("run_id").eta
    assert eta["tp"] == pytest.approx(
        2.0 / (2 * 1.25)
    )  # mean of the 1-thread replicates, not the 2-thread run


def test_validation_reports_the_noise_floor_beside_every_mape():
    from companion.energy.validation import score

    noise = {
        "metrics": {
            "time_per_step": {"mape": 0.04, "n_configs": 3},
            "energy_per_step": {"mape": None, "n_configs": 0},
        }
    }
    pred = pd.DataFrame(
        {
            "split": ["size"] * 4,
            "model": ["m"] * 4,
            "target": ["time", "time", "energy", "energy"],
            "ape_pct": [1.0, 3.0, 2.0, 4.0],
            "covered": [True, False, True, True],
            "fold": ["a", "b", "a", "b"],
            "size": ["s1", "s2", "s1", "s2"],
        }
    )
    table = score(pred, noise).set_index("target")
    assert table.loc["time", "noise_floor_pct"] == pytest.approx(4.0)
    assert pd.isna(table.loc["energy", "noise_floor_pct"])  # no replicated energy: no floor, not zero
    assert pd.isna(score(pred, None).noise_floor_pct).all()


def test_each_group_has_the_floor_of_the_runs_it_scores():
    """A split's own floor is the mean replicate deviation of its scored runs that were measured twice (each
    run counted once, whatever the number of folds or models); none below MIN_FLOOR_RUNS such runs."""
    from companion.energy.validation import MIN_FLOOR_RUNS, score

    ids = [f"r{i}" for i in range(8)]
    noise = {
        "metrics": {"time_per_step": {"mape": 0.05, "n_configs": 4}},
        "runs": [
            {"run_id": r, "time_per_step_rel_dev": (-1) ** i * 0.01 * (i + 1)} for i, r in enumerate(ids[:6])
        ],
    }
    pred = pd.DataFrame(
        {
            "split": ["noisy"] * 6 + ["quiet"] * 3 + ["noisy"] * 2,
            "model": "m",
            "target": "time",
            "run_id": ids[:6] + ids[:2] + ["r7"] + ids[4:6],
            "ape_pct": 5.0,
            "covered": True,
            "fold": "a",
            "size": "s",
        }
    )
    table = score(pred, noise).set_index("split")
    assert table.loc["noisy", "runs_floor_pct"] == pytest.approx(
        100 * np.mean([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])
    )
    assert table.loc["noisy", "runs_floor_n"] == 6 and table.loc["noisy", "noise_floor_pct"] == pytest.approx(
        5.0
    )
    assert table.loc["quiet", "runs_floor_n"] == 2 < MIN_FLOOR_RUNS and pd.isna(
        table.loc["quiet", "runs_floor_pct"]
    )


def test_the_floor_as_measured_is_reported_beside_the_corrected_one():
    """Runs expressed at the sweep's typical host speed keep their measurements: the floor of both is reported, so
    a reader sees what the correction removed (here: the second replicate ran on a host 1.5x slower)."""
    from companion.energy.tables import host_corrected

    frame = pd.DataFrame(
        {
            "run_id": ["a", "a.r1"],
            "config_id": ["a", "a"],
            "replicate": [0, 1],
            "device_name": ["cpu", "cpu"],
            "world_size": [1, 1],
            "threads_per_rank": [2, 2],
            "host_speed_s": [2e-3, 3e-3],
            "host_speed_workload": ["w", "w"],
            "step_s": [1.0, 1.5],
            "energy_per_step_j": [10.0, 15.0],
            "converged": [True, True],
        }
    )
    reference = pd.DataFrame(
        {
            "host_speed_workload": ["w"],
            "world_size": [1],
            "host_speed_reference_s": [2e-3],
        }
    )
    corrected = host_corrected(frame, reference)
    noise = replicate_noise(corrected)
    assert noise["metrics"]["time_per_step"]["mape"] == pytest.approx(0.0)
    assert noise["as_measured"]["corrected_runs"] == 2
    assert noise["as_measured"]["mape"]["time_per_step"] == pytest.approx(0.2)  # |1 - 1.5| / 2.5
    assert replicate_noise(frame)["as_measured"] is None  # nothing corrected: the floor is the measured one
