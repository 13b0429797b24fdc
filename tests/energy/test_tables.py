"""Which attention kernel ran: recorded at run time, inferred conservatively for older records."""

import pytest

from companion.energy.tables import attention_kernel
from companion.runs.config import build_run
from companion.runs.train import attention_kernel as runtime_kernel


def _record(attn="sdpa", device="cpu", dropout=0.1, recorded=None):
    rec = {
        "config": {"device": device, "model": {"attn": attn, "dropout": dropout}},
        "model": {"parameters": 1},
    }
    if recorded:
        rec["model"]["attention_kernel"] = recorded
    return rec


@pytest.mark.parametrize(
    "attn,device,dropout,kernel",
    [
        ("sdpa", "cpu", 0.1, "math"),  # CPU SDPA falls back to the math kernel when training with dropout
        ("sdpa", "cpu", 0.0, "fused"),
        ("eager", "cuda", 0.0, "math"),
        ("sdpa", "cuda", 0.1, "fused"),
    ],
)
def test_old_records_infer_the_kernel_and_say_so(attn, device, dropout, kernel):
    assert attention_kernel(_record(attn, device, dropout)) == (kernel, True)


def test_a_recorded_kernel_wins():
    assert attention_kernel(_record("sdpa", "cpu", 0.1, recorded="fused")) == ("fused", False)


def test_the_runner_records_what_torch_runs_on_cpu():
    import torch
    import torch.nn.functional as F
    from torch.profiler import profile

    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    for dropout in (0.0, 0.1):
        cfg = build_run({"layers": 1, "hidden": 16, "heads": 2, "dropout": dropout, "attn": "sdpa"})
        with profile() as prof:
            F.scaled_dot_product_attention(q, q, q, dropout_p=dropout)
        ran_math = any("attention_math" in e.key for e in prof.key_averages())
        assert runtime_kernel(cfg) == ("math" if ran_math else "fused")


def test_disturbed_runs_are_left_out_and_named():
    import pandas as pd

    from companion.energy.tables import usable_runs

    df = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d"],
            "step_ci95_rel": [0.01, 0.5, None, 0.4],
            "target_rel_ci": [0.02, 0.02, 0.02, 0.0],
        }
    )
    kept, left_out = usable_runs(df, 0.1)
    assert list(kept.run_id) == ["a", "d"] and left_out == ["b", "c"]  # d: fixed steps, no precision asked
    assert len(usable_runs(df, None)[0]) == 4


def test_the_filter_counts_say_how_many_runs_and_parallel_runs_were_kept():
    import pandas as pd

    from companion.energy.tables import filter_counts

    df = pd.DataFrame({"run_id": list("abcde"), "world_size": [1, 1, 2, 4, 4]})
    assert filter_counts(df, ["b", "d", "e"]) == {
        "runs": 5,
        "kept": 2,
        "parallel_runs": 3,
        "parallel_kept": 1,
    }
    assert filter_counts(df, []) == {"runs": 5, "kept": 5, "parallel_runs": 3, "parallel_kept": 3}


def test_the_ram_share_is_the_ram_component_over_all_components():
    from companion.energy.tables import _component_share

    energy = {"components": {"cpu": {"energy_j": 30.0, "method": "cpu_load"}, "ram": {"energy_j": 10.0}}}
    assert _component_share(energy, "ram") == pytest.approx(0.25)
    assert _component_share(energy, "gpu") is None  # a component the record does not list has no share
    assert _component_share({"components": {}}, "ram") is None  # nor does a meter without components (NVML)


