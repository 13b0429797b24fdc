"""The host-speed reference: a fixed workload, timed on the caller's threads."""

import pytest

from companion.runs import hostspeed


def test_the_reference_times_its_workload_and_says_what_it_timed():
    assert 1e-5 < hostspeed.reference_s(iterations=2) < 1.0
    assert hostspeed.describe() == {
        "workload": hostspeed.WORKLOAD["name"],
        "iterations": hostspeed.ITERATIONS,
    }


def test_the_reference_times_at_least_one_iteration():
    with pytest.raises(ValueError, match="at least one timed iteration"):
        hostspeed.reference_s(iterations=0)
