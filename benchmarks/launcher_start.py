"""Start-up cost of a CPU sweep's multi-rank launch, and what its ranks measure, under the two launchers.

    python benchmarks/launcher_start.py                      # 3 rounds of 2- and 4-rank launches
    python benchmarks/launcher_start.py --rounds 5 --hidden 128 --seq-len 64

* ``torchrun``: ``torchrun --standalone -m companion.runs.train`` starts every rank as a new interpreter,
  which imports torch, transformers' BERT, DTensor and FSDP itself (what GPU launches and clusters run);
* ``forked``: ``python -m companion.runs.launch`` is torchrun with ``--start-method fork``, its ranks forked
  after the launcher imported those modules once (what ``companion sweep`` runs on CPU).

Each round runs the same plan (one configuration per layout: TP, FSDP and, over 4 ranks, 2-D) under both,
in alternating order, each into its own record folder. Printed per launcher: wall and CPU seconds of a
launch (CPU of the launcher and every rank, from ``getrusage`` of the waited children), and per
configuration the paired ratio forked / torchrun of the measured median step time, energy per step and peak
rank memory, median over rounds with its range. A ratio of step time within the run-to-run spread of this
machine says the launcher does not change what a rank measures; the spread is printed beside it (the
ratio of the two torchrun rounds' timings, the noise floor of a comparison between launches).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _plan(tmp: Path, world: int, args) -> Path:
    from companion.runs.config import build_run
    from companion.runs.sweep import write_plan

    layouts = [(world, 1), (1, world)] + ([(2, world // 2)] if world == 4 else [])
    runs = [
        build_run(
            {
                "layers": args.layers,
                "hidden": args.hidden,
                "heads": args.heads,
                "vocab": 512,
                "max_positions": max(64, args.seq_len),
                "seq_len": args.seq_len,
                "batch_size": args.batch_size,
                "tp": tp,
                "dp": dp,
                "dropout": 0.0,
                "warmup_steps": 3,
                "window_steps": 4,
                "min_windows": 5,
                "max_steps": args.max_steps,
                "target_rel_ci": 0.0,
                "meter": "codecarbon",
                "device": "cpu",
                "device_name": "cpu",
            }
        )
        for tp, dp in layouts
    ]
    return write_plan(tmp / f"ws{world}.json", "launcher-bench", runs)


def _command(kind: str, plan: Path, out: Path, world: int) -> list[str]:
    args = ["--plan", str(plan), "--out", str(out)]
    if kind == "forked":
        return [sys.executable, "-m", "companion.runs.launch", f"--nproc-per-node={world}", *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world}",
        "-m",
        "companion.runs.train",
        *args,
    ]


def _launch(kind: str, plan: Path, out: Path, world: int) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(
        _command(kind, plan, out, world),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(
            f"{kind} launch of {world} ranks failed (exit {res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _measured(out: Path) -> dict:
    from companion.runs.records import load_records

    return {
        r["config"]["mode"]: (
            r["time"]["step_median_s"],
            r["energy"]["per_step_median_j"],
            r["memory"]["peak_bytes_max_rank"],
        )
        for r in load_records(out, status="ok")
    }


def _ratio_line(name: str, ratios: list[float]) -> str:
    return f"{name} {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=40, help="steps of each run (warm-up included)")
    args = p.parse_args()
    costs: dict = {}
    measured: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for world in args.worlds:
            plan = _plan(tmp, world, args)
            for rnd in range(args.rounds):
                order = ("torchrun", "forked") if rnd % 2 == 0 else ("forked", "torchrun")
                for kind in order:
                    out = tmp / f"{kind}-ws{world}-r{rnd}"
                    wall, cpu = _launch(kind, plan, out, world)
                    costs.setdefault((world, kind), []).append((wall, cpu))
                    measured[(world, kind, rnd)] = _measured(out)
                    print(
                        f"ws{world} round {rnd} {kind:8s}: {wall:5.1f} s wall, {cpu:5.1f} s CPU", flush=True
                    )
    print(
        f"\nlaunch cost, median of {args.rounds} rounds (L{args.layers} h{args.hidden} s{args.seq_len} "
        f"b{args.batch_size}, one run per layout):"
    )
    for world in args.worlds:
        t = [statistics.median(x) for x in zip(*costs[(world, "torchrun")])]
        f = [statistics.median(x) for x in zip(*costs[(world, "forked")])]
        print(
            f"  {world} ranks: torchrun {t[0]:.1f} s wall {t[1]:.1f} s CPU; forked {f[0]:.1f} s wall "
            f"{f[1]:.1f} s CPU; saved {t[1] - f[1]:.1f} s CPU per launch"
        )
    print("\nwhat the ranks measured, forked / torchrun, paired by round (median [range]):")
    for world in args.worlds:
        for mode in measured[(world, "torchrun", 0)]:
            pairs = [
                (measured[(world, "forked", r)][mode], measured[(world, "torchrun", r)][mode])
                for r in range(args.rounds)
            ]
            ratios = [[f[i] / t[i] for f, t in pairs] for i in range(3)]
            floor = [
                measured[(world, "torchrun", r)][mode][0] / measured[(world, "torchrun", r - 1)][mode][0]
                for r in range(1, args.rounds)
            ]
            noise = f"; torchrun round / previous round {_ratio_line('', floor).strip()}" if floor else ""
            print(
                f"  ws{world} {mode:5s}: {_ratio_line('step time', ratios[0])}, {_ratio_line('energy/step', ratios[1])}, "
                f"{_ratio_line('peak memory', ratios[2])}{noise}"
            )


if __name__ == "__main__":
    main()
