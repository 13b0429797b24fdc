"""benchmarks/parallel_design.py compares two designs of the grid's parallel group as subsets of one build measured
with both: the earlier two sizes in both passes, and the profile's sizes in the first pass."""

import pandas as pd
import pytest
from conftest import load_benchmark

from companion.runs.profiles import load_profile


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("parallel_design")


RUN_IDS = pd.Series(
    [
        "L2-h128-a4-s64-b8_tp1-dp1@cpu-fp32.aaaaaa",  # the grid's one-process runs: every design keeps them
        "L2-h128-a4-s64-b8_tp1-dp1@cpu-fp32-r1.bbbbbb",
        "L4-h128-a4-s128-b4_tp2-dp1@cpu-fp32-t1.cccccc",  # an earlier size, both passes
        "L4-h128-a4-s128-b4_tp2-dp1@cpu-fp32-t1-r1.dddddd",
        "L6-h64-a4-s32-b4_tp2-dp1@cpu-fp32-t1.eeeeee",  # a size added, both passes
        "L6-h64-a4-s32-b4_tp2-dp1@cpu-fp32-t1-r1.ffffff",
    ]
)


def test_each_design_keeps_its_sizes_and_passes_and_every_one_process_run(bench):
    d = bench.designs(RUN_IDS)
    assert d["two sizes x2"].tolist() == [True, True, True, True, False, False]
    assert d["four sizes x1"].tolist() == [True, True, True, False, True, False]
    assert d["four sizes x2"].all()


def test_a_build_without_the_parallel_groups_second_pass_is_refused(bench):
    with pytest.raises(SystemExit, match="replicates: 2"):
        bench.designs(RUN_IDS[~RUN_IDS.str.contains("-t1-r1")])


def test_the_earlier_sizes_are_among_the_profiles_parallel_sizes(bench):
    sizes = {
        f"L{r.model.layers}-h{r.model.hidden}-a{r.model.heads}-s{r.data.seq_len}-b{r.data.batch_size}_"
        for r in load_profile("cpu").runs
        if r.layout.tp * r.layout.dp > 1
    }
    assert set(bench.EARLIER_SIZES) < sizes and len(sizes) == 4
