"""The per-rank runner: fine-tune, measure, write one record per configuration.

Usable alone or under torchrun, the same code on CPU (gloo) and CUDA (nccl)::

    python -m companion.runs.train --layers 2 --hidden 128 --heads 4 --seq-len 128 --batch-size 8
    torchrun --nproc-per-node 4 -m companion.runs.train --tp 2 --dp 2 --layers 2 --hidden 128
    torchrun --nproc-per-node 4 -m companion.runs.train --plan build/plans/cpu-ws4.json --out data/runs/cpu

One launch loops over every configuration of its plan (start-up dominates small runs). Each configuration:
build the model (same seed on every rank) -> apply the layout -> warm up -> measure windows until the
95 % CI of the per-step time (and energy) is within target or a cap is hit -> rank 0 writes the record.
An exception in a run becomes a ``failed`` record and the loop goes on, unless it fails every run alike (a
meter or package missing): then the launch stops with one ``error:`` line and writes nothing.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import resource
import signal
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from companion.runs import hostspeed, parallel, stats
from companion.errors import ConfigError, Terminated, await_main_rank, raise_interrupted, raise_if_stopped
from companion.runs.config import RunConfig
from companion.runs.data import collate, make_task, shard, token_counts
from companion.runs.meters import Meter, MeterError, make_meter
from companion.runs.optional import MissingPackage
from companion.runs.model import build_model, parameter_count
from companion.runs.provenance import neutralise_meter_environment, utc_now
from companion.runs.run_args import config_from_args, run_parser
from companion.runs.records import (
    FolderLock,
    RecordExists,
    keep_duplicate,
    check_writable,
    existing_status,
    make_record,
    record_path,
    resume_status,
    set_aside_failed,
    write_record,
)

POOL_BATCHES = 16  # distinct pre-collated batches cycled through; host data prep stays out of the step
# individually timed steps after the warm-up that set the window length. One: a window's length needs no
# precision, and the first window then opens on the third step, which runs within a few per cent of the rest (the
# record keeps the probe time, time.probe_step_s, so this stays checkable run by run; docs/decisions.md)
PROBE_STEPS = 1


class Diverged(RuntimeError):
    """The loss became NaN or infinite: the run is recorded as failed (reason 'diverged'), never as ok."""


# -------------------------------------------------------------------------------------------- one run
class RunContext:
    """What a launch shares between runs: rank info, meshes by layout, the meter, static provenance."""

    def __init__(self, env: parallel.DistEnv, meter: Meter, device_type: str):
        self.env, self.meter, self.device_type = env, meter, device_type
        self._meshes: dict = {}
        self.sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)

    def mesh(self, layout):
        if layout not in self._meshes:
            self._meshes[layout] = parallel.build_mesh(layout, self.device_type)
        return self._meshes[layout]


def run_one(cfg: RunConfig, ctx: RunContext) -> dict:
    """Fine-tune ``cfg`` under the protocol; return the record's measured sections (all ranks agree)."""
    env, meter, proto = ctx.env, ctx.meter, cfg.protocol
    device = env.device
    torch.manual_seed(cfg.seed)
    peak_reset = _reset_peak_memory(device)

    model = build_model(cfg.model).to(device)
    n_params = parameter_count(model)
    mesh = ctx.mesh(cfg.layout)
    if cfg.engine == "native":  # Accelerate wraps the plain model itself (accelerate_step)
        model = parallel.parallelize_bert(model, cfg.layout, mesh, cfg.precision)
    model.train()
    optimizer = parallel.make_optimizer(model, cfg.layout, cfg.lr)
    dp_rank, dp = parallel.dp_coordinates(cfg.layout, mesh)

    task = make_task(cfg.data, cfg.model.vocab, cfg.model.num_labels, cfg.seed, cfg.model.checkpoint)
    pad_id = getattr(task, "pad_id", 0)
    max_len = cfg.data.seq_len
    pool, pool_tokens = [], []
    for i in range(POOL_BATCHES):
        examples = task.global_batch(i)
        pool_tokens.append(token_counts(examples, dp, cfg.data.pad_multiple, max_len))
        batch = collate(shard(examples, dp_rank, dp), pad_id, cfg.data.pad_multiple, max_len)
        tensors = step_inputs(batch.tensors, cfg.execution)
        pool.append({k: v.to(device, non_blocking=True) for k, v in tensors.items()})

    # bf16: autocast in every layout, so TP, FSDP and one device compute the same arithmetic (bf16 matmuls,
    # fp32 softmax/layer norm); FSDP's mixed-precision policy adds bf16 all-gathers and fp32 reductions.
    if cfg.engine == "accelerate":
        # Accelerate enters its own autocast around the (compiled) model, as its users run it
        step, engine = accelerate_step(compiled(model, cfg.execution), optimizer, cfg)
    else:
        step = make_train_step(
            compiled(model, cfg.execution, bf16_autocast=cfg.precision == "bf16"),
            optimizer,
            bf16_autocast=cfg.precision == "bf16",
            graphs=cfg.execution == "cudagraphs",
        )
        engine = {"name": "native"}
    losses: list[torch.Tensor] = []
    step_index = [0]

    def train_step() -> None:
        raise_if_stopped()  # a stop some library swallowed (the run would go on to its time cap)
        batch = pool[step_index[0] % POOL_BATCHES]
        step_index[0] += 1
        losses.append(step(batch))  # stays on device: no host sync inside the loop

    # ---- warm-up (at least warmup_steps and warmup_s: a GPU needs seconds to reach its steady clock and
    # temperature), then calibrate the window length from a few steady steps
    # the first step pays a compiled execution's compilation (and a CUDA graph's capture): timed apart, never
    # inside a measured window
    first_step_s = None
    for i in range(max(proto.warmup_steps, 0 if cfg.execution == "eager" else 1)):
        t_first = time.perf_counter()
        train_step()
        if i == 0:
            ctx.sync()
            first_step_s = _agree_max(time.perf_counter() - t_first, device)
            if cfg.execution != "eager":
                check_compiled(cfg.execution)
    ctx.sync()
    if proto.warmup_s > 0:
        t_warm = time.perf_counter()
        while _agree_max(time.perf_counter() - t_warm, device) < proto.warmup_s:  # ranks stop together
            train_step()
            ctx.sync()
    # the host's speed before the windows (runs.hostspeed), ahead of the probe steps: its change of thread count
    # and back costs the next operator a thread pool's restart, which then falls in a probe step, not a window
    host_before_s = _host_speed(env, device)
    # the median of the probe's individually timed steps (``PROBE_STEPS``): a probe slowed by the machine (a
    # busy core, a page fault) gives the run shorter windows, not a biased time (each window times itself)
    probe_s = []
    for _ in range(PROBE_STEPS):
        t0 = time.perf_counter()
        train_step()
        ctx.sync()
        probe_s.append(time.perf_counter() - t0)
    step_estimate_s = _agree_max(statistics.median(probe_s), device)
    probe_step_s = [_agree_max(x, device) for x in probe_s]
    unmeasured_steps = step_index[0]
    window_steps = proto.window_steps or window_steps_for(proto, meter.min_window_s, step_estimate_s)

    # ---- measured windows
    w = measure_windows(
        meter,
        train_step,
        proto,
        window_steps,
        agree=lambda m, n: _agree_window(m, n, device),
        all_ranks=lambda flag: _agree_max(0.0 if flag else 1.0, device) == 0.0,
    )
    host_after_s = _host_speed(env, device)
    own, win_time, win_energy, measured_s, stop_reason = (
        w.own,
        w.time_per_step_s,
        w.energy_per_step_j,
        w.measured_s,
        w.stop_reason,
    )

    # ---- losses (global mean over data shards), memory, per-rank energy
    curve = torch.stack(losses).float()
    parallel.all_reduce_(curve)
    curve = (curve / env.world_size).tolist()
    bad = [i for i, x in enumerate(curve) if not math.isfinite(x)]
    if bad:  # every rank sees the same reduced curve, so all ranks raise together
        raise Diverged(
            f"diverged: the loss is {curve[bad[0]]} from step {bad[0]} on (lr={cfg.lr}); "
            "lower lr or check the data"
        )
    peak = _peak_memory(device, peak_reset)
    per_rank = parallel.all_gather_object(
        {
            "rank": env.rank,
            "measurements": [x.to_json() for x in own],
            "peak_memory": peak,
            "meter": meter.describe(),
        }
    )
    first = unmeasured_steps + w.steps_before  # this rank's measured span (rank 0's is the record's)
    measured_tokens = [pool_tokens[i % POOL_BATCHES] for i in range(first, first + sum(w.steps_per_window))]
    body = _summarize(
        cfg,
        n_params,
        window_steps,
        first,
        win_time,
        win_energy,
        measured_s,
        stop_reason,
        curve,
        measured_tokens,
        per_rank,
    )
    if meter.counter_ticks:  # windows closed on energy-counter updates: their step counts vary a little
        body["time"]["per_window_steps"] = w.steps_per_window
        body["time"]["windows_close_on"] = "counter update"
    body["time"]["min_window_s"] = max(proto.min_window_s, meter.min_window_s)
    body["time"]["probe_step_s"] = probe_step_s  # the timed steps before the first window (slowest rank)
    if host_before_s is not None:  # the host's speed just before and just after the windows (runs.hostspeed)
        body["host_speed"] = {"before_s": host_before_s, "after_s": host_after_s, **hostspeed.describe()}
    body["engine"] = engine
    masked = sum("attention_mask" in b for b in pool)
    body["execution"] = {
        "mode": cfg.execution,
        "first_step_s": first_step_s,
        # what the steps were fed (step_inputs): a compiled graph traced without a mask runs no fused attention
        "attention_mask": "every batch" if masked == len(pool) else "padded batches" if masked else "none",
        **compile_settings(cfg.execution),
    }
    body["precision_policy"] = parallel.precision_policy(cfg.layout, cfg.precision)
    body["optimizer"] = parallel.describe_optimizer(optimizer)
    telemetry = {str(r["rank"]): [x.get("telemetry") or {} for x in r["measurements"]] for r in per_rank}
    if any(any(w) for w in telemetry.values()):
        body["telemetry"] = telemetry  # per rank, per window: GPU temperature, SM clock, power limit
    return body


