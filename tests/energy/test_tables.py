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

    return pd.DataFrame(
        {
            "run_id": ["slow", "fast", "typical", "old", "gpu", "tp2"],
            "device_name": ["cpu", "cpu", "cpu", "cpu", "H100", "cpu"],
            "world_size": [1, 1, 1, 1, 1, 2],
            "threads_per_rank": [2, 2, 2, 2, None, 1],
            "host_speed_s": [3e-3, 1.5e-3, 2e-3, None, None, 4e-3],
            "host_speed_workload": ["w", "w", "w", None, None, "w"],
            "step_s": [0.3, 0.1, 0.2, 0.2, 0.05, 0.4],
            "energy_per_step_j": [6.0, 2.0, 4.0, 4.0, 10.0, 8.0],
            "co2_per_step_kg": [3e-6, 1e-6, 2e-6, 2e-6, 5e-6, 4e-6],
            "samples_per_s": [10.0, 30.0, 15.0, 15.0, 60.0, 7.5],
        }
    )


def test_a_run_is_expressed_at_its_sweeps_typical_host_speed_and_keeps_what_was_measured():
    import numpy as np

    from companion.energy.tables import host_corrected, host_speed_reference

    runs = _speed_frame()
    ref = host_speed_reference(runs)
    # per kind of timing: one rank on two threads (median of three), two ranks on one thread each (one run)
    assert sorted(ref.host_speed_reference_s) == [2e-3, 4e-3]
    out = host_corrected(runs, ref)
    # the slow run's host ran 1.5x slower than the sweep's typical: at that speed its step is 1.5x shorter
    np.testing.assert_allclose(out.host_speed_factor[[0, 1, 2, 5]], [1.5, 0.75, 1.0, 1.0])
    np.testing.assert_allclose(out.step_s, [0.2, 0.1 / 0.75, 0.2, 0.2, 0.05, 0.4])
    np.testing.assert_allclose(out.energy_per_step_j[:2], [4.0, 2.0 / 0.75])
    np.testing.assert_allclose(out.co2_per_step_kg[:2], [2e-6, 1e-6 / 0.75])
    np.testing.assert_allclose(out.samples_per_s[:2], [15.0, 22.5])
    np.testing.assert_allclose(out.step_measured_s, runs.step_s)
    np.testing.assert_allclose(out.energy_measured_per_step_j, runs.energy_per_step_j)
    # a record without the timing, and a GPU's, keep their measurements and say they were not corrected
    assert out.host_speed_factor[[3, 4]].isna().all()


def test_no_reference_or_another_kind_leaves_every_step_as_measured():
    import pandas as pd

    from companion.energy.tables import host_corrected, host_speed_reference

    runs = _speed_frame()
    for ref in (None, host_speed_reference(runs.assign(host_speed_s=None))):
        out = host_corrected(runs, ref)
        assert out.host_speed_factor.isna().all() and list(out.step_s) == list(runs.step_s)
    # off-grid runs of a kind the sweep never timed (another workload, four ranks) are not corrected
    other = runs.assign(host_speed_workload="another workload")
    assert host_corrected(other, host_speed_reference(runs)).host_speed_factor.isna().all()
    four = pd.DataFrame(runs.iloc[[5]]).assign(world_size=4)
    assert host_corrected(four, host_speed_reference(runs)).host_speed_factor.isna().all()


def test_a_records_host_speed_is_the_geometric_mean_of_its_two_timings():
    from companion.energy.tables import _host_speed_s

    assert _host_speed_s({"before_s": 1e-3, "after_s": 4e-3}) == pytest.approx(2e-3)
    assert _host_speed_s(None) is None
    assert _host_speed_s({"before_s": 1e-3, "after_s": None}) is None
