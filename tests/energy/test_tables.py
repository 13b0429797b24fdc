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
