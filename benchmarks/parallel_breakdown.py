"""Where a parallel training step's time goes on this node: the time its ranks spend inside collectives, measured
with the profiler, beside what the operator model attributes to collectives and to the layouts' other overheads.

    python benchmarks/parallel_breakdown.py                        # the cpu profile's parallel group, 6 steps each
    python benchmarks/parallel_breakdown.py --steps 10 --layouts tp2-dp1 tp1-dp4

For each configuration of the profile's ``parallel`` group (every layout of its sizes, one thread per rank, as the
sweep runs them), the ranks train the same BERT on gloo: a few warm-up steps, ``--steps`` timed steps (the wall
time per step, the slowest rank's), then as many under ``torch.profiler``, whose ``gloo:*`` events time each
collective from its start to its end on its rank. "in collectives" is their sum per step (the mean over ranks),
"rest" the step less that: compute, the layout's own software overhead (DTensor dispatch, FSDP hooks and copies)
and waiting outside a collective. "busy" is the CPU time of every rank's threads over the step's wall time: the
cores the step keeps busy on average (at most the node's), so the node's idle share is what no rank had work
for, the waiting that compute did not fill. The model's columns are the operator model's terms for the same configuration
(``companion.energy.opmodel.scaled_terms``): the fitted tier where this checkout has a fit of the profile
(data/derived/<profile>/fit.json), else the calibrated tier (data/devices/cpu-<host>.json), with its collectives
(latency and bytes), the layout's overheads (dispatch, hooks) and the rest. The profiler adds its own cost to
every operator, so "rest" is read against the untimed wall time, not as an exact split; the collectives' share is
what this measures. Each collective is also timed alone by ``companion calibrate`` (its ``collectives`` rows):
compare a layout's time in collectives here with the calibration's figure for the same bytes to see how much a
training step adds to it. Where ranks outnumber the cores, a rank that reaches a collective first waits while the
rank sharing its core computes, so its span holds some of that rank's compute: there the split between
"collectives" and "rest" is an upper and a lower bound, not an attribution; the step time is exact.

Prints figures; asserts nothing. About 2 minutes on a 2-core node.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

WARMUP_STEPS = 3


def _rank(rank: int, cfg, steps: int, init: str, out: str) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from companion.runs import parallel
    from companion.runs.model import build_model
    from companion.runs.train import make_train_step

    warnings.filterwarnings("ignore")
    torch.set_num_threads(cfg.threads or 1)
    world = cfg.layout.world_size
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    mesh = parallel.build_mesh(cfg.layout, "cpu")
    torch.manual_seed(cfg.seed)  # every rank builds the same weights and draws the same batch
    model = parallel.parallelize_bert(build_model(cfg.model), cfg.layout, mesh, cfg.precision)
    model.train()
    step = make_train_step(model, parallel.make_optimizer(model, cfg.layout, cfg.lr), bf16_autocast=False)
    local = cfg.data.batch_size // cfg.layout.dp
    batch = {
        "input_ids": torch.randint(0, cfg.model.vocab, (local, cfg.data.seq_len)),
        "labels": torch.zeros(local, dtype=torch.long),
    }

    def barrier():
        if world > 1:
            dist.barrier()

    for _ in range(WARMUP_STEPS):
        step(batch)
    barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step(batch)
    barrier()
    wall_s, cpu_s = (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
    quiet, saved = os.open(os.devnull, os.O_WRONLY), os.dup(2)
    os.dup2(quiet, 2)  # the profiler's start and stop lines, one per rank
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step(batch)
            barrier()
    finally:
        os.dup2(saved, 2)
    spans = {
        e.key[len("gloo:") :]: {"calls": e.count / steps, "s": e.cpu_time_total / 1e6 / steps}
        for e in prof.key_averages()
        if e.key.startswith("gloo:") and e.key != "gloo:barrier"
    }
    Path(f"{out}.{rank}").write_text(json.dumps({"wall_s": wall_s, "cpu_s": cpu_s, "spans": spans}))
    if world > 1:
        dist.destroy_process_group()


def measure(cfg, steps: int) -> dict:
    """Wall time per step (slowest rank), CPU time per step (all ranks' threads together) and, per collective,
    calls and seconds per step (mean over ranks)."""
    import torch.multiprocessing as mp

    from companion.runs.launch import preload

    world = cfg.layout.world_size
    with tempfile.TemporaryDirectory() as tmp:
        init, out = os.path.join(tmp, "init"), os.path.join(tmp, "out")
        preload()  # imported once here, inherited by every forked rank
        mp.start_processes(_rank, args=(cfg, steps, init, out), nprocs=world, join=True, start_method="fork")
        ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(world)]
    ops = sorted({op for r in ranks for op in r["spans"]})
    spans = {
        op: {k: sum(r["spans"].get(op, {}).get(k, 0.0) for r in ranks) / world for k in ("calls", "s")}
        for op in ops
    }
    return {
        "wall_s": max(r["wall_s"] for r in ranks),
        "cpu_s": sum(r["cpu_s"] for r in ranks),
        "spans": spans,
    }


def model_terms(cfg, profile: str, data: Path) -> tuple[dict, str]:
    """The operator model's seconds for ``cfg`` by group of terms, and which tier gave them."""
    from companion.energy import opmodel
    from companion.energy.predict import Plan, find_operator_fit, plan_rows, tier_point

    plan = Plan(
        layers=cfg.model.layers,
        hidden=cfg.model.hidden,
        heads=cfg.model.heads,
        seq_len=cfg.data.seq_len,
        batch_size=cfg.data.batch_size,
        steps=1,
        tp=cfg.layout.tp,
        dp=cfg.layout.dp,
        device_name="cpu",
        ffn=cfg.model.ffn_size,
        vocab=cfg.model.vocab,
        max_positions=cfg.model.max_positions,
    )
    fit = find_operator_fit("cpu", data / "derived")
    if fit is not None and Path(fit["path"]).parent.name != profile:
        fit = None
    if fit is not None:
        point, tier = tier_point({**fit, "dev": opmodel.DeviceRoofs.from_json(fit["dev"])}), "fitted"
    else:
        from companion.energy.calibration import load_device_roofs

        dev = load_device_roofs("cpu", "fp32", root=data / "devices")
        coef = opmodel.prior_coefficients(dev)
        point, tier = tier_point({"dev": dev, "time": coef["time"], "energy": coef["energy"]}), dev.tier
    df = plan_rows([plan], "fp32", "node").assign(threads_per_rank=cfg.threads or 1)
    terms = opmodel.scaled_terms(
        opmodel.operator_frame(df, point.dev), point.time, point.layout_scale, opmodel.layout_names(df)
    ).iloc[0]
    coll = float(terms.comm_latency_s + terms.comm_bytes_s)
    over = float(terms.tp_dispatch_s + terms.fsdp_hooks_s)
    return {
        "collectives_s": coll,
        "overheads_s": over,
        "rest_s": float(terms.sum()) - coll - over,
        "step_s": float(terms.sum()),
    }, tier


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile", default="cpu", help="profile whose 'parallel' group is measured (default cpu)"
    )
    ap.add_argument(
        "--steps", type=int, default=6, help="timed and profiled steps per configuration (default 6)"
    )
    ap.add_argument("--layouts", nargs="+", metavar="tpT-dpD", help="only these layouts (default: every one)")
    ap.add_argument(
        "--data",
        type=Path,
        default=ROOT / "data",
        help="the data folder whose calibration "
        "(devices/cpu-<host>.json or cpu.json) and fit (derived/PROFILE/fit.json) give the model's terms (default data/)",
    )
    args = ap.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"error: --steps {args.steps} must be at least 1")
    from companion.errors import ConfigError
    from companion.runs.profiles import load_profile

    try:
        prof = load_profile(args.profile, device_name="cpu")
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}")
    group = set(prof.groups.get("parallel", ()))
    if not group:
        raise SystemExit(f"error: profile {args.profile!r} has no 'parallel' group to measure")
    seen, configs = set(), []
    for cfg in prof.runs:
        key = (cfg.model, cfg.data, cfg.layout)
        name = f"tp{cfg.layout.tp}-dp{cfg.layout.dp}"
        if cfg.run_id in group and key not in seen and (not args.layouts or name in args.layouts):
            seen.add(key)
            configs.append(cfg)
    if not configs:
        raise SystemExit(f"error: no configuration of the parallel group has a layout in {args.layouts}")
    print(
        f"{'size':>14} {'layout':>8} | measured: {'step':>6} {'coll.':>6} {'rest':>6} ms {'busy':>5} | model: {'step':>6} "
        f"{'coll.':>6} {'overh.':>6} {'rest':>6} ms (tier) | measured collectives: calls x ms each"
    )
    for cfg in configs:
        got = measure(cfg, args.steps)
        coll_s = sum(v["s"] for v in got["spans"].values())
        calls = ", ".join(
            f"{op} {v['calls']:.0f} x {1e3 * v['s'] / max(v['calls'], 1):.2f}"
            for op, v in got["spans"].items()
        )
        m, tier = model_terms(cfg, args.profile, args.data)
        size = f"L{cfg.model.layers}-h{cfg.model.hidden}-b{cfg.data.batch_size}"
        layout = f"tp{cfg.layout.tp}-dp{cfg.layout.dp}"
        print(
            f"{size:>14} {layout:>8} | measured: {1e3 * got['wall_s']:6.1f} {1e3 * coll_s:6.1f} "
            f"{1e3 * (got['wall_s'] - coll_s):6.1f} ms {got['cpu_s'] / got['wall_s']:5.2f} | model: {1e3 * m['step_s']:6.1f} {1e3 * m['collectives_s']:6.1f} "
            f"{1e3 * m['overheads_s']:6.1f} {1e3 * m['rest_s']:6.1f} ms ({tier}) | {calls or '-'}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
