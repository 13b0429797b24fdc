"""Device calibration: the microbenchmarks the operator roofline needs, in about a minute.

    companion calibrate --device cpu            -> data/devices/cpu-<host>.json (host: the CPU model, slugged)
    companion calibrate --device cuda           -> data/devices/<GPU name>.json (NCCL, NVML)

What it measures (best of repeated timings; times in s, rates in FLOP/s and bytes/s):

* GEMM throughput over the shapes a BERT step uses (tokens x hidden x hidden, tokens x hidden x FFN,
  seq x head_dim x seq), fitted to R(M, N, K) = peak / (1 + k0 (1/M + 1/N + 1/K)) (peak and k0 reported);
* attention forward + backward with the fused kernel (SDPA, no dropout) and the math kernel (dropout);
* memory bandwidth (copy of a tensor far beyond the caches) and per-operator launch overhead (tiny adds);
* collectives (all-reduce, all-gather, reduce-scatter) for p = 2 and 4 ranks (gloo on CPU, NCCL on GPUs),
  fitted to t = alpha * (p - 1) + bytes_on_the_wire / beta, timed in two passes (first and last) of which
  each timing keeps the faster, the passes' disagreement recorded and, past 1.5x, reported;
* the layouts' own overheads: a tiny BERT (1 and 2 layers, 64 tokens) trained under every TP, FSDP and 2-D
  layout of those ranks, and on one process with one thread; at that size a step is almost all per-operator
  and per-hook cost, so the extra time of a layout per layer and per step over the ranks' compute (the lone
  process's step times the node's oversubscription) is its DTensor dispatch and FSDP hook cost
  (``opmodel.layout_overheads``), measured instead of learnt from a sweep;
* on CPU, the same layouts at a size with real compute (2 layers of width 128, 1024 tokens per step): step time
  and the CPU time of every rank, whose ratio is the cores the step keeps busy, so a layout's extra CPU work is
  told from waiting nothing fills (reported in the calibration's table; the operator model does not read it yet,
  so it is timed in the last pass alone);
* idle and loaded power from the meter the sweeps use (NVML counter on GPUs: measured; CodeCarbon's model on
  a CPU without RAPL: estimated, and labelled so).

CPU ranks share the node's cores; GPU ranks each own a device and overlap FSDP collectives with compute.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from companion.errors import ConfigError, raise_if_stopped
from companion.runs import hostspeed
from companion.runs.config import check_calibration_request
from companion.runs.records import CALIBRATION_FORMAT

# BERT-like GEMM shapes (M, N, K): tokens x out x in, and the attention score GEMMs (seq x seq x head_dim)
GEMM_SHAPES = [
    (m, n, k)
    for m in (256, 1024, 4096)
    for n, k in ((64, 64), (128, 128), (256, 256), (512, 128), (128, 512), (1024, 256))
] + [(s, s, d) for s in (64, 128, 256) for d in (16, 32, 64)]
# On a GPU the same shapes take ~10 us each, the cost of a launch: its GEMMs at BERT-base/large training sizes
# (tokens of a batch x hidden x hidden and FFN), each call well above a millisecond
GPU_GEMM_SHAPES = [
    (m, n, k)
    for m in (4096, 16384, 65536)
    for n, k in ((768, 768), (3072, 768), (768, 3072), (1024, 1024), (4096, 1024))
] + [(8192, 8192, 8192)]
COLLECTIVE_BYTES = (4 * 1024, 64 * 1024, 1024 * 1024, 4 * 1024 * 1024)
# the sizes of the streaming and attention benchmarks, by device kind (a GPU's at BERT training sizes, over the
# calibration checks' floors: ``companion.energy.calibration``)
SIZES = {
    "cpu": {
        "elementwise": (2048, 256),
        "optimizer": 2_000_000,
        "attention": [(8, 4, 128, 32), (8, 4, 256, 32), (8, 8, 128, 16), (8, 2, 128, 64)],
        "op_probe": {"hidden": 32, "heads": 2, "vocab": 128, "batch": 2, "seq": 16},
    },
    "cuda": {
        "elementwise": (32768, 1024),
        "optimizer": 32_000_000,
        "attention": [(32, 12, 128, 64), (32, 12, 512, 64), (128, 12, 128, 64), (16, 16, 512, 64)],
        # a real-sized step (BERT-base width, its vocabulary, batch 8 x 128 tokens) is host-bound on a
        # GPU: its second layer's extra time is the host's cost of that layer's operators
        "op_probe": {"hidden": 768, "heads": 12, "vocab": 30522, "batch": 8, "seq": 128},
    },
}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_time(fn, device, budget_s: float, min_reps: int = 3, min_sample_s: float = 2e-3) -> float:
    """Best time of one ``fn`` call: samples of k back-to-back calls (k sized so a sample lasts at least
    ``min_sample_s``), repeated within ``budget_s``; the best sample resists other load on the machine."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    k = int(min(1000, max(1, min_sample_s / max(time.perf_counter() - t0, 1e-7))))
    best, reps, start = float("inf"), 0, time.perf_counter()
    while reps < min_reps or time.perf_counter() - start < budget_s:
        raise_if_stopped()  # a stop some library swallowed: the calibration ends here, with no file
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / k)
        reps += 1
        if reps > 10000:
            break
    return best


def gemm_benchmark(device, dtype, budget_s: float) -> dict:
    """Every shape timed in two passes (half the budget each): each keeps its faster time, and the passes'
    disagreement (median ratio of slower to faster) is recorded, which the calibration's checks read."""
    shapes = GPU_GEMM_SHAPES if device.type == "cuda" else GEMM_SHAPES
    per = budget_s / (2 * len(shapes))
    passes = []
    for _ in range(2):
        times = []
        for m, n, k in shapes:
            a, b = (
                torch.randn(m, k, device=device, dtype=dtype),
                torch.randn(k, n, device=device, dtype=dtype),
            )
            times.append(_best_time(lambda: a @ b, device, per))
            a = b = None  # freed before the next shape's tensors
        passes.append(times)
    rows = [
        {"m": m, "n": n, "k": k, "time_s": min(t1, t2), "flops_per_s": 2 * m * n * k / min(t1, t2)}
        for (m, n, k), t1, t2 in zip(shapes, *passes)
    ]
    spread = float(np.median([max(t1, t2) / min(t1, t2) for t1, t2 in zip(*passes)]))
    peak, k0 = fit_gemm_roof(rows)
    return {
        "shapes": rows,
        "peak_flops_per_s": peak,
        "half_dim": k0,
        "pass_spread": spread,
        "model": "R(M,N,K) = peak / (1 + k0 (1/M + 1/N + 1/K)), least squares on 1/R",
    }