@dataclass
class Windows:
    """What the measured windows gave: this rank's measurements, and per window the agreed time per step
    (s, slowest rank) and energy per step (J, summed over metering ranks)."""

    own: list
    time_per_step_s: list[float]
    energy_per_step_j: list[float]
    measured_s: float
    stop_reason: str
    steps_per_window: list[int] = field(default_factory=list)  # this rank's steps in each window
    steps_before: int = 0  # steps this rank ran before its first window (aligning it on a counter update)
    steps_total: int = 0  # steps run in all (every rank runs the same)


# how far past ``max_time_s`` a run may measure to reach ``min_windows`` windows (steps slower than the cap itself)
MAX_TIME_OVERRUN = 4.0


def measure_windows(
    meter: Meter, train_step, proto, window_steps: int, agree=None, all_ranks=None
) -> Windows:
    """The stopping rule: windows of ``window_steps`` steps until the 95 % CI of the per-step time (and
    energy, where metered) is within ``target_rel_ci`` after at least ``min_windows``, or a cap is hit: the
    measured steps' (``max_steps``), or the measured time's (``max_time_s``) once ``min_windows`` windows are
    in, or ``MAX_TIME_OVERRUN`` times it whatever the windows.

    On a meter whose energy counter advances in ticks (``meter.counter_ticks``: NVML, every ~20-100 ms),
    windows close on a counter update: the first window begins right after a step in which the counter
    changed, and once a window has run its ``window_steps`` steps, steps go on one at a time until the
    counter changes again; the window ends there and the next begins. Each window's energy then spans whole
    counter intervals, so the edges carry at most one step's misalignment instead of up to one tick's
    energy (benchmarks/adaptive_vs_fixed.py gives the effect on the steps needed). Each rank closes on its
    own counter; all ranks step until every one has closed (``all_ranks(flag) -> bool``: True when the flag
    is true on every rank), so ranks may count a step or two more or less in a window. Other meters (the
    CPU's CodeCarbon, none) use fixed windows of ``window_steps``.

    ``agree(measurement, steps) -> (slowest time per step s, energy per step summed over ranks J, metering
    ranks, slowest window time s)`` combines ranks (identity for one process). Pure loop: the GPU dry run
    drives it with a replayed NVML counter.
    """
    agree = agree or (
        lambda m, n: (m.time_s / n, (m.total_energy_j or 0.0) / n, 0 if m.energy_j is None else 1, m.time_s)
    )
    all_ranks = all_ranks or (lambda flag: flag)
    aligned = bool(getattr(meter, "counter_ticks", False))
    own, win_time, win_energy, win_steps = [], [], [], []
    state = {"open": False, "in_window": 0, "before": 0, "total": 0}

    def step() -> None:
        train_step()
        state["total"] += 1
        if state["open"]:
            state["in_window"] += 1
        elif not own:
            state["before"] += 1

    def begin(k: int) -> None:
        meter.begin_window(f"w{k}")
        state["open"], state["in_window"] = True, 0

    def end(k: int):
        m = meter.end_window(f"w{k}")
        state["open"] = False
        return m, state["in_window"]

    def until_update(on_update, last: float | None) -> None:
        """Step until this rank's counter differs from ``last`` (then ``on_update()``, right after the step
        in which it changed) and every rank's does; a counter still unchanged after another window's worth
        of steps (>= 3 s of work) is stuck, and that is an error, never a window of zero energy."""
        done, waited = False, 0
        while True:
            if not done and meter.poll_counter() != last:
                on_update()
                done = True
            if all_ranks(done):
                return
            if waited > window_steps:  # the same count and the same verdict on every rank: all raise together
                raise MeterError(
                    f"the {meter.source} energy counter did not change during {waited} steps (at "
                    f"least a window, {window_steps} steps); it is not advancing on this device: "
                    "use meter='none' or meter='codecarbon'"
                )
            step()
            waited += 1

    measured_s, k, stop_reason = 0.0, 0, None
    if aligned:
        until_update(lambda: begin(0), meter.poll_counter())
    else:
        begin(0)
    while stop_reason is None:
        for _ in range(window_steps - 1 if aligned else window_steps):
            step()
        if aligned:
            closed = {}

            def close_and_reopen(k=k, closed=closed):
                closed["m"], closed["n"] = end(k)
                begin(k + 1)

            last = meter.poll_counter()  # before the window's last step: an update in that step closes it
            step()
            until_update(close_and_reopen, last)
            m, n = closed["m"], closed["n"]
        else:
            m, n = end(k)
        own.append(m)
        win_steps.append(n)
        t_step, e_step, n_metered, t_window = agree(m, n)
        win_time.append(t_step)
        if n_metered:
            win_energy.append(e_step)
        measured_s += t_window
        k += 1
        converged = (
            k >= proto.min_windows
            and stats.relative_ci(win_time) <= proto.target_rel_ci
            and (not win_energy or stats.relative_ci(win_energy) <= proto.target_rel_ci)
        )
        if converged:
            stop_reason = "converged"
        elif state["total"] + window_steps > proto.max_steps:  # the same count on every rank
            stop_reason = "max_steps"
        elif measured_s >= proto.max_time_s and (
            k >= proto.min_windows or measured_s >= MAX_TIME_OVERRUN * proto.max_time_s
        ):
            # the time cap waits for the minimum of windows: stopped earlier, a configuration whose steps
            # are long for the cap kept two or three windows, whose CI the step-time filter then always
            # rejected, so the slowest configurations were the ones never scored
            stop_reason = "max_time"
        if stop_reason is not None:
            if aligned:
                meter.discard_window(f"w{k}")
        elif not aligned:
            begin(k)
    return Windows(
        own, win_time, win_energy, measured_s, stop_reason, win_steps, state["before"], state["total"]
    )


