"""The host-speed reference: a fixed workload on one thread, the caller's threads left as they were."""

import pytest
import torch

from companion.runs import hostspeed


def test_the_reference_times_its_workload_on_one_thread_and_restores_the_callers_threads():
    before = torch.get_num_threads()
    assert 1e-5 < hostspeed.reference_s(iterations=2) < 1.0
    assert torch.get_num_threads() == before
    assert hostspeed.describe() == {
        "workload": hostspeed.WORKLOAD["name"],
        "threads": hostspeed.THREADS,
        "iterations": hostspeed.ITERATIONS,
    }


def test_the_reference_times_at_least_one_iteration():
    with pytest.raises(ValueError, match="at least one timed iteration"):
        hostspeed.reference_s(iterations=0)