def fit_gemm_roof(rows: list[dict]) -> tuple[float, float]:
    """peak and k0 of R = peak / (1 + k0 * sum(1/dim)), fitted on log R with a robust loss (a few timings
    disturbed by other load on the machine do not move it)."""
    from scipy.optimize import least_squares

    x = np.array([1 / r["m"] + 1 / r["n"] + 1 / r["k"] for r in rows])
    log_r = np.log([r["flops_per_s"] for r in rows])

    def resid(z):
        return z[0] - np.log1p(np.exp(z[1]) * x) - log_r

    z0 = np.array([float(np.max(log_r)), np.log(32.0)])
    sol = least_squares(
        resid, z0, loss="cauchy", f_scale=0.3, bounds=([-np.inf, np.log(1e-3)], [np.inf, np.log(1e5)])
    )
    return float(np.exp(sol.x[0])), float(np.exp(sol.x[1]))


def attention_benchmark(device, dtype, budget_s: float) -> list[dict]:
    import torch.nn.functional as F

    rows = []
    shapes = SIZES[device.type]["attention"]
    per = budget_s / (2 * len(shapes))
    for b, h, s, d in shapes:
        q = torch.randn(b, h, s, d, device=device, dtype=dtype, requires_grad=True)
        for kernel, dropout in (("fused", 0.0), ("math", 0.1)):

            def step():
                F.scaled_dot_product_attention(q, q, q, dropout_p=dropout).sum().backward()

            t = _best_time(step, device, per)
            flops = 3 * 4 * b * h * s * s * d
            rows.append(
                {
                    "batch": b,
                    "heads": h,
                    "seq": s,
                    "head_dim": d,
                    "kernel": kernel,
                    "dropout": dropout,
                    "fwd_bwd_s": t,
                    "flops_per_s": flops / t,
                }
            )
    return rows


def bandwidth_benchmark(device, budget_s: float) -> dict:
    n = (256 if device.type == "cuda" else 64) * 2**20 // 4
    # both buffers written first: an untouched buffer reads the kernel's shared zero page, from cache
    src = torch.ones(n, device=device)
    dst = torch.zeros_like(src)
    t = _best_time(lambda: dst.copy_(src), device, budget_s)
    return {
        "bytes": 2 * n * 4,
        "time_s": t,
        "bandwidth_bytes_per_s": 2 * n * 4 / t,
        "method": "tensor copy, read + write",
    }


def elementwise_benchmark(
    device, dtype, budget_s: float, tokens: int | None = None, hidden: int | None = None
) -> dict:
    """Achieved bytes/s of one layer's memory-bound operators, forward + backward, at a BERT shape: two layer
    norms, three dropouts and two residual adds on tokens x hidden, GELU on tokens x 4 hidden. The bytes are
    counted at the tensors' element size over the elements the operator model counts (3 x tokens x (8 hidden
    + 2 ffn)); the model reads the timing with its own bytes per element (``opmodel.elementwise_rate``: 5 in
    bf16, where autocast keeps norms and residuals in fp32). Dropout's random numbers and GELU's arithmetic make
    it well below a copy's bandwidth on CPUs."""
    import torch.nn.functional as F

    tokens, hidden = (
        tokens or SIZES[device.type]["elementwise"][0],
        hidden or SIZES[device.type]["elementwise"][1],
    )
    ffn = 4 * hidden
    x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
    u = torch.randn(tokens, ffn, device=device, dtype=dtype, requires_grad=True)
    w, b = torch.ones(hidden, device=device, dtype=dtype), torch.zeros(hidden, device=device, dtype=dtype)

    def step():
        y = F.dropout(F.layer_norm(x, (hidden,), w, b), 0.1) + x
        y = F.dropout(F.layer_norm(y, (hidden,), w, b), 0.1) + y
        z = F.dropout(F.gelu(u), 0.1)
        (y.sum() + z.sum()).backward()

    t = _best_time(step, device, budget_s)
    elements = 3 * tokens * (8 * hidden + 2 * ffn)
    nbytes = elements * x.element_size()
    return {
        "tokens": tokens,
        "hidden": hidden,
        "time_s": t,
        "elements": elements,
        "bytes": nbytes,
        "bytes_per_s": nbytes / t,
        "method": "layer_norm x2, dropout x3, residual add x2, GELU on 4 hidden; fwd + bwd; model's byte count",
    }


# the fused AdamW kernel's traffic per fp32 parameter: weight, gradient and two moments read, three written
MOVED_BYTES_PER_PARAMETER = 28


def optimizer_benchmark(device, budget_s: float, parameters: int | None = None) -> dict:
    """Achieved bytes/s of AdamW, with the kernel training uses (``parallel.adamw_kernel``), over ``parameters``
    fp32 parameters in BERT-like tensors, with the operator model's byte count for the step (36 bytes per
    parameter: weight, gradient, two moments read and written)."""
    from companion.runs.parallel import adamw_kernel

    parameters = parameters or SIZES[device.type]["optimizer"]
    shapes = [(256, 256)] * 16 + [(256, 1024)] * 8 + [(256,)] * 32
    if device.type == "cuda":  # BERT-base's tensors: 768 x 768 projections, 768 x 3072 FFN, biases and norms
        shapes = [(768, 768)] * 4 + [(768, 3072)] * 2 + [(768,)] * 9 + [(3072,)]
    per = sum(int(np.prod(s)) for s in shapes)
    reps = max(1, parameters // per)
    params = [torch.zeros(s, device=device, requires_grad=True) for s in shapes * reps]
    for q in params:
        q.grad = torch.ones_like(q)
    kernel = adamw_kernel(torch.device(device).type)
    opt = torch.optim.AdamW(params, lr=1e-4, **kernel)
    t = _best_time(opt.step, device, 0.75 * budget_s)
    n = sum(q.numel() for q in params)
    # the check's yardstick: a copy over a working set of the step's size (16 bytes per parameter: weight,
    # gradient and two moments), which a CPU's cache may hold where it cannot the bandwidth benchmark's buffers;
    # the step's rate in the bytes its fused kernel moves (``MOVED_BYTES_PER_PARAMETER``) is held to it
    src = torch.ones(2 * n, device=device)
    dst = torch.zeros_like(src)
    t_copy = _best_time(lambda: dst.copy_(src), device, 0.25 * budget_s)
    return {
        "parameters": n,
        "time_s": t,
        "bytes_per_s": 36 * n / t,
        "moved_bytes_per_s": MOVED_BYTES_PER_PARAMETER * n / t,
        "copy_bytes_per_s": 8 * src.numel() / t_copy,
        "method": f"AdamW {', '.join(kernel)} step, 36 bytes per fp32 parameter (the model's count)",
    }


def launch_benchmark(device, budget_s: float) -> dict:
    x = torch.ones(1, device=device)
    reps = 200

    def many():
        y = x
        for _ in range(reps):
            y = y + 1.0
        return y

    t = _best_time(many, device, budget_s)
    return {"launch_s": t / reps, "method": f"{reps} dependent one-element adds"}


def _probe_training(device, q: dict, layers: int, attn: str = "sdpa"):
    """The probes' BERT of ``layers`` layers at the shape ``q`` (``SIZES[kind]["op_probe"]``) with attention
    ``attn``, in training mode, its AdamW with the training runs' kernel, and a batch of ``q``'s size without a
    mask: (model, optimizer, batch). Seeded, so every probe builds the same model."""
    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model
    from companion.runs.parallel import adamw_kernel

    torch.manual_seed(0)
    config = ModelConfig(
        layers=layers,
        hidden=q["hidden"],
        heads=q["heads"],
        vocab=q["vocab"],
        max_positions=max(64, q["seq"]),
        attn=attn,
    )
    model = build_model(config).to(device)
    model.train()
    # training's kernel: its operator count
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **adamw_kernel(torch.device(device).type))
    ids = torch.randint(0, q["vocab"], (q["batch"], q["seq"]), device=device)
    return model, opt, {"input_ids": ids, "labels": torch.zeros(q["batch"], dtype=torch.long, device=device)}


