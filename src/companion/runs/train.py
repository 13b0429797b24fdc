"""The per-rank runner: fine-tune, measure, write one record per configuration.

Usable alone or under torchrun, the same code on CPU (gloo) and CUDA (nccl)::

    python -m companion.runs.train --layers 2 --hidden 128 --heads 4 --seq-len 128 --batch-size 8
    torchrun --nproc-per-node 4 -m companion.runs.train --tp 2 --dp 2 --layers 2 --hidden 128
    torchrun --nproc-per-node 4 -m companion.runs.train --plan build/plans/cpu-ws4.json --out data/runs/cpu

One launch loops over every configuration of its plan (start-up dominates small runs). Each configuration:
build the model (same seed on every rank) -> apply the layout -> warm up -> measure windows until the
95 % CI of the per-step time (and energy) is within target or a cap is hit -> rank 0 writes the record.
An exception in a run becomes a ``failed`` record and the loop goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import resource
import sys
import time
import traceback
from pathlib import Path

import torch

from companion.runs import parallel, stats
from companion.runs.carbon import carbon_intensity
from companion.errors import ConfigError
from companion.runs.config import RunConfig, build_run
from companion.runs.data import collate, make_task, shard, token_counts
from companion.runs.meters import Meter, make_meter
from companion.runs.model import build_model, parameter_count
from companion.runs.provenance import static_provenance, utc_now
from companion.runs.records import SCHEMA_VERSION, RecordExists, existing_status, write_record

POOL_BATCHES = 16  # distinct pre-collated batches cycled through; host data prep stays out of the step


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
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    model = build_model(cfg.model).to(device)
    n_params = parameter_count(model)
    mesh = ctx.mesh(cfg.layout)
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
        pool.append({k: v.to(device, non_blocking=True) for k, v in batch.tensors.items()})

    # bf16: FSDP's mixed-precision policy when sharded, autocast otherwise.
    step = make_train_step(model, optimizer, bf16_autocast=cfg.precision == "bf16" and cfg.layout.dp == 1)
    losses: list[torch.Tensor] = []
    step_index = [0]

    def train_step() -> None:
        batch = pool[step_index[0] % POOL_BATCHES]
        step_index[0] += 1
        losses.append(step(batch))  # stays on device: no host sync inside the loop

    # ---- warm-up, then calibrate the window length from the warm-up's steady steps
    for _ in range(proto.warmup_steps):
        train_step()
    ctx.sync()
    probe_steps = 2
    t0 = time.perf_counter()
    for _ in range(probe_steps):
        train_step()
    ctx.sync()
    step_estimate_s = _agree_max((time.perf_counter() - t0) / probe_steps, device)
    unmeasured_steps = step_index[0]
    window_steps = proto.window_steps or max(1, math.ceil(proto.min_window_s / max(step_estimate_s, 1e-9)))
    window_steps = min(window_steps, proto.max_steps)

    # ---- measured windows
    own: list = []  # this rank's Measurements
    win_time, win_energy = [], []  # agreed over ranks: max time, summed energy
    measured_s, k, stop_reason = 0.0, 0, None
    while stop_reason is None:
        meter.begin_window(f"w{k}")
        for _ in range(window_steps):
            train_step()
        m = meter.end_window(f"w{k}")
        own.append(m)
        t_max, e_sum, n_metered = _agree_window(m, device)
        win_time.append(t_max / window_steps)
        if n_metered:
            win_energy.append(e_sum / window_steps)
        measured_s += t_max
        k += 1
        steps = k * window_steps
        converged = (
            k >= proto.min_windows
            and stats.relative_ci(win_time) <= proto.target_rel_ci
            and (not win_energy or stats.relative_ci(win_energy) <= proto.target_rel_ci)
        )
        if converged:
            stop_reason = "converged"
        elif steps + window_steps > proto.max_steps:
            stop_reason = "max_steps"
        elif measured_s >= proto.max_time_s:
            stop_reason = "max_time"

    # ---- losses (global mean over data shards), memory, per-rank energy
    curve = torch.stack(losses).float()
    parallel.all_reduce_(curve)
    curve = (curve / env.world_size).tolist()
    peak = _peak_memory(device)
    per_rank = parallel.all_gather_object(
        {"rank": env.rank, "measurements": [x.to_json() for x in own], "peak_memory": peak, "meter": meter.describe()}
    )
    measured_tokens = [pool_tokens[i % POOL_BATCHES] for i in range(unmeasured_steps, step_index[0])]
    return _summarize(cfg, n_params, window_steps, unmeasured_steps, win_time, win_energy, measured_s,
                      stop_reason, curve, measured_tokens, per_rank)


def make_train_step(model, optimizer, bf16_autocast: bool):
    """``step(batch) -> detached loss``: forward (under bf16 autocast if asked), backward, optimizer step."""

    def step(batch: dict) -> torch.Tensor:
        ctx = (torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16) if bf16_autocast
               else contextlib.nullcontext())
        with ctx:
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _agree_max(value: float, device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    parallel.all_reduce_(t, op=torch.distributed.ReduceOp.MAX)
    return float(t.item())


def _agree_window(m, device) -> tuple[float, float, int]:
    """(slowest rank's window time, energy summed over metering ranks, number of metering ranks)."""
    t = torch.tensor([m.time_s], dtype=torch.float64, device=device)
    parallel.all_reduce_(t, op=torch.distributed.ReduceOp.MAX)
    e = torch.tensor([m.total_energy_j or 0.0, 0.0 if m.energy_j is None else 1.0], dtype=torch.float64, device=device)
    parallel.all_reduce_(e)
    return float(t.item()), float(e[0].item()), int(e[1].item())


def _peak_memory(device) -> dict:
    if device.type == "cuda":
        return {"bytes": int(torch.cuda.max_memory_allocated(device)), "source": "torch.cuda.max_memory_allocated"}
    # ru_maxrss is in KiB on Linux; it is the process's lifetime peak, not this run's.
    return {"bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
            "source": "process max RSS (lifetime of the launch)"}


def attention_kernel(cfg: RunConfig) -> str:
    """'fused' or 'math': whether attention scores are materialised. Eager always does; SDPA on CPU falls
    back to the math kernel when training with dropout (its CPU flash kernel has no dropout)."""
    if cfg.model.attn == "eager":
        return "math"
    if cfg.device == "cpu":
        return "math" if cfg.model.dropout > 0 else "fused"
    fused = torch.backends.cuda.flash_sdp_enabled() or torch.backends.cuda.mem_efficient_sdp_enabled()
    return "fused" if fused else "math"


def _summarize(cfg, n_params, window_steps, unmeasured_steps, win_time, win_energy, measured_s, stop_reason,
               curve, measured_tokens, per_rank) -> dict:
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
                c = components.setdefault(comp, {"energy_j": 0.0, "method": v.get("method"),
                                                  "measured": v.get("measured", True)})
                c["energy_j"] += v["energy_j"]
        total = sum(per_unit.values())
        e = stats.summarize(win_energy)
        intensity = carbon_intensity(cfg.country)
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
            "mean_power_w": total / measured_s if measured_s else None,
            "components": components,
            "warnings": sorted({w for _, x in metered for w in x["warnings"]}),
            "carbon": {**intensity, "co2_kg": total / 3.6e6 * intensity["g_per_kwh"] / 1000.0},
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
        "message": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        "oom": oom,
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


def make_record(cfg: RunConfig, profile: str, status: str, body: dict | None, error: dict | None,
                started: str, launch: dict) -> dict:
    config = cfg.to_dict()
    config.update(world_size=cfg.layout.world_size, mode=cfg.layout.mode)
    return {
        "schema": SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "profile": profile,
        "status": status,
        "config": config,
        **(body or {}),
        "error": error,
        "provenance": {
            **static_provenance(cfg.device),
            "seed": cfg.seed,
            "config_digest": cfg.digest(),
            "started_at": started,
            "finished_at": utc_now(),
            "launch": launch,
        },
    }


def run_plan(configs: list[RunConfig], out_dir: Path, profile: str) -> int:
    """Run every configuration of a plan in this launch; return the number of failed runs."""
    device_type = configs[0].device
    if any(c.device != device_type for c in configs):
        raise ConfigError("a plan mixes devices; give every run of one launch the same device")
    env = parallel.init_distributed(device_type)
    for cfg in configs:
        parallel.check_world_size(cfg.layout, env)
    sync = torch.cuda.synchronize if device_type == "cuda" else None
    kinds = {c.meter for c in configs}
    if len(kinds) != 1:
        raise ConfigError("a plan mixes meters; give every run of one launch the same meter")
    meter = make_meter(kinds.pop(), device_type, env.local_rank, env.is_node_main, configs[0].country, sync)
    ctx = RunContext(env, meter, device_type)
    launch = {"world_size": env.world_size, "backend": "nccl" if device_type == "cuda" else "gloo",
              "torch_threads": torch.get_num_threads()}
    failures = 0
    for i, cfg in enumerate(configs):
        done = parallel.broadcast_object(existing_status(out_dir, cfg.run_id) if env.is_main else None)
        if done is not None:
            if env.is_main:
                print(f"[{i + 1}/{len(configs)}] {cfg.run_id} already {done}, skipped", flush=True)
            continue
        started = utc_now()
        body, error = None, None
        try:
            body = run_one(cfg, ctx)
        except Exception as exc:  # a failed run must not end the sweep
            error = _describe_error(exc)
            exc.__traceback__ = None
        errors = parallel.all_gather_object(error)
        if any(errors):
            first = next((r, e) for r, e in enumerate(errors) if e)
            error = {**first[1], "rank": first[0], "ranks_failed": [r for r, e in enumerate(errors) if e]}
            body = None
            failures += 1
        if env.is_main:
            status = "failed" if error else "ok"
            try:
                write_record(out_dir, make_record(cfg, profile, status, body, error, started, launch))
            except RecordExists as exc:
                print(f"warning: {exc}", file=sys.stderr)
            print(_progress_line(i, len(configs), cfg, body, error), flush=True)
        gc.collect()
        if device_type == "cuda":
            torch.cuda.empty_cache()
    meter.close()
    parallel.shutdown()
    return failures


def _progress_line(i, n, cfg, body, error) -> str:
    head = f"[{i + 1}/{n}] {cfg.run_id}"
    if error:
        return f"{head} FAILED {error['type']}: {error['message']}"
    t, e = body["time"], body["energy"]
    energy = "" if e["total_j"] is None else (
        f", {e['per_step_mean_j']:.3g} J/step ({'measured' if e['measured'] else 'estimated'})")
    return f"{head} ok {t['step_median_s'] * 1e3:.2f} ms/step +-{(t['step_ci95_rel'] or 0) * 100:.1f}% " \
           f"({t['steps_measured']} steps, {t['stop_reason']}){energy}, loss {body['loss']['first']:.3f}->{body['loss']['last']:.3f}"


# ------------------------------------------------------------------------------------ command line
def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every flat config field (``--layers``, ``--seq-len``, ``--tp``, ...)."""
    g = parser.add_argument_group("run configuration (defaults from companion.runs.config)")
    ints = ["layers", "hidden", "heads", "ffn", "vocab", "max_positions", "num_labels", "seq_len", "batch_size",
            "pad_multiple", "tp", "dp", "warmup_steps", "window_steps", "min_windows", "max_steps", "seed"]
    floats = ["dropout", "lr", "min_window_s", "target_rel_ci", "max_time_s"]
    strs = ["attn", "checkpoint", "source", "text_field", "label_field", "tokenizer", "device", "device_name",
            "precision", "meter", "country"]
    for name in ints:
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    for name in floats:
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float)
    for name in strs:
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=str)
    g.add_argument("--lengths", type=str, help="fixed | uniform:MIN | hist:LEN=W,LEN=W,...")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    from companion.runs.config import DATA_FIELDS, LAYOUT_FIELDS, MODEL_FIELDS, PROTOCOL_FIELDS, RUN_FIELDS, parse_lengths
    from companion.runs.provenance import device_tag

    names = set(MODEL_FIELDS) | set(DATA_FIELDS) | set(LAYOUT_FIELDS) | set(PROTOCOL_FIELDS) | set(RUN_FIELDS)
    flat = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if isinstance(flat.get("lengths"), str):
        flat["lengths"] = parse_lengths(flat["lengths"])
    device = flat.get("device", "cpu")
    flat.setdefault("device_name", device_tag(device))
    flat.setdefault("precision", "bf16" if device == "cuda" else "fp32")
    return build_run(flat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="companion run", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=Path, help="JSON plan written by `companion sweep` (a list of runs)")
    parser.add_argument("--out", type=Path, help="record folder (default: data/runs/<profile>)")
    parser.add_argument("--profile-name", default="manual", help="profile name stored in the records")
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    from companion.paths import runs_dir

    try:
        if args.plan:
            if not args.plan.is_file():
                raise ConfigError(f"plan {str(args.plan)!r} does not exist; write one with `companion sweep --emit`")
            plan = json.loads(args.plan.read_text())
            configs = [RunConfig.from_dict(d) for d in plan["runs"]]
            profile = plan.get("profile", args.profile_name)
        else:
            configs = [config_from_args(args)]
            profile = args.profile_name
        out_dir = args.out or runs_dir(profile)
        failures = run_plan(configs, out_dir, profile)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if failures and not args.plan else 0


if __name__ == "__main__":
    sys.exit(main())