def window_steps_for(proto, meter_min_window_s: float, step_estimate_s: float) -> int:
    """Steps per window so that a window lasts at least ``min_window_s`` (and the meter's own minimum, 3 s
    on NVML) at the calibrated step time (s), with 5 % to spare for step-time jitter; at most ``max_steps``."""
    min_window_s = max(proto.min_window_s, meter_min_window_s) * 1.05
    return min(max(1, math.ceil(min_window_s / max(step_estimate_s, 1e-9) - 1e-9)), proto.max_steps)


def without_full_mask(tensors: dict) -> dict:
    """The batch without its attention mask when nothing is padded.

    An all-ones mask changes no result but makes transformers check ``mask.all()`` on the host in every
    forward, a device synchronisation per step; without a mask the model attends to every token anyway.
    """
    mask = tensors.get("attention_mask")
    if mask is not None and bool(mask.all()):
        return {k: v for k, v in tensors.items() if k != "attention_mask"}
    return tensors


def step_inputs(tensors: dict, execution: str) -> dict:
    """What a step of ``execution`` feeds the model. Eager: the batch without an all-ones mask
    (:func:`without_full_mask`). Compiled: with a mask always (all ones where the batch has none). Traced without
    a mask, transformers 5.17 builds one inside the graph that no fused SDPA kernel accepts, and the compiled
    attention falls back to the math path in fp32 (BERT-base s512 b32 on an H200: cuDNN's flash kernel with the
    mask, none without); a compiled graph never checks the mask on the host, so keeping it costs no sync."""
    if execution == "eager":
        return without_full_mask(tensors)
    if "attention_mask" in tensors:
        return tensors
    ids = tensors["input_ids"]
    return {**tensors, "attention_mask": torch.ones(ids.shape, dtype=torch.long, device=ids.device)}