HOST_PROBE_DEPTHS = (1, 2, 3)  # the per-layer host cost is the slope over these depths
HOST_PROBE_ROUNDS = 3  # depths timed in turn, this many rounds: a busy spell hits one timing, not one depth


def host_probe(
    device,
    depths=HOST_PROBE_DEPTHS,
    budget_s: float = 0.0,
    rounds: int = HOST_PROBE_ROUNDS,
    probe: dict | None = None,
) -> dict:
    """Operators dispatched by one training step (forward, backward, AdamW, zero_grad) of a BERT of each depth in
    ``depths``, counted at the aten level, and with a ``budget_s`` each step's best time: the depths are timed in
    turn over ``rounds`` rounds, each keeping its fastest. Returns {"counts": {depth: ops}, "step_s": {depth: s}}."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    import contextlib

    kind = torch.device(device).type
    q = probe or SIZES[kind]["op_probe"]
    # GPUs train under bf16 autocast: its casts are operators too (a CPU's sweeps train fp32)
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if kind == "cuda" else contextlib.nullcontext

    def make_step(layers: int):
        model, opt, batch = _probe_training(device, q, layers)
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])

        def step():
            with amp():
                loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    steps, counts = {}, {}
    for layers in depths:
        steps[layers] = make_step(layers)
        steps[layers]()  # first step outside the count (lazy state)
        Count.n = 0
        with Count():
            steps[layers]()
        counts[layers] = Count.n
    times = {layers: float("inf") for layers in depths}
    if budget_s > 0:
        per = budget_s / (rounds * len(depths))
        for _ in range(rounds):
            for layers in depths:
                times[layers] = min(times[layers], _best_time(steps[layers], device, per, min_sample_s=0.02))
    return {"counts": counts, "step_s": times if budget_s > 0 else {}, "probe": q, "autocast": kind == "cuda"}


def op_count_benchmark(device, budget_s: float = 0.0) -> dict:
    """Operators one training step launches, for BERTs of 1 to 3 layers (``host_probe``): ops = per_step +
    per_layer * layers. With a ``budget_s``, the steps are timed too: at the probe's shape a step is almost all
    per-operator cost, so the slope of step time over depth per extra operator is the cost of one operator
    *inside a training step* (autograd and optimizer included), which a loop of bare adds underestimates
    several-fold. Each depth's increment is kept: they must agree (``calibration.check_op_counts``). With a
    ``budget_s``, the host-speed reference workload (``runs.hostspeed``) is timed just before and just after the
    probe (``host_speed``), as one-rank runs time it beside their windows: the host's speed then and in a run can
    be compared."""
    speed_before_s = hostspeed.reference_s() if budget_s else None
    found = host_probe(device, budget_s=budget_s)
    speed_after_s = hostspeed.reference_s() if budget_s else None
    counts, times = found["counts"], found["step_s"]
    depths = sorted(counts)
    per_layer = counts[depths[1]] - counts[depths[0]]
    q = found["probe"]
    kernel = adamw_kernel_name(device)
    out = {
        "per_layer": per_layer,
        "per_step": counts[depths[0]] - per_layer * depths[0],
        "counts": {str(k): v for k, v in counts.items()},
        "autocast": found["autocast"],
        "method": f"aten operators dispatched by one training step (AdamW {kernel}"
        + (", bf16 autocast" if found["autocast"] else "")
        + f"), BERT of {', '.join(map(str, depths))} layers",
    }
    if times:
        x = np.array(depths, float)
        y = np.array([times[d] for d in depths])
        slope = float(np.polyfit(x, y, 1)[0])
        out.update(
            step_s={str(k): v for k, v in times.items()},
            layer_increments_s=[float(b - a) for a, b in zip(y, y[1:])],
            per_op_s=max(slope, 0.0) / per_layer,
            per_op_method=f"slope of the best step time over {', '.join(map(str, depths))} layers (timed in turn, "
            f"{HOST_PROBE_ROUNDS} rounds) / operators per layer; hidden {q['hidden']}, {q['batch']} x {q['seq']} "
            "tokens",
            host_speed={"before_s": speed_before_s, "after_s": speed_after_s, **hostspeed.describe()},
        )
    return out


EXECUTION_PROBE_DEPTHS = (1, 3)  # the per-layer costs of a compiled step are the slope over these depths
EXECUTION_PROBE_HOST_STEPS = 20  # at most this many steps queued without a synchronisation per host sample
EXECUTION_PROBE_QUEUED_KERNELS = 800  # and at most this many kernels (a GPU's launch queue holds ~1 000)
EXECUTION_PROBE_SAMPLES = 5  # the host's time per step is the fastest of this many samples


def execution_probe(device, executions, budget_s: float, probe: dict | None = None) -> dict:
    """How each execution mode (eager and ``executions``: compile, cudagraphs, and either with attention left out
    of the compiled graphs, ``compile+sdpa-nocompile``: ``opmodel.execution_key``) changes the host's time and the
    device's kernel count of one training step, measured on the host probe's BERT (``SIZES[kind]["op_probe"]``)
    at ``EXECUTION_PROBE_DEPTHS`` layers through the runner's own step (``train.make_train_step`` on
    ``train.compiled``). Per mode and depth: the host's time per step (steps queued without a synchronisation,
    the device left to catch up), the best synchronised step time and, on a GPU, the kernels per step
    (torch.profiler); per mode the intercept and slope over depth of each, and the compile (and capture) time.
    The operator model takes a compiled mode's host time from it and scales its kernels by the mode's ratio to
    eager's (``opmodel.execution_scales``)."""
    from companion.runs.train import compiled, make_train_step, step_inputs

    dev = torch.device(device)
    kind = dev.type
    q = probe or SIZES[kind]["op_probe"]
    modes = ["eager"] + [m for m in executions if m != "eager"]
    per = budget_s / max(len(modes) * len(EXECUTION_PROBE_DEPTHS), 1)

    def kernels_per_step(step, steps: int = 3) -> float | None:
        if kind != "cuda":
            return None
        from torch.profiler import DeviceType, ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            _sync(dev)
        # the device's activities (kernels, copies, fills), a CUDA graph's replayed kernels included
        found = prof.profiler.kineto_results.events()
        return sum(1 for e in found if e.device_type() == DeviceType.CUDA) / steps

    out: dict = {"probe": q, "depths": list(EXECUTION_PROBE_DEPTHS), "modes": {}}
    for mode in modes:
        rows = []
        for layers in EXECUTION_PROBE_DEPTHS:
            execution, _, attn = mode.partition("+")
            model, opt, batch = _probe_training(dev, q, layers, attn or "sdpa")
            train = make_train_step(
                compiled(model, execution, bf16_autocast=kind == "cuda"),
                opt,
                bf16_autocast=kind == "cuda",
                graphs=execution == "cudagraphs",
            )
            inputs = step_inputs(batch, execution)  # what the runs' steps of this execution are fed
            step = lambda: train(inputs)  # noqa: E731
            t0 = time.perf_counter()
            for _ in range(3):  # compiles (and captures) on the first steps
                step()
            _sync(dev)
            compile_s = time.perf_counter() - t0
            step_s = _best_time(step, dev, per, min_sample_s=0.02)
            kernels = kernels_per_step(step)
            # a GPU's launch queue holds about a thousand kernels: fewer are queued per sample, so the host
            # never waits for the device and the sample times the host alone
            n = (
                max(1, int(EXECUTION_PROBE_QUEUED_KERNELS // kernels))
                if kernels
                else EXECUTION_PROBE_HOST_STEPS
            )
            n = min(n, EXECUTION_PROBE_HOST_STEPS)
            host_s = float("inf")
            for _ in range(EXECUTION_PROBE_SAMPLES):
                _sync(dev)
                t0 = time.perf_counter()
                for _ in range(n):
                    step()
                host_s = min(host_s, (time.perf_counter() - t0) / n)
            _sync(dev)
            rows.append(
                {
                    "layers": layers,
                    "host_s": host_s,
                    "host_steps": n,
                    "step_s": step_s,
                    "kernels": kernels,
                    "compile_s": compile_s,
                }
            )
            del model, opt
        x = np.array([r["layers"] for r in rows], float)

        def line(field: str) -> tuple[float, float] | tuple[None, None]:
            y = [r[field] for r in rows]
            if any(v is None for v in y):
                return None, None
            slope, intercept = np.polyfit(x, np.array(y, float), 1)
            return float(intercept), float(slope)

        host_step, host_layer = line("host_s")
        k_step, k_layer = line("kernels")
        out["modes"][mode] = {
            "rows": rows,
            "host_per_step_s": host_step,
            "host_per_layer_s": host_layer,
            "kernels_per_step": k_step,
            "kernels_per_layer": k_layer,
        }
    out["method"] = (
        f"runner's training step (AdamW {adamw_kernel_name(dev)}"
        + (", bf16 autocast" if kind == "cuda" else "")
        + f") of a BERT of {', '.join(map(str, EXECUTION_PROBE_DEPTHS))} layers, hidden {q['hidden']}, "
        f"{q['batch']} x {q['seq']} tokens, per mode: host time = fastest of {EXECUTION_PROBE_SAMPLES} "
        f"samples of steps queued without a synchronisation (at most {EXECUTION_PROBE_QUEUED_KERNELS} kernels); kernels per step from torch.profiler (GPU); intercept and slope over depth"
    )
    return out


def adamw_kernel_name(device) -> str:
    from companion.runs.parallel import adamw_kernel

    return ", ".join(adamw_kernel(torch.device(device).type))


# ------------------------------------------------------------------------------------------ collectives
def _collective_worker(rank: int, world: int, init_file: str, backend: str, conns: list) -> None:
    """One rank of ``CollectiveRanks``: each pass it is sent (budget_s, layout_budget_s, work) on its pipe, times
    the collectives (and the layout and work probes) with the other ranks, and answers (rank 0 with the rows, the
    others with None); None ends it."""
    import signal
    import warnings

    import torch.distributed as dist

    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the parent while it started the ranks
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    conn, parent = conns[rank], os.getppid()
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    while True:  # between passes a rank waits here, on its pipe alone
        while not conn.poll(1.0):
            # the calibration has gone (no signal says so off Linux): so does the rank
            if os.getppid() != parent:
                return
        asked = conn.recv()
        if asked is None:
            break
        got = _collective_pass(world, device, *asked)
        conn.send(got if rank == 0 else None)
    dist.destroy_process_group()


def _collective_pass(world: int, device, budget_s: float, layout_budget_s: float, work: bool = True) -> dict:
    import torch.distributed as dist

    rows = []
    per = budget_s / (3 * len(COLLECTIVE_BYTES))
    for nbytes in COLLECTIVE_BYTES:
        n = max(nbytes // 4 // world * world, world)
        full = torch.ones(n, device=device)
        shard = torch.ones(n // world, device=device)
        ops = {
            "all_reduce": (lambda: dist.all_reduce(full), 2 * (world - 1) / world * n * 4),
            "all_gather": (lambda: dist.all_gather_into_tensor(full, shard), (world - 1) / world * n * 4),
            "reduce_scatter": (lambda: dist.reduce_scatter_tensor(shard, full), (world - 1) / world * n * 4),
        }
        for name, (fn, wire) in ops.items():
            t, _ = _median_time_s(fn, device, per, distributed=True, warmups=1, min_reps=3, max_reps=50)
            rows.append({"op": name, "bytes": n * 4, "wire_bytes": wire, "time_s": t})
    layouts = (
        _layout_rows(layout_probe_layouts(world), device, layout_budget_s, distributed=True)
        if layout_budget_s > 0
        else []
    )
    work_rows = (
        _work_rows(layout_probe_layouts(world), device, distributed=True)
        if work and layout_budget_s > 0 and device.type == "cpu"
        else []
    )
    return {"collectives": rows, "layouts": layouts, "work": work_rows}


# The tiny BERT whose training step the layout benchmark times: at these shapes a step is almost all per-operator
# and per-hook cost, so the extra time of a second layer under a layout is the layout's per-layer overhead
LAYOUT_PROBE = {"hidden": 64, "heads": 4, "vocab": 128, "max_positions": 64, "seq_len": 16, "batch_size": 4}


def layout_probe_layouts(world: int) -> list:
    """The layouts of ``world`` ranks the layout benchmark times: TP, FSDP and (where it splits) 2-D."""
    from companion.runs.config import Layout

    out = [Layout(world, 1), Layout(1, world)]
    if world >= 4 and world % 2 == 0:
        out.append(Layout(2, world // 2))
    return out


# The same layouts at a size with real compute (a step of 40-250 ms on a 2-core node): where ranks share a node's
# cores, a layout's cost there is mostly extra CPU work that time slicing multiplies, and the tiny probe's waits
# (nothing to fill them) do not carry over; its CPU time over its wall time says how much of a step is which
WORK_PROBE = {"hidden": 128, "heads": 4, "vocab": 512, "max_positions": 128, "seq_len": 128, "batch_size": 8}
WORK_PROBE_LAYERS, WORK_PROBE_STEPS = 2, 4


def _probe_step(layout, mesh, layers: int, device, probe: dict = LAYOUT_PROBE):
    """One training step of the layout probe (``probe``: its shape) under ``layout`` (a closure), its model built
    and sharded."""
    from companion.runs import parallel
    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model

    q = probe
    torch.manual_seed(0)  # every rank builds the same weights and draws the same batch
    cfg = ModelConfig(
        layers=layers,
        hidden=q["hidden"],
        heads=q["heads"],
        vocab=q["vocab"],
        max_positions=q["max_positions"],
    )
    model = parallel.parallelize_bert(build_model(cfg).to(device), layout, mesh, "fp32")
    model.train()
    opt = parallel.make_optimizer(model, layout, 1e-4)
    local = q["batch_size"] // layout.dp
    ids = torch.randint(0, q["vocab"], (local, q["seq_len"]), device=device)
    labels = torch.zeros(local, dtype=torch.long, device=device)

    def step():
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, cfg.ffn_size


def _median_time_s(
    fn, device, budget_s: float, distributed: bool, warmups: int = 2, min_reps: int = 5, max_reps: int = 40
) -> tuple[float, int]:
    """Median time of one ``fn`` call (s) over repetitions filling ``budget_s`` (``min_reps`` to ``max_reps``),
    and the repetitions; across ranks every rank runs the same number (sized on the slowest first call), each
    call starts together, and the slowest rank's median is the result every rank returns."""
    import torch.distributed as dist

    def agree(x: float) -> float:
        if not distributed:
            return x
        v = torch.tensor([x])
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return float(v)

    for _ in range(warmups):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    reps = int(min(max_reps, max(min_reps, budget_s / max(agree(time.perf_counter() - t0), 1e-6))))
    times = []
    for _ in range(reps):
        if distributed:
            dist.barrier()
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return agree(float(np.median(times))), reps


# each layout row's median takes at least this many steps, whatever the budget: with 4 ranks on a 2-core node a
# step of the tiny probe varies by tens of per cent, and the per-unit overheads are differences of those medians
# (how many: docs/decisions.md)
LAYOUT_PROBE_MIN_REPS = 15


def _layout_rows(layouts, device, budget_s: float, distributed: bool) -> list[dict]:
    """Step time (s) of the tiny BERT with 1 and 2 encoder layers under each of ``layouts`` (``distributed``:
    on the ranks of an initialised process group): TP's DTensor dispatch and FSDP's hooks paid as a run pays them."""
    from companion.runs import parallel

    per = budget_s / (2 * len(layouts))
    if distributed:
        import torch.distributed as dist

        ranks = dist.get_world_size()
    else:
        ranks = 1
    rows = []
    for layout in layouts:
        mesh = parallel.build_mesh(layout, device.type)
        for layers in (1, 2):
            step, ffn = _probe_step(layout, mesh, layers, device)
            t, reps = _median_time_s(step, device, per, distributed, min_reps=LAYOUT_PROBE_MIN_REPS)
            rows.append(
                {
                    "tp": layout.tp,
                    "dp": layout.dp,
                    "ranks": ranks,
                    "layers": layers,
                    **LAYOUT_PROBE,
                    "ffn": ffn,
                    "threads_per_rank": 1,
                    "step_s": t,
                    "steps": reps,
                }
            )
    return rows


def _work_rows(layouts, device, distributed: bool, steps: int = WORK_PROBE_STEPS) -> list[dict]:
    """Per layout, the training-size probe's step time (the slowest rank's, s) and the CPU time of every rank's
    threads per step (s): their ratio is the cores the step keeps busy (CPU nodes only: a GPU's host time says
    nothing of its work)."""
    import torch.distributed as dist

    from companion.runs import parallel

    rows = []
    for layout in layouts:
        mesh = parallel.build_mesh(layout, device.type)
        step, ffn = _probe_step(layout, mesh, WORK_PROBE_LAYERS, device, WORK_PROBE)
        for _ in range(2):
            step()
        if distributed:
            dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        if distributed:
            dist.barrier()
        wall = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        cpu = torch.tensor([time.process_time() - c0], dtype=torch.float64)
        if distributed:  # the slowest rank's wall time, every rank's CPU time
            dist.all_reduce(wall, op=dist.ReduceOp.MAX)
            dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
        wall_s, cpu_s = float(wall) / steps, float(cpu) / steps
        rows.append(
            {
                "tp": layout.tp,
                "dp": layout.dp,
                "ranks": layout.tp * layout.dp,
                "layers": WORK_PROBE_LAYERS,
                **WORK_PROBE,
                "ffn": ffn,
                "threads_per_rank": 1,
                "step_s": wall_s,
                "cpu_s": cpu_s,
                "busy_cores": cpu_s / wall_s if wall_s > 0 else float("nan"),
                "steps": steps,
            }
        )
    return rows


def _one_thread(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with torch on one intra-op thread, as each rank of a layout runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)


def single_work_steps(device) -> list[dict]:
    """The training-size probe on one process with one thread."""
    from companion.runs.config import Layout

    return _one_thread(_work_rows, [Layout(1, 1)], device, distributed=False)


def single_probe_steps(device, budget_s: float) -> list[dict]:
    """The same probe on one process with one thread: the reference the layouts' overheads are taken from."""
    from companion.runs.config import Layout

    return _one_thread(_layout_rows, [Layout(1, 1)], device, budget_s, distributed=False)


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class CollectiveRanks:
    """``world`` ranks for the calibration's passes over the collectives and layout probes (``run``, one pass).
    Forked on CPU, they are started once and wait on their pipes between passes (no CPU, no collective open):
    the second pass skips their start and, under TP and FSDP, the probes' first-step sharding propagation
    (DTensor caches it per process); every timing still follows its warm-up steps. On CUDA (spawned) each pass
    starts its own ranks, which hold no GPU memory between passes."""

    def __init__(self, world: int, backend: str):
        self.world, self.backend = world, backend
        # fork is fast (no re-import), safe on CPU only
        self.method = "spawn" if backend == "nccl" else "fork"
        self._tmp = self._ctx = None
        self._conns: list = []

    def run(self, budget_s: float, layout_budget_s: float = 0.0, work: bool = True) -> dict:
        """One pass: the collectives fitted to alpha and beta; with ``layout_budget_s``, the layout probes on
        the same ranks (``layouts``: rows for ``layout_overheads``) and on CPU, with ``work``, the work probes."""
        if self._ctx is None:
            self._start(layout_budget_s > 0)
        try:
            for conn in self._conns:
                conn.send((budget_s, layout_budget_s, work))
            got = self._answers()
        except BaseException:
            self.close(stop=True)
            raise
        if self.method != "fork":
            self.close()
        rows = got["collectives"]
        alpha, beta = fit_alpha_beta(rows, self.world)
        return {
            "world_size": self.world,
            "backend": self.backend,
            "rows": rows,
            "alpha_s": alpha,
            "beta_bytes_per_s": beta,
            "model": "t = alpha (p - 1) + wire_bytes / beta, relative least squares, alpha and 1/beta >= 0",
            "layouts": got["layouts"],
            "work": got.get("work") or [],
        }

    def _start(self, probes: bool) -> None:
        import multiprocessing

        import torch.multiprocessing as mp

        self._tmp = tempfile.TemporaryDirectory()
        init = os.path.join(self._tmp.name, "init")
        if self.method == "fork" and probes:
            # what the layout probe's ranks import (BERT, DTensor's TP plan, FSDP), once here and inherited by
            # every forked rank: about 4.5 s of import each on a 2-core node otherwise
            from companion.runs.launch import preload

            preload()
        pipes = [multiprocessing.get_context(self.method).Pipe() for _ in range(self.world)]
        self._conns = [mine for mine, _ in pipes]
        # Ctrl-C and SIGTERM are held while the ranks start: one arriving between two forks would otherwise
        # leave the ranks already started waiting on their rendezvous, unknown to the cleanup (and holding the
        # command's output open); held, it arrives once every rank is known
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self._ctx = mp.start_processes(
                _collective_worker,
                args=(self.world, init, self.backend, [theirs for _, theirs in pipes]),
                nprocs=self.world,
                join=False,
                start_method=self.method,
            )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            self.close(stop=True)
            raise
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for _, theirs in pipes:
            theirs.close()  # the ranks hold theirs (a rank that fails shows in ``join``, not on its pipe)

    def _answers(self) -> dict:
        """Every rank's answer to the pass (rank 0's rows); a rank that fails raises, as ``join`` reports it."""
        pending, got = set(range(self.world)), None
        while pending:
            self._ctx.join(timeout=0.1)  # raises when a rank failed (a non-zero exit)
            for rank in sorted(pending):
                if self._conns[rank].poll():
                    answer = self._conns[rank].recv()
                    got = answer if rank == 0 else got
                    pending.discard(rank)
                elif not self._ctx.processes[rank].is_alive():
                    # it exited 0 without answering (a Ctrl-C of its own)
                    raise RuntimeError(
                        f"rank {rank} of the {self.world}-rank collectives benchmark ended before its pass did"
                    )
        return got

    def close(self, stop: bool = False) -> None:
        """End the ranks: asked to (their process group torn down), or with ``stop`` terminated (a pass that
        failed or was stopped: a rank waiting on a rendezvous or a collective would wait forever)."""
        procs = self._ctx.processes if self._ctx is not None else []
        if not stop:
            for conn in self._conns:
                try:
                    conn.send(None)
                except OSError:
                    stop = True
            for proc in procs:
                proc.join(30)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
        for conn in self._conns:
            conn.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        self._tmp = self._ctx = None
        self._conns = []


PASS_SPREAD_WARN = 1.5  # passes whose collective timings differ by more than this (median ratio) are reported


def _fastest(passes: list[list[dict]], key: tuple, field: str) -> list[dict]:
    """Per ``key``, the row of the pass with the smallest ``field`` (rows in the first pass's order)."""
    best: dict = {}
    for rows in passes:
        for r in rows:
            k = tuple(r[x] for x in key)
            if k not in best or r[field] < best[k][field]:
                best[k] = r
    return list(best.values())


def combine_passes(results: list[dict], world: int) -> dict:
    """One record from several ``CollectiveRanks`` passes over ``world`` ranks: every collective and
    layout-probe timing the fastest of its passes, alpha and beta fitted to those; each pass kept
    (``passes``), with ``pass_spread``, the median ratio of the slowest pass's timings to the fastest's
    (about 1 on a quiet node)."""
    rows = _fastest([r["rows"] for r in results], ("op", "bytes"), "time_s")
    layouts = _fastest([r["layouts"] for r in results], ("tp", "dp", "layers"), "step_s")
    work = _fastest([r.get("work") or [] for r in results], ("tp", "dp"), "step_s")
    fastest = {(r["op"], r["bytes"]): r["time_s"] for r in rows}
    spread = max(
        float(np.median([x["time_s"] / fastest[(x["op"], x["bytes"])] for x in r["rows"]])) for r in results
    )
    alpha, beta = fit_alpha_beta(rows, world)
    return {
        **results[0],
        "rows": rows,
        "layouts": layouts,
        "work": work,
        "alpha_s": alpha,
        "beta_bytes_per_s": beta,
        "combined": f"fastest of {len(results)} passes per timing",
        "pass_spread": spread,
        "passes": [
            {
                "rows": r["rows"],
                "layouts": r["layouts"],
                "alpha_s": r["alpha_s"],
                "beta_bytes_per_s": r["beta_bytes_per_s"],
            }
            for r in results
        ],
    }


def fit_alpha_beta(rows: list[dict], world: int) -> tuple[float, float]:
    """Latency per ring hop and bandwidth of t = alpha (p-1) + wire / beta (non-negative, relative errors)."""
    from scipy.optimize import nnls

    t = np.array([r["time_s"] for r in rows])
    A = np.column_stack([np.full(len(rows), world - 1.0), [r["wire_bytes"] for r in rows]]) / t[:, None]
    scale = A.max(axis=0)
    coef, _ = nnls(A / scale, np.ones(len(rows)))
    alpha, inv_beta = coef / scale
    return float(alpha), float(1 / inv_beta) if inv_beta > 0 else float("inf")


# ------------------------------------------------------------------------------------------------ power
def power_benchmark(device, dtype, seconds: float) -> dict:
    """Mean power idle and under GEMMs from the sweeps' meter (measured on NVML, estimated by CodeCarbon)."""
    from companion.runs.meters import make_meter

    try:
        meter = make_meter("auto", device.type, device.index or 0, True, "USA", sync=lambda: _sync(device))
    except Exception as exc:  # no meter here: say so instead of inventing a number
        return {"idle_w": None, "loaded_w": None, "measured": False, "method": f"no meter ({exc})"}
    n = 2048 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    seconds = max(seconds, meter.min_window_s)  # NVML: >= 3 s, the counter's resolution allows no less
    out = {}
    for name, work in (("idle", lambda: time.sleep(0.05)), ("loaded", lambda: a @ a)):
        meter.begin_window(name)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            work()
        _sync(device)
        m = meter.end_window(name)
        out[f"{name}_w"] = m.total_energy_j / m.time_s if m.total_energy_j is not None else None
    desc = meter.describe()
    meter.close()
    return {
        **out,
        "measured": bool(getattr(meter, "measured", False)),
        "method": desc.get("source", type(meter).__name__),
        "scope": getattr(meter, "scope", "device"),
        "window_s": seconds,
    }


# ------------------------------------------------------------------------------------------------ all
def thread_scaling_benchmark(budget_s: float) -> dict:
    """How much faster the node's cores together run a BERT-sized GEMM and a copy than one core does (CPU):
    speedup = threads ** exponent. Ranks with one thread each (torchrun's default) and a single process with
    every core then sit on one curve; the operator model reads the exponent (1: linear scaling)."""
    threads = torch.get_num_threads()
    a, b = torch.randn(1024, 256), torch.randn(256, 1024)
    src = torch.ones(16 * 2**20 // 4)
    dst = torch.zeros_like(src)
    per = budget_s / 4
    out = {"threads": threads}
    try:
        for label, fn in (("gemm", lambda: a @ b), ("copy", lambda: dst.copy_(src))):
            torch.set_num_threads(1)
            t1 = _best_time(fn, torch.device("cpu"), per)
            torch.set_num_threads(threads)
            tn = _best_time(fn, torch.device("cpu"), per)
            out[f"{label}_speedup"] = t1 / tn
    finally:
        torch.set_num_threads(threads)
    speedup = float(np.sqrt(out["gemm_speedup"] * out["copy_speedup"]))  # geometric mean of both
    out["exponent"] = float(np.clip(np.log(speedup) / np.log(threads), 0.0, 1.0)) if threads > 1 else 1.0
    out["method"] = (
        "1024x256x1024 GEMM and a 16 MiB copy at 1 thread and at every thread; exponent = log(speedup) / log(threads)"
    )
    return out


DEFAULT_BUDGET_S = (
    30.0  # best-of timings settle within a few repetitions; power windows keep the meter's minimum
)


def calibrate(
    device: str = "cpu",
    budget_s: float = DEFAULT_BUDGET_S,
    world_sizes=(2, 4),
    device_name: str | None = None,
    check=None,
    executions=(),
) -> dict:
    """Run every microbenchmark and return the calibration record. ``budget_s`` sizes the single-process
    benchmarks (0.9 of it timed; the power windows last at least the meter's minimum window) and the passes over
    the collectives; the layout probes' fixed repetitions (``LAYOUT_PROBE_MIN_REPS``), the work probes and the
    ranks' start run beyond it (a CPU calibration at the default 30 s takes about 60-75 s on 2 cores, its
    ``provenance.wall_s``). ``executions`` (compile, cudagraphs): also
    probe how each execution mode changes the step's host time and kernels (``execution_probe``; compiling
    takes tens of seconds per mode and depth, outside the budget)."""
    check_calibration_request(device, budget_s, device_name, executions)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no GPU is visible; calibrate on a GPU node or use --device cpu")
    dev = torch.device("cuda:0" if device == "cuda" else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        world_sizes = [p for p in world_sizes if p <= torch.cuda.device_count()]
    name = device_name or (device_tag(torch.cuda.get_device_name(0)) if device == "cuda" else "cpu")
    started = time.perf_counter()
    b = budget_s
    # the collectives, the layout probes and their single-process reference in two passes, one before and one
    # after the other benchmarks: each timing keeps the faster pass (combine_passes), so a busy spell of the
    # node during one pass (collectives ten times slower for a few seconds) cannot set the file's latency
    passes: dict = {p: [] for p in world_sizes}
    singles: list = []
    single_work: list = []
    ranks = {p: CollectiveRanks(p, backend) for p in world_sizes}

    def parallel_pass(last: bool):
        # the work probes, which only the calibration's table reads, in the last pass alone (on kept ranks their
        # first steps' sharding propagation is cached by then)
        for p in world_sizes:
            passes[p].append(ranks[p].run(0.04 * b, layout_budget_s=0.04 * b, work=last))
        singles.append(single_probe_steps(dev, 0.01 * b))
        if device == "cpu" and last:
            single_work.append(single_work_steps(dev))

    try:
        parallel_pass(last=False)
        rec = {
            "device_name": name,
            "device": device,
            "dtype": str(dtype).removeprefix("torch."),
            "gemm": gemm_benchmark(dev, dtype, 0.2 * b),
            "attention": attention_benchmark(dev, dtype, 0.1 * b),
            "bandwidth": bandwidth_benchmark(dev, 0.05 * b),
            "launch": launch_benchmark(dev, 0.02 * b),
            "elementwise": elementwise_benchmark(dev, dtype, 0.03 * b),
            "optimizer": optimizer_benchmark(dev, 0.03 * b),
            "thread_scaling": thread_scaling_benchmark(0.04 * b) if device == "cpu" else None,
            "op_counts": op_count_benchmark(dev, 0.04 * b),
            "power": power_benchmark(dev, dtype, 0.08 * b),
            "execution": execution_probe(dev, executions, 0.04 * b) if executions else None,
            "shared_node": device == "cpu",
            "overlap": device == "cuda",
        }
        rec["checks"] = (
            {}
            if check is None
            else self_check(
                rec,
                check,
                {
                    "gemm": lambda: gemm_benchmark(dev, dtype, 0.2 * b),
                    "launch": lambda: launch_benchmark(dev, 0.02 * b),
                    "attention": lambda: attention_benchmark(dev, dtype, 0.1 * b),
                    "bandwidth": lambda: bandwidth_benchmark(dev, 0.05 * b),
                    "elementwise": lambda: elementwise_benchmark(dev, dtype, 0.03 * b),
                    "optimizer": lambda: optimizer_benchmark(dev, 0.03 * b),
                    "op_counts": lambda: op_count_benchmark(dev, 0.04 * b),
                    "power": lambda: power_benchmark(dev, dtype, 0.08 * b),
                    **(
                        {"thread_scaling": lambda: thread_scaling_benchmark(0.04 * b)}
                        if device == "cpu"
                        else {}
                    ),
                },
            )
        )
        parallel_pass(last=True)
    finally:
        for pool in ranks.values():
            pool.close()
    rec["collectives"] = {str(p): combine_passes(passes[p], p) for p in world_sizes}
    if check is not None:
        # the collectives are known only now, from both passes (the faster of each): checked once, as they are
        problems = check(rec).get("collectives", [])
        rec["checks"]["collectives"] = {"attempts": 1, "problems": problems}
    rec["layout_probe_single"] = _fastest(singles, ("layers",), "step_s")
    if single_work:
        rec["work_probe_single"] = _fastest(single_work, ("tp", "dp"), "step_s")
    rec["warnings"] = [
        f"collectives over {p} ranks: one pass {c['pass_spread']:.3g}x slower than the other (the "
        "node was busy); the faster timings are kept, re-run calibrate on a quiet node to confirm them"
        for p, c in rec["collectives"].items()
        if c["pass_spread"] > PASS_SPREAD_WARN
    ]
    rec["warnings"] += [
        f"{q} failed its check{' twice' if c['attempts'] > 1 else ''} ({'; '.join(c['problems'])}): flagged, every reader of the file replaces "
        "it (the datasheet's value on a GPU; on a CPU, a roof measured then, the copy bandwidth or the model's "
        "default, as the reader's warning says)"
        for q, c in rec["checks"].items()
        if c["problems"]
    ]
    from companion.runs.provenance import cpu_model

    rec["format"] = CALIBRATION_FORMAT
    rec["provenance"] = {
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - started,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "budget_s": budget_s,
    }
    return rec


def self_check(rec: dict, check, retime: dict) -> dict:
    """Check the record's quantities with ``check`` (``companion.energy.calibration.check_calibration``); a quantity that fails
    is timed again (``retime``: {quantity: benchmark}) and checked again. Returns {quantity: {"attempts",
    "problems"}} for every quantity checked (``problems`` empty where it passed); a quantity failing twice
    stays flagged, and every reader of the file replaces it."""
    first = check(rec)
    out = {q: {"attempts": 1, "problems": []} for q in retime}
    for quantity in first:
        # a quantity without a benchmark in ``retime`` is checked once more as it is (the collectives are checked
        # apart, once both passes are in)
        out[quantity] = {"attempts": 2 if quantity in retime else 1, "problems": []}
        if quantity in retime:
            rec[quantity] = retime[quantity]()
    again = check(rec) if first else {}
    for quantity, problems in again.items():
        out.setdefault(quantity, {"attempts": 1})["problems"] = problems
    return out


def device_tag(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA H100 PCIe' -> 'H100-PCIe': the records' own tag
    (``provenance.short_gpu_name``), so a calibration is filed under its board's name."""
    from companion.runs.provenance import short_gpu_name

    return short_gpu_name(gpu_name)


def write_calibration(rec: dict, out: Path) -> Path:
    from companion.runs.records import write_json

    return write_json(Path(out), rec)


def calibration_summary(rec: dict) -> list[dict]:
    """What a calibration record measured, one row per quantity: {quantity, value, unit, how, shown} (the book's
    table of the device's calibration). Power is labelled measured or estimated as its meter was; quantities
    a record does not hold (an older file, a GPU without thread scaling) are left out."""
    rows = []

    def add(quantity, value, unit, how):
        if value is not None:
            rows.append(
                {
                    "quantity": quantity,
                    "value": float(value),
                    "unit": unit,
                    "how": how,
                    "shown": shown_value(float(value), unit),
                }
            )

    gemm = rec.get("gemm") or {}
    add("GEMM roof (fitted peak)", gemm.get("peak_flops_per_s"), "FLOP/s", gemm.get("model", ""))
    add(
        "GEMM half-speed dimension k0",
        gemm.get("half_dim"),
        "elements",
        "the same fit: the matrix dimension at which a GEMM reaches half the roof",
    )
    if gemm.get("shapes"):
        best = max(gemm["shapes"], key=lambda r: r["flops_per_s"])
        add(
            "GEMM best measured shape",
            best["flops_per_s"],
            "FLOP/s",
            f"{best['m']}x{best['n']}x{best['k']} of {len(gemm['shapes'])} BERT shapes, best of repeated timings",
        )
    for kernel in sorted({r["kernel"] for r in rec.get("attention") or []}):
        rates = [r["flops_per_s"] for r in rec["attention"] if r["kernel"] == kernel]
        add(
            f"attention, {kernel} kernel (median)",
            float(np.median(rates)),
            "FLOP/s",
            f"forward + backward over {len(rates)} shapes"
            + (" with dropout" if kernel == "math" else "")
            + "; the operator model reads a cost per score element fitted to these timings",
        )
    bw = rec.get("bandwidth") or {}
    add("memory bandwidth", bw.get("bandwidth_bytes_per_s"), "bytes/s", bw.get("method", ""))
    for key, label in (("elementwise", "element-wise and norm traffic"), ("optimizer", "optimizer traffic")):
        part = rec.get(key) or {}
        add(label, part.get("bytes_per_s"), "bytes/s", part.get("method", ""))
    ops = rec.get("op_counts") or {}
    add("cost per operator in a step", ops.get("per_op_s"), "s", ops.get("per_op_method", ""))
    add("operators per layer", ops.get("per_layer"), "", ops.get("method", ""))
    add("operators per step (outside layers)", ops.get("per_step"), "", ops.get("method", ""))
    launch = rec.get("launch") or {}
    add(
        "launch of one tiny operator",
        launch.get("launch_s"),
        "s",
        launch.get("method", "")
        + (
            "; a check: the operator model reads the cost per operator in a step"
            if ops.get("per_op_s")
            else ""
        ),
    )
    ts = rec.get("thread_scaling") or {}
    add("thread-scaling exponent", ts.get("exponent"), "", ts.get("method", ""))
    for p, c in sorted((rec.get("collectives") or {}).items(), key=lambda kv: int(kv[0])):
        how = f"{c.get('backend', '')}, {c.get('model', '')}"
        add(f"collective latency alpha, p = {p}", c.get("alpha_s"), "s", how)
        add(f"collective bandwidth beta, p = {p}", c.get("beta_bytes_per_s"), "bytes/s", how)
        add(
            f"spread between the two passes, p = {p}",
            c.get("pass_spread"),
            "x",
            f"median ratio of the slower to the faster pass; {c.get('combined', 'one pass')}",
        )
    single = (rec.get("work_probe_single") or [{}])[0].get("step_s")
    size = (
        f"L{WORK_PROBE_LAYERS}-h{WORK_PROBE['hidden']} at sequence length {WORK_PROBE['seq_len']}, "
        f"batch {WORK_PROBE['batch_size']}"
    )
    for p, c in sorted((rec.get("collectives") or {}).items(), key=lambda kv: int(kv[0])):
        for r in c.get("work") or []:
            name = f"tp{r['tp']}-dp{r['dp']}"
            add(
                f"{name} step / one process's",
                r["step_s"] / single if single else None,
                "x",
                f"training-size probe: {size}, one thread per rank, the slowest rank's time",
            )
            add(
                f"{name} busy cores",
                r.get("busy_cores"),
                "cores",
                "training-size probe: the CPU time of every rank's threads over the step's wall time",
            )
    power = rec.get("power") or {}
    label = "measured" if power.get("measured") else "estimated"
    for key, name in (("idle_w", "idle power"), ("loaded_w", "loaded power (GEMMs)")):
        add(
            f"{name}, {label}",
            power.get(key),
            "W",
            f"{power.get('method', '')}, {power.get('scope', 'device')}",
        )
    return rows


def shown_value(value: float, unit: str) -> str:
    """A value as a reader reads it: seconds in µs or ms (0.0002985 s -> '298.5 µs'), the rest to four figures."""
    if unit == "s" and 0 < abs(value) < 1:
        value, unit = (value * 1e6, "µs") if abs(value) < 1e-3 else (value * 1e3, "ms")
    return f"{value:.4g} {unit}".strip()


def calibration_facts(rec: dict) -> dict:
    """What the book says of a calibration record, as text: when it ran (``measured_at``), how long (``wall_s``),
    how far its passes of the collectives disagreed at most (``spread``; a file from before two passes says so) and
    its warnings (``warnings``: 'none' when it reported none)."""
    from datetime import datetime, timezone

    prov = rec.get("provenance") or {}
    spreads = [c["pass_spread"] for c in (rec.get("collectives") or {}).values() if "pass_spread" in c]
    wall = prov.get("wall_s")
    warnings = rec.get("warnings") or []
    when = str(prov.get("measured_at", "an unrecorded date"))
    try:  # a reader's date and time in UTC, not an ISO stamp
        when = datetime.fromisoformat(when).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        pass
    return {
        "measured_at": when,
        "wall_s": f"{wall:.0f}" if isinstance(wall, (int, float)) else "?",
        "spread": f"{max(spreads):.2f}x" if spreads else "- (timed in one pass)",
        "warnings": " ".join(w[0].upper() + w[1:] + "." for w in warnings) if warnings else "none",
    }