def _speed_frame():
    import pandas as pd

    # as records give them: one-rank runs time the reference (on one thread, whatever their own threads), a
    # GPU's too (the host issuing its kernels: kept, not applied); a run of several ranks and a record from
    # before the reference do not
    return pd.DataFrame(
        {
            "run_id": ["slow", "fast", "typical", "one-thread", "old", "gpu", "tp2"],
            "device": ["cpu", "cpu", "cpu", "cpu", "cpu", "cuda", "cpu"],
            "device_name": ["cpu", "cpu", "cpu", "cpu", "cpu", "H100", "cpu"],
            "world_size": [1, 1, 1, 1, 1, 1, 2],
            "threads_per_rank": [2, 2, 2, 1, 2, None, 1],
            "host_speed_s": [3e-3, 1.5e-3, 2e-3, 2.5e-3, None, 9e-3, None],
            "host_speed_workload": ["w", "w", "w", "w", None, "w", None],
            "step_s": [0.3, 0.1, 0.2, 0.5, 0.2, 0.05, 0.4],
            "energy_per_step_j": [6.0, 2.0, 4.0, 10.0, 4.0, 10.0, 8.0],
            "co2_per_step_kg": [3e-6, 1e-6, 2e-6, 5e-6, 2e-6, 5e-6, 4e-6],
            "samples_per_s": [10.0, 30.0, 15.0, 6.0, 15.0, 60.0, 7.5],
        }
    )


def test_a_run_is_expressed_at_its_sweeps_typical_host_speed_and_keeps_what_was_measured():
    import numpy as np

    from companion.energy.tables import host_corrected, host_speed_reference

    runs = _speed_frame()
    ref = host_speed_reference(runs)
    # one kind of timing: one-rank runs, whatever their threads (the reference runs on one thread); the median
    assert list(ref.host_speed_reference_s) == [pytest.approx(2.25e-3)]
    out = host_corrected(runs, ref)
    # the slow run's host ran 3/2.25 x slower than the sweep's typical: at that speed its step is that much shorter
    factor = np.array([3e-3, 1.5e-3, 2e-3, 2.5e-3]) / 2.25e-3
    np.testing.assert_allclose(out.host_speed_factor[:4], factor)
    np.testing.assert_allclose(out.step_s[:4], runs.step_s[:4] / factor)
    np.testing.assert_allclose(out.energy_per_step_j[:4], runs.energy_per_step_j[:4] / factor)
    np.testing.assert_allclose(out.co2_per_step_kg[:4], runs.co2_per_step_kg[:4] / factor)
    np.testing.assert_allclose(out.samples_per_s[:4], runs.samples_per_s[:4] * factor)
    np.testing.assert_allclose(out.step_measured_s, runs.step_s)
    np.testing.assert_allclose(out.energy_measured_per_step_j, runs.energy_per_step_j)
    # an older record, a GPU's and a run of several ranks keep their measurements and say they were not corrected
    assert out.host_speed_factor[4:].isna().all()
    np.testing.assert_allclose(out.step_s[4:], runs.step_s[4:])


def test_the_off_grid_runs_take_the_sweeps_reference_through_a_csv_round_trip(tmp_path):
    """The fit reads the sweep from proxies.csv and the off-grid runs from their records: the same reference,
    whatever the dtypes a CSV gives the columns it is keyed on, corrects both alike."""
    import numpy as np
    import pandas as pd

    from companion.energy.tables import host_corrected, host_speed_reference

    runs = _speed_frame()
    runs.to_csv(tmp_path / "proxies.csv", index=False)
    grid = pd.read_csv(tmp_path / "proxies.csv")
    off_grid = runs.iloc[[0, 6]].reset_index(drop=True)
    out = host_corrected(off_grid, host_speed_reference(grid))
    np.testing.assert_allclose(out.host_speed_factor[0], 3e-3 / 2.25e-3)
    assert np.isnan(out.host_speed_factor[1])


def test_no_reference_or_another_workload_leaves_every_step_as_measured():
    from companion.energy.tables import host_corrected, host_speed_reference

    runs = _speed_frame()
    for ref in (None, host_speed_reference(runs.assign(host_speed_s=None))):
        out = host_corrected(runs, ref)
        assert out.host_speed_factor.isna().all() and list(out.step_s) == list(runs.step_s)
    # runs that timed another workload than the sweep's are not corrected
    other = runs.assign(host_speed_workload="another workload")
    assert host_corrected(other, host_speed_reference(runs)).host_speed_factor.isna().all()


def test_a_records_host_speed_is_the_geometric_mean_of_its_two_timings():
    from companion.energy.tables import host_speed_seconds

    assert host_speed_seconds({"before_s": 1e-3, "after_s": 4e-3}) == pytest.approx(2e-3)
    assert host_speed_seconds(None) is None
    assert host_speed_seconds({"before_s": 1e-3, "after_s": None}) is None
