"""How fast a shared CPU host runs at a given moment: a fixed reference workload, timed beside every CPU run.

On a shared 2-core host the same training step's time wanders by 10-30 % over seconds: other tenants share the
caches, the memory and the cores' siblings, and the guest sees neither steal time nor a change of clock (its
``/proc/stat`` steal stays at 0 % while the step slows by 30 %). Two replicates of one configuration then differ
by about 10 % (sd), which no model of the configuration can predict. A small fixed workload (GEMMs and an
element-wise pass) timed just before and just after a run's measured windows, by every rank at once on the run's
own threads, slows with it: a 2-thread step and the 2-thread workload beside it correlated at 0.82-0.87 over
0.4-1.5-s windows on this host type (log-log slope 0.96-1.04), where the workload on one thread beside 2-thread
steps tracked them with a slope of 1.5 (one busy core slows a 2-thread operator whole; docs/decisions.md).
``benchmarks/host_speed.py`` measures it again. A run's record keeps both timings; the analysis expresses every
CPU run's step at its sweep's typical host speed (``companion.energy.tables.host_corrected``) and keeps the step
as measured beside it.
"""

from __future__ import annotations

import statistics
import time

# The reference workload: GEMMs of a size a BERT of the sweeps' widths runs, and an element-wise pass over a
# buffer larger than a core's L2 cache. Changing it changes what every record's timings mean: name it anew.
WORKLOAD = {"name": "gemm192x10+axpy200k", "gemm_dim": 192, "gemm_reps": 10, "elementwise": 200_000}
ITERATIONS = 8  # timed, after one untimed; their median


def _workload():
    import torch

    g = torch.Generator().manual_seed(0)
    n = WORKLOAD["gemm_dim"]
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    v = torch.randn(WORKLOAD["elementwise"], generator=g)

    def once() -> None:
        for _ in range(WORKLOAD["gemm_reps"]):
            torch.mm(a, b)
        v.mul_(0.999).add_(1e-3)

    return once


def reference_s(iterations: int = ITERATIONS) -> float:
    """The reference workload's median time (s) over ``iterations`` timed iterations after one untimed, on the
    caller's torch threads (about 1-2 ms an iteration on this host type)."""
    if iterations < 1:
        raise ValueError(f"iterations={iterations}: the reference needs at least one timed iteration")
    once = _workload()
    once()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def describe() -> dict:
    """What a record says of the reference it timed (its threads are the run's, ``threads.per_rank``)."""
    return {"workload": WORKLOAD["name"], "iterations": ITERATIONS}