def make_train_step(model, optimizer, bf16_autocast: bool, graphs: bool = False, backward=None):
    """``step(batch) -> detached loss``: forward (under bf16 autocast if asked), backward, optimizer step. With
    ``graphs`` (a model compiled for CUDA graphs), each step begins a new graph replay and the loss is copied out
    of the graph's memory, which the next replay overwrites. ``backward(loss)``: another engine's backward
    (Accelerate's) in place of ``loss.backward()``."""

    # a model compiled with its autocast inside (``compiled(..., bf16_autocast=True)``) enters it itself
    outer_autocast = bf16_autocast and not isinstance(getattr(model, "_orig_mod", None), AutocastForward)

    def step(batch: dict) -> torch.Tensor:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        ctx = (
            torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16)
            if outer_autocast
            else contextlib.nullcontext()
        )
        with ctx:
            loss = model(**batch).loss
        if backward is None:
            loss.backward()
        else:
            backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().clone() if graphs else loss.detach()

    return step


def accelerate_step(model, optimizer, cfg: RunConfig):
    """The step as HF Accelerate drives it: ``Accelerator.prepare`` on the plain model and its optimizer (bf16
    mixed precision as the run asks, the model's forward under its autocast), ``accelerator.backward``, the same
    optimizer and data as the native step. On several ranks (tp1-dpN, the process group already up) Accelerate
    wraps the model for data parallelism: its FSDP2 plugin, each encoder layer a unit as in the native plan, on
    GPUs; DDP on CPUs, where Accelerate runs no FSDP (the record says which). Each rank takes its shard of the
    batch as in the native engine. Returns (step, what the record says about the engine)."""
    import accelerate
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    # Accelerate keeps one state per process, set by its first Accelerator (the mixed precision among it), and
    # refuses an Accelerator of another precision after it. A launch runs its plan's runs one after the other (a
    # sweep's, over precisions): each Accelerate run starts from a fresh state. PartialState too: the first
    # Accelerator writes its distributed type there (FSDP on GPUs), and a state rebuilt over that one would skip
    # setting its FSDP plugin; rebuilt, PartialState finds the launch's process group up and keeps it
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    kwargs = {}
    if cfg.layout.dp > 1 and cfg.device == "cuda":
        from accelerate import FullyShardedDataParallelPlugin

        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["BertLayer"],
            reshard_after_forward=True,
        )
    accelerator = Accelerator(
        cpu=cfg.device == "cpu",
        mixed_precision="bf16" if cfg.precision == "bf16" else "no",
        device_placement=False,  # the runner placed the model and the batches already
        **kwargs,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    # the prepared model's forward runs under Accelerate's own autocast: no second one around it
    step = make_train_step(
        model,
        optimizer,
        bf16_autocast=False,
        graphs=cfg.execution == "cudagraphs",
        backward=accelerator.backward,
    )
    return step, {
        "name": "accelerate",
        "version": accelerate.__version__,
        "distributed_type": str(accelerator.distributed_type).split(".")[-1],
        "data_parallel": None if cfg.layout.dp == 1 else ("fsdp2" if "fsdp_plugin" in kwargs else "ddp"),
        "mixed_precision": accelerator.mixed_precision,
    }


COMPILE_MODES = {"compile": "default", "cudagraphs": "reduce-overhead"}  # execution -> torch.compile mode


def compile_settings(execution: str) -> dict:
    """What a record says about how its step ran: torch.compile's mode and backend, where compiled."""
    if execution == "eager":
        return {}
    return {"torch_compile_mode": COMPILE_MODES[execution], "backend": "inductor"}


class AutocastForward(torch.nn.Module):
    """``model`` whose forward runs under bf16 autocast, so that a compiled graph holds the autocast itself."""

    def __init__(self, model, device_type: str):
        super().__init__()
        self.model, self.device_type = model, device_type

    def forward(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.model(*args, **kwargs)


def compiled(model, execution: str, bf16_autocast: bool = False):
    """``model`` for ``execution``: itself (eager), or wrapped by ``torch.compile`` (the same parameters, so the
    optimizer built on the model updates the compiled module's weights). The forward and, through AOTAutograd,
    the backward are compiled; the optimizer step stays eager. ``bf16_autocast``: the step runs under bf16
    autocast, entered inside the compiled forward (:class:`AutocastForward`; :func:`make_train_step` then enters
    none around it). Entered around the compiled module instead, the same kernels took 43.1 ms a step against
    31.2 ms (BERT-base s512 b32 on an H200; ``benchmarks/compiled_sdpa.py``)."""
    if execution == "eager":
        return model
    # a fresh compiler state per run: runs of a sweep share a process, and after torch._dynamo's recompile
    # limit (8 per code object) a further model would silently run eager under a compiled label
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters["stats"].clear()  # what ``check_compiled`` reads: this run's graphs only
    if bf16_autocast:
        model = AutocastForward(model, next(model.parameters()).device.type)
    return torch.compile(model, mode=COMPILE_MODES[execution])


def check_compiled(execution: str) -> None:
    """After a compiled run's first step: raise unless torch.compile produced a graph (a step that fell back to
    eager would be measured under the wrong label)."""
    from torch._dynamo.utils import counters

    if not counters["stats"]["unique_graphs"]:
        raise RuntimeError(
            f"execution={execution!r}: torch.compile compiled no graph in the first step (it fell back to "
            "eager), so the run would measure eager under a compiled label; run it in a fresh process "
            "(companion run) or with execution: eager"
        )


def _host_speed(env, device) -> float | None:
    """The reference workload's time (s, ``runs.hostspeed``) beside a one-rank run; None for a run of several
    ranks, which it does not track. On a GPU it times the host that issues the kernels, which sets a host-bound
    step's time; the calibration's host probe is timed beside the same workload (``op_count_benchmark``), so the
    two can be compared. The analysis corrects CPU runs by it only (``tables.host_corrected``)."""
    if env.world_size > 1:
        return None
    return hostspeed.reference_s()


def _agree_max(value: float, device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    parallel.all_reduce_(t, op=torch.distributed.ReduceOp.MAX)
    return float(t.item())


def _agree_window(m, steps: int, device) -> tuple[float, float, int, float]:
    """(slowest rank's time per step s, energy per step summed over metering ranks J, number of metering
    ranks, slowest rank's window time s) of a window in which this rank ran ``steps`` steps."""
    t = torch.tensor([m.time_s / steps, m.time_s], dtype=torch.float64, device=device)
    parallel.all_reduce_(t, op=torch.distributed.ReduceOp.MAX)
    e = torch.tensor(
        [(m.total_energy_j or 0.0) / steps, 0.0 if m.energy_j is None else 1.0],
        dtype=torch.float64,
        device=device,
    )
    parallel.all_reduce_(e)
    return float(t[0].item()), float(e[0].item()), int(e[1].item()), float(t[1].item())


def _reset_peak_memory(device) -> bool:
    """Start this run's peak-memory count: the CUDA allocator's peak, or on Linux the process's peak RSS (VmHWM,
    reset by writing 5 to /proc/self/clear_refs to the RSS of the moment), so a run later in a launch does not
    inherit an earlier run's peak; the heap the process kept from earlier runs still counts (glibc returns little
    of it). False where the process's peak cannot be reset (it then counts from the launch's start)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _vm_hwm_bytes() is not None


def _vm_hwm_bytes() -> int | None:
    """This process's peak RSS since its last reset (VmHWM in /proc/self/status), or None where unreadable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _peak_memory(device, reset: bool) -> dict:
    """The run's peak memory on this rank (``reset``: whether ``_reset_peak_memory`` started a count for it)."""
    if device.type == "cuda":
        return {
            "bytes": int(torch.cuda.max_memory_allocated(device)),
            "source": "torch.cuda.max_memory_allocated",
        }
    # a rank forked after the imports (companion.runs.launch) counts only the library pages it touches: about
    # 14 % less than a rank started as a new interpreter over a launch (benchmarks/launcher_start.py)
    forked = ", rank forked after the imports" if parallel.forked_rank() else ""
    hwm = _vm_hwm_bytes() if reset else None
    if hwm is not None:
        return {
            "bytes": hwm,
            "source": "process peak RSS from the run's start (VmHWM reset then; heap kept from earlier runs "
            f"included{forked})",
        }
    # ru_maxrss is in KiB on Linux; it is the process's lifetime peak, not this run's
    return {
        "bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
        "source": f"process max RSS (lifetime of the launch{forked})",
    }


def attention_kernel(cfg: RunConfig) -> str:
    """'fused' or 'math': whether the attention kernel eager runs materialises the scores. Eager attention always
    does; SDPA on CPU falls back to the math kernel when training with dropout (its CPU flash kernel has no
    dropout). A compiled step on CUDA keeps the fused kernel where it is fed the mask (``step_inputs``,
    benchmarks/compiled_sdpa.py)."""
    if cfg.model.attn == "eager":
        return "math"
    if cfg.device == "cpu":
        return "math" if cfg.model.dropout > 0 else "fused"
    fused = torch.backends.cuda.flash_sdp_enabled() or torch.backends.cuda.mem_efficient_sdp_enabled()
    return "fused" if fused else "math"


def _summarize(
    cfg,
    n_params,
    window_steps,
    unmeasured_steps,
    win_time,
    win_energy,
    measured_s,
    stop_reason,
    curve,
    measured_tokens,
    per_rank,
) -> dict:
    t = stats.summarize(win_time)
    real = [c.real for c in measured_tokens]
    padded = [c.padded for c in measured_tokens]
    pairs = [c.attention_pairs for c in measured_tokens]
    steps = len(measured_tokens)
    mean_step = t["mean"]
    metered = [(r["rank"], x) for r in per_rank for x in r["measurements"] if x["energy_j"] is not None]
    if metered:
        per_unit: dict[str, float] = {}
        per_rank_j: dict[str, float] = {}
        for rank, x in metered:
            per_rank_j[str(rank)] = per_rank_j.get(str(rank), 0.0) + sum(x["energy_j"])
        for _, x in metered:
            for unit, joules in zip(x["units"], x["energy_j"]):
                per_unit[unit] = per_unit.get(unit, 0.0) + joules
        sources = sorted({x["source"] for _, x in metered})
        measured = all(x["measured"] for _, x in metered)
        components: dict[str, dict] = {}
        for _, x in metered:
            for comp, v in x["components"].items():
                c = components.setdefault(
                    comp, {"energy_j": 0.0, "method": v.get("method"), "measured": v.get("measured", True)}
                )
                c["energy_j"] += v["energy_j"]
        total = sum(per_unit.values())
        e = stats.summarize(win_energy)
        scope = "device" if all(u.startswith("cuda") for u in per_unit) else "node"
        energy = {
            "source": sources[0] if len(sources) == 1 else sources,
            "measured": measured,
            "scope": scope,
            "total_j": total,
            "per_unit_j": per_unit,
            "per_rank_j": per_rank_j,
            "per_step_median_j": e["median"],
            "per_step_mean_j": e["mean"],
            "per_step_ci95_halfwidth_j": e["ci95_halfwidth"],
            "per_step_ci95_rel": e["ci95_rel"],
            "per_window_step_j": win_energy,  # each window's energy per step (J), in order
            "mean_power_w": total / measured_s if measured_s else None,
            "components": components,
            "warnings": sorted({w for _, x in metered for w in x["warnings"]}),
            # no CO2 here: carbon intensity is applied at analysis time from config.country
            # (companion.energy.tables, companion predict), so a finished run never fails on it
        }
    else:
        energy = {"source": "none", "measured": False, "scope": "none", "total_j": None}
    return {
        "model": {"parameters": n_params, "attention_kernel": attention_kernel(cfg)},
        "time": {
            "step_median_s": t["median"],
            "step_mean_s": mean_step,
            "step_ci95_halfwidth_s": t["ci95_halfwidth"],
            "step_ci95_rel": t["ci95_rel"],
            "windows": t["n"],
            "window_steps": window_steps,
            "steps_measured": steps,
            "steps_unmeasured": unmeasured_steps,
            "measured_s": measured_s,
            "stop_reason": stop_reason,
            "converged": stop_reason == "converged",
            "target_rel_ci": cfg.protocol.target_rel_ci,
            "per_window_step_s": win_time,  # each window's time per step (s), in order
        },
        "tokens": {
            "real_per_step": sum(real) / steps,
            "padded_per_step": sum(padded) / steps,
            "attention_pairs_per_step": sum(pairs) / steps,
            "padding_fraction": 1 - sum(real) / sum(padded),
            "real_measured": sum(real),
            "padded_measured": sum(padded),
            "samples_per_s": cfg.data.batch_size / mean_step,
            "padded_tokens_per_s": sum(padded) / steps / mean_step,
        },
        "energy": energy,
        "memory": {
            "peak_bytes_max_rank": max(r["peak_memory"]["bytes"] for r in per_rank),
            "peak_bytes_per_rank": [r["peak_memory"]["bytes"] for r in per_rank],
            "source": per_rank[0]["peak_memory"]["source"],
        },
        "loss": {"curve": curve, "first": curve[0], "last": curve[-1], "unmeasured_steps": unmeasured_steps},
        "meters": [r["meter"] for r in per_rank],
    }


# ------------------------------------------------------------------------------------------- records
def _describe_error(exc: BaseException) -> dict:
    oom = isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
    return {
        "type": type(exc).__name__,
        "reason": "diverged" if isinstance(exc, Diverged) else "oom" if oom else "error",
        "message": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        "oom": oom,
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


class Launch:
    """What one launch's plans share: the process group, the meter, meshes by layout and the launch's
    provenance. A launch serving a sweep's passes (``serve_plans``) keeps it, and DTensor's cached sharding rules
    with it, from one plan to the next; ``run_plan`` alone opens and closes one."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.env = parallel.init_distributed(device_type)
        neutralise_meter_environment()  # CODECARBON_* never change a record's energy (recorded in provenance)
        self.default_threads = torch.get_num_threads()
        self.plans = 0  # plans this launch finished
        self._ctx: RunContext | None = None
        self._meter_key: tuple | None = None

    def context(self, configs: list[RunConfig]) -> RunContext:
        """The run context for a plan's configurations (one device, one meter kind, checked here)."""
        if any(c.device != self.device_type for c in configs):
            raise ConfigError("a plan mixes devices; give every run of one launch the same device")
        for cfg in configs:
            parallel.check_world_size(cfg.layout, self.env)
        kinds = {c.meter for c in configs}
        if len(kinds) != 1:
            raise ConfigError("a plan mixes meters; give every run of one launch the same meter")
        key = (kinds.pop(), configs[0].country)
        if key != self._meter_key:  # a meter per kind and country: a plan that changes them gets its own
            if self._ctx is not None:
                self._ctx.meter.close()
            sync = torch.cuda.synchronize if self.device_type == "cuda" else None
            env = self.env
            meter = make_meter(key[0], self.device_type, env.local_rank, env.is_node_main, key[1], sync)
            self._ctx, self._meter_key = RunContext(env, meter, self.device_type), key
        return self._ctx

    def provenance(self) -> dict:
        return {
            "world_size": self.env.world_size,
            "backend": "nccl" if self.device_type == "cuda" else "gloo",
            "torch_threads": self.default_threads,
            "launcher": parallel.launcher_name(),
            "plans_before": self.plans,  # > 0: this launch ran earlier plans (a sweep's earlier passes) first
        }

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.meter.close()
        parallel.shutdown()


def run_plan(
    configs: list[RunConfig], out_dir: Path, profile: str, destinations=None, launch: Launch | None = None
) -> int:
    """Run every configuration of a plan in this launch; return the number of failed runs. ``destinations``
    ((profile, folder) per configuration, from a sweep that measures several profiles in shared launches)
    files each record under its own profile; without it every record goes to ``out_dir`` under ``profile``.
    ``launch``: the launch this plan is one of (``serve_plans``); without it the plan is a launch of its own."""
    destinations = list(destinations or [(profile, out_dir)] * len(configs))
    device_type = configs[0].device
    if any(c.device != device_type for c in configs):
        raise ConfigError("a plan mixes devices; give every run of one launch the same device")
    own = launch is None
    if own:
        launch = Launch(device_type)
    ctx = launch.context(configs)
    env, default_threads, info = launch.env, launch.default_threads, launch.provenance()
    failures = 0
    for i, (cfg, (profile, out_dir)) in enumerate(zip(configs, destinations)):
        done = parallel.broadcast_object(
            resume_status(out_dir, cfg.run_id, utc_now().replace(":", "")) if env.is_main else None
        )
        if done is not None:
            if env.is_main:
                hint = "; --retry-failed runs it again" if done == "failed" else ""
                print(f"[{i + 1}/{len(configs)}] {cfg.run_id} already {done}, skipped{hint}", flush=True)
            continue
        started = utc_now()
        if env.is_main:  # tells the sweep that this launch got as far as running something
            print(f"run-start: {cfg.run_id}", flush=True)
        body, error = None, None
        torch.set_num_threads(cfg.threads or default_threads)
        try:
            body = run_one(cfg, ctx)
            body["threads"] = thread_budget()
        except Exception as exc:  # a failed run must not end the sweep ...
            error = _describe_error(exc)
            # ... unless nothing can run here: a meter or package missing fails every run alike
            error["launch_level"] = isinstance(exc, (MeterError, MissingPackage))
            exc.__traceback__ = None
        raise_if_stopped()  # a stop that a library caught is still a stop: no record
        errors = parallel.all_gather_object(error)
        stop = next((e for e in errors if e and e.get("launch_level")), None)
        if stop:
            raise LaunchError(f"{stop['type']}: {stop['message']}")
        if any(errors):
            first = next((r, e) for r, e in enumerate(errors) if e)
            error = {**first[1], "rank": first[0], "ranks_failed": [r for r, e in enumerate(errors) if e]}
            body = None
            failures += 1
        if env.is_main:
            status = "failed" if error else "ok"
            record = make_record(cfg, profile, status, body, error, started, info)
            try:
                write_record(out_dir, record)
            except RecordExists:
                # another launch recorded this run while this one measured it (two plans over one folder):
                # records are never overwritten, and this measurement is not thrown away either
                kept = keep_duplicate(out_dir, record)
                print(
                    f"warning: duplicate run {cfg.run_id}: another launch recorded it first; this measurement "
                    f"is kept as {kept}",
                    flush=True,
                )
            except OSError as exc:  # e.g. a full disk: say which record is missing, never leave a partial one
                raise ConfigError(
                    f"cannot write the record {record_path(out_dir, cfg.run_id)} ({exc.strerror or exc}); "
                    "free space or fix the folder's permissions, then re-run (finished runs are kept)"
                ) from None
            print(_progress_line(i, len(configs), cfg, body, error), flush=True)
        # Free the run's objects, then move every survivor (modules, the imported libraries) to the permanent
        # generation: the next collection, here or one the interpreter starts inside a measured window, walks
        # only what the next run allocates (0.2 s per full collection otherwise, with transformers loaded)
        gc.collect()
        gc.freeze()
        if device_type == "cuda":
            torch.cuda.empty_cache()
    launch.plans += 1
    if own:
        launch.close()
    return failures


SERVE_POLL_S = 0.5  # how often an idle serving launch looks for its next plan (each of its ranks)


def next_plan(queue: Path, k: int, parent: int) -> Path | None:
    """Wait for plan ``k`` in a serving launch's ``queue`` (``<k>.json``, written whole by ``companion sweep``);
    None once ``stop`` is there instead. Every rank waits on the files alone: an idle launch holds no collective
    open, so it may wait through another world size's launches for as long as they take. A rank whose parent
    (``parent``: the sweep, or torchrun's agent) has gone stops waiting (``Orphaned``): where the system sends
    no signal when a parent dies, nothing else would end it."""
    plan, stop = queue / f"{k}.json", queue / "stop"
    while True:
        if plan.is_file():
            return plan
        if stop.exists():
            return None
        if os.getppid() != parent:
            raise Orphaned(
                "the process that started this launch has ended: stopping (finished runs are kept; re-run the "
                "sweep to resume)"
            )
        time.sleep(SERVE_POLL_S)


class Orphaned(ConfigError):
    """A serving launch whose sweep (or agent) has gone: it stops without waiting on the other ranks."""


class LaunchError(ConfigError):
    """An error that fails every run of the launch alike (a missing meter or package): stop, write nothing."""


def thread_budget() -> dict:
    """CPU threads of this rank and how many ranks share the host: oversubscription shows in the record."""
    try:
        host_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        host_cpus = os.cpu_count() or 1
    per_rank = torch.get_num_threads()
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return {
        "per_rank": per_rank,
        "ranks_on_host": ranks,
        "host_cpus": host_cpus,
        "oversubscribed": per_rank * ranks > host_cpus,
    }


def _progress_line(i, n, cfg, body, error) -> str:
    head = f"[{i + 1}/{n}] {cfg.run_id}"
    if error:
        return f"{head} FAILED {error['type']}: {error['message']}"
    t, e = body["time"], body["energy"]
    energy = (
        ""
        if e["total_j"] is None
        else (f", {e['per_step_mean_j']:.3g} J/step ({'measured' if e['measured'] else 'estimated'})")
    )
    ci = "n/a" if t["step_ci95_rel"] is None else f"{t['step_ci95_rel'] * 100:.1f}%"  # one window: no CI
    return (
        f"{head} ok {t['step_median_s'] * 1e3:.2f} ms/step +-{ci} "
        f"({t['steps_measured']} steps, {t['stop_reason']}){energy}, loss {body['loss']['first']:.3f}->{body['loss']['last']:.3f}"
    )


# ------------------------------------------------------------------------------------ command line
def _plan_destinations(plan: dict, n: int, path: Path) -> list[tuple[str, Path]] | None:
    """A shared launch's (profile, record folder) per run (``destinations``), or None: every run is the plan's."""
    if "destinations" not in plan:
        return None
    dest = plan["destinations"]
    if (
        not isinstance(dest, list)
        or len(dest) != n
        or not all(isinstance(d, list) and len(d) == 2 and all(isinstance(x, str) for x in d) for d in dest)
    ):
        raise ConfigError(
            f"plan {path} is malformed (destinations must give [profile, folder] for each of its {n} "
            "runs); write it again with `companion sweep`"
        )
    return [(name, Path(folder)) for name, folder in dest]


def _signal_handlers() -> None:
    """SIGINT raises KeyboardInterrupt and records the stop (``errors.raise_interrupted``) in every rank, so
    ``run_plan`` sees one that some library swallowed (a sweep stops its one-rank launch with SIGINT). A rank
    forked by ``companion.runs.launch`` starts with the handlers of torchrun's agent, which turn SIGINT and SIGTERM
    into an ``Exception`` (a run would record the launch being stopped as its own failure): it also gets back what
    a new interpreter has on SIGTERM, death. A handler someone else installed (not Python's own) is left alone."""
    if parallel.forked_rank():
        signal.signal(signal.SIGINT, raise_interrupted)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    elif (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, raise_interrupted)


def _read_plan(path: Path, default_profile: str) -> tuple[list[RunConfig], str, list | None]:
    """A plan's configurations, profile and destinations, or a ConfigError naming what is wrong with it."""
    from companion.runs.records import read_json

    if not path.is_file():
        raise ConfigError(f"plan {str(path)!r} does not exist; write one with `companion sweep --emit`")
    plan = read_json(path, "plan", "write it again with `companion sweep --emit`")
    try:
        configs = [RunConfig.from_dict(d) for d in plan["runs"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"plan {path} is malformed ({exc}); write it again with `companion sweep --emit`"
        ) from None
    return configs, plan.get("profile", default_profile), _plan_destinations(plan, len(configs), path)


def _checked(configs: list[RunConfig], out_dir: Path, destinations, main_rank: bool) -> None:
    from companion.runs.data import check_sources

    check_sources(configs)
    if main_rank:
        for folder in {out_dir, *(Path(d) for _, d in destinations or ())}:
            check_writable(folder)  # before training: a measurement is never lost for want of a folder


def serve_plans(queue: Path, out: Path | None, default_profile: str, main_rank: bool) -> None:
    """Run the plans a sweep writes to ``queue`` in turn (``next_plan``) in one launch, rank 0 writing
    ``<k>.done`` (the plan's failures) after each, until ``stop``. The sweep reads the runs' records."""
    from companion.paths import runs_dir
    from companion.runs.records import write_json

    launch, k, parent = None, 0, os.getppid()
    while (path := next_plan(queue, k, parent)) is not None:
        configs, profile, destinations = _read_plan(path, default_profile)
        out_dir = out or runs_dir(profile)
        _checked(configs, out_dir, destinations, main_rank)
        if launch is None:
            launch = Launch(configs[0].device)
        failures = run_plan(configs, out_dir, profile, destinations, launch)
        if main_rank:
            write_json(queue / f"{k}.done", {"failures": failures})
        k += 1
    if launch is not None:
        launch.close()


def main(argv: list[str] | None = None) -> int:
    _signal_handlers()
    args = run_parser().parse_args(argv)
    from companion.paths import runs_dir

    main_rank = int(os.environ.get("RANK", "0")) == 0
    lock = None
    try:
        if args.serve:  # a sweep's launch: the sweep holds the folders' locks
            serve_plans(args.serve, args.out, args.profile_name, main_rank)
            return 0
        if args.plan:
            configs, profile, destinations = _read_plan(args.plan, args.profile_name)
        else:
            configs = [config_from_args(args)]
            profile, destinations = args.profile_name, None
        out_dir = args.out or runs_dir(profile)
        # (profile, folder) per configuration
        destinations = destinations or [(profile, out_dir)] * len(configs)
        _checked(configs, out_dir, destinations, main_rank)
        if main_rank and not args.plan:  # a sweep holds the lock for the launches it starts
            lock = FolderLock(out_dir).acquire()
        if main_rank and args.retry_failed:
            # one configuration, or a plan run by hand or by an emitted cluster script (a sweep moves its failed
            # records aside itself before it hands a launch its plan): the failed ones run again
            for cfg, (_, folder) in zip(configs, destinations):
                if existing_status(folder, cfg.run_id) == "failed":
                    kept = set_aside_failed(folder, cfg.run_id, utc_now().replace(":", ""))
                    print(f"earlier failed record moved to {kept}", flush=True)
        failures = run_plan(configs, out_dir, profile, destinations)
    except (ConfigError, MeterError) as exc:
        # bad input is the same on every rank: rank 0 says it once; a meter fails on its own rank, which says so
        if main_rank or isinstance(exc, MeterError):
            print(
                f"error: {exc}" if main_rank else f"error (rank {os.environ.get('RANK')}): {exc}",
                file=sys.stderr,
            )
        elif not isinstance(exc, Orphaned):  # an orphan's launcher has gone: nothing would stop it
            await_main_rank()
        return 2
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        if main_rank:
            print(
                f"{how}: the run in flight has no record; finished runs are kept, re-run to resume",
                file=sys.stderr,
            )
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        if lock is not None:
            lock.release()
    return 1 if failures and not args.plan else 0


if __name__ == "__main__":
    sys.exit(main())
