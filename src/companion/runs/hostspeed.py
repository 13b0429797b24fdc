"""How fast a shared CPU host runs at a given moment: a fixed reference workload, timed beside every one-rank run
(on a GPU, the host that issues its kernels) and beside a calibration's host probe.

On a shared 2-core host the same training step's time wanders by 10-30 % over seconds: other tenants share the
caches, the memory and the cores' siblings, and the guest sees neither steal time nor a change of clock (its
``/proc/stat`` steal stays at 0 % while the step slows by 30 %). Two replicates of one configuration then differ
by about 10 % (sd), which no model of the configuration can predict. A small fixed workload (GEMMs and an
element-wise pass, on one thread) timed just before and just after a run's windows slows with the run's steps,
though not in proportion: over 1-s windows of steps of 15, 100 and 650 ms, the correlation of the two was
0.5-0.7 and dividing by it took the steps' spread from 21 / 14 / 17 % to 16 / 13 / 15 %
(``benchmarks/host_speed.py``, which times the alternatives too: two threads, more iterations, a buffer beyond
the caches; each helps one step size and harms another). A run of several ranks is not timed: on one core, or on
every rank at once, the workload did not track those runs (docs/decisions.md). The analysis expresses a timed
run's step at its sweep's typical host speed (``companion.energy.tables.host_corrected``) and keeps the step as
measured beside it; a GPU run's timing is kept and not applied. On a GPU the calibration's host probe and a
machine's runs minutes later met different hosts (``data/reference/H200/one-machine-2``: every run slower than
the probe, by 18 % on average), which the two timings can show.
"""

from __future__ import annotations

import statistics
import time

# The reference workload: GEMMs of a size a BERT of the sweeps' widths runs, and an element-wise pass over 0.8 MB.
# Changing it changes what every record's timings mean: name it anew.
WORKLOAD = {"name": "gemm192x10+axpy200k", "gemm_dim": 192, "gemm_reps": 10, "elementwise": 200_000}
THREADS = 1  # whatever the run's threads: a two-thread workload tracked the small steps worse
ITERATIONS = 8  # timed, after one untimed; their median


def _workload(elementwise: int):
    import torch

    g = torch.Generator().manual_seed(0)
    n = WORKLOAD["gemm_dim"]
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    v = torch.randn(elementwise, generator=g)

    def once() -> None:
        for _ in range(WORKLOAD["gemm_reps"]):
            torch.mm(a, b)
        v.mul_(0.999).add_(1e-3)

    return once


def reference_s(
    iterations: int = ITERATIONS, threads: int = THREADS, elementwise: int = WORKLOAD["elementwise"]
) -> float:
    """The reference workload's median time (s) over ``iterations`` timed iterations after one untimed, on
    ``threads`` thread(s) (the caller's thread count is restored). About 2 ms an iteration on this host type.
    The defaults are the runs' workload; ``benchmarks/host_speed.py`` times the alternatives through the other
    arguments (``elementwise``: the element-wise pass's length)."""
    import torch

    if iterations < 1:
        raise ValueError(f"iterations={iterations}: the reference needs at least one timed iteration")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        once = _workload(elementwise)
        once()
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            once()
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return statistics.median(times)


def describe() -> dict:
    """What a record says of the reference it timed."""
    return {"workload": WORKLOAD["name"], "threads": THREADS, "iterations": ITERATIONS}
