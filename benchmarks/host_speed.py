"""Can a small reference workload, timed beside a step, take the host's wandering speed out of the step's time?

    python benchmarks/host_speed.py --seconds 150    # live: steps of three sizes beside six workloads
    python benchmarks/host_speed.py --root CLONE     # a build's records: its replicates, raw and corrected

On a shared 2-core host the same training step's time wanders by 10-30 % over seconds while the guest sees no
steal time and no change of clock; two replicates of one configuration differ by about 10 % (sd), and the model's
error on the test set is measured against such runs. If a fixed workload slowed as every step does, a run could be
expressed at a typical host speed (its time over the workload's ratio to its median) and the spread would shrink.

This times, in turn and for ``--seconds``, BERT training steps of three sizes in 1-s windows, each window flanked
by the reference workloads (GEMMs of 192 and an element-wise pass over a small or a large buffer, on one or two
threads, over 8 or 24 iterations; the geometric mean of the timings before and after). Per step size and
workload: the correlation of the windows' log step time with the workload's, the slope of one on the other, and
the step's spread (sd of log, %) before and after dividing by the workload's ratio to its median. A correction
would need a slope near 1 and a smaller spread for every step size with one workload. docs/decisions.md records
what this found.

With ``--root``, a build's records instead (``data/runs/cpu``, ``holdout``, ``testset``): every one-rank CPU run
timed the chosen workload (``companion.runs.hostspeed``) before and after its windows. Two replicates of one
configuration ran the same step; per set of runs, over the pairs whose records carry the timing, the spread of one
run (sd of the pairs' log ratios over sqrt 2, %), raw and corrected (``companion.energy.tables.host_corrected``),
the correlation of the two log ratios and their slope. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# (layers, hidden, heads, seq_len, batch): steps of about 10, 60 and 400 ms on 2 cores
STEPS = {"small": (2, 64, 2, 32, 4), "mid": (3, 128, 4, 128, 8), "large": (4, 256, 4, 256, 8)}
# name: (element-wise buffer, threads, timed iterations)
WORKLOADS = {
    "gemm+200k, 1 thread, 8 it": (200_000, 1, 8),
    "gemm+200k, 2 threads, 8 it": (200_000, 2, 8),
    "gemm+200k, 1 thread, 24 it": (200_000, 1, 24),
    "gemm+200k, 2 threads, 24 it": (200_000, 2, 24),
    "gemm+4M, 1 thread, 8 it": (4_000_000, 1, 8),
    "gemm+4M, 2 threads, 8 it": (4_000_000, 2, 8),
}
WINDOW_S = 1.0


def training_step(layers, hidden, heads, seq_len, batch):
    """One AdamW training step of the runs' BERT (``companion.runs.model.build_model``) on random tokens."""
    import torch

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=layers, hidden=hidden, heads=heads, vocab=4096))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randint(0, 4096, (batch, seq_len)), torch.randint(0, 2, (batch,))

    def step():
        opt.zero_grad()
        model(input_ids=x, labels=y).loss.backward()
        opt.step()

    return step


def reference(buffer: int, threads: int, iterations: int):
    """One candidate workload, as ``companion.runs.hostspeed`` times the runs' (its defaults)."""
    from companion.runs import hostspeed

    return lambda: hostspeed.reference_s(iterations, threads, buffer)


def measure(seconds: float) -> list[dict]:
    import torch

    torch.set_num_threads(2)
    steps = {name: training_step(*shape) for name, shape in STEPS.items()}
    refs = {name: reference(*w) for name, w in WORKLOADS.items()}
    for step in steps.values():
        step()
        step()
    rows, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, step in steps.items():
            before = {k: r() for k, r in refs.items()}
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < WINDOW_S:
                step()
                n += 1
            step_s = (time.perf_counter() - t0) / n
            after = {k: r() for k, r in refs.items()}
            rows.append({"step": name, "step_s": step_s, **{k: (before[k] * after[k]) ** 0.5 for k in refs}})
    return rows


def tracking(step_log, speed_log, per_run: float = 1.0) -> dict:
    """How a step's log time moves with the workload's: their correlation, the slope of one on the other, and
    the step's spread (sd, %) raw and after dividing by the workload's timing; ``per_run`` scales a spread of
    differences to one run's (1 / sqrt 2 for the log ratio of two replicates)."""
    s, p = np.asarray(step_log, float), np.asarray(speed_log, float)
    return {
        "correlation": float(np.corrcoef(s, p)[0, 1]),
        "slope": float(np.polyfit(p, s, 1)[0]),
        "spread_pct": float(np.std(s, ddof=1) * per_run * 100),
        "corrected_pct": float(np.std(s - p, ddof=1) * per_run * 100),
    }


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for name in STEPS:
        r = [x for x in rows if x["step"] == name]
        if len(r) < 3:
            continue
        for w in WORKLOADS:
            out.append(
                {
                    "step": name,
                    "step_ms": float(np.median([x["step_s"] for x in r]) * 1e3),
                    "windows": len(r),
                    "workload": w,
                    **tracking(np.log([x["step_s"] for x in r]), np.log([x[w] for x in r])),
                }
            )
    return out


SETS = {"cpu": "grid", "holdout": "validation set", "testset": "test set"}


def replicate_pairs(runs):
    """One row per pair of replicates (the first two of each ``config_id`` carrying the timing): their step
    times' log ratio and their reference timings' log ratio."""
    import pandas as pd

    r = runs[runs.host_speed_s.notna() & (runs.host_speed_s > 0)].sort_values(["config_id", "replicate"])
    first = r.groupby("config_id").nth(0).set_index("config_id")
    second = r.groupby("config_id").nth(1).set_index("config_id")
    both = first.join(second, how="inner", lsuffix="_a", rsuffix="_b")
    return pd.DataFrame(
        {
            "step": np.log(both.step_s_b / both.step_s_a),
            "speed": np.log(both.host_speed_s_b / both.host_speed_s_a),
        }
    )


def from_records(root) -> list[dict]:
    from companion.energy.tables import load_runs

    rows = []
    for folder, name in SETS.items():
        path = Path(root) / "data" / "runs" / folder
        if not any(path.glob("*.json")):
            continue
        runs = load_runs(path)
        p = replicate_pairs(runs) if runs.host_speed_s.notna().any() else []
        if len(p) < 3:
            print(f"{name}: {len(p)} pairs of replicates carry the timing; too few")
            continue
        rows.append({"set": name, "pairs": len(p), **tracking(p.step, p.speed, per_run=2**-0.5)})
    return rows


def scores_both_ways(root) -> "list[dict]":
    """The validation page's scores of the build at ``root`` (``stored.score_sweep`` of its ``data/``: fitted and
    calibrated tiers, time, the step-time filter on), its runs expressed at the sweep's typical host speed and as
    measured: the comparison that decides whether the correction earns its place (docs/decisions.md)."""
    import yaml

    from companion.energy import stored

    page = yaml.safe_load((ROOT / "params" / "04_validation.yaml").read_text())
    rows = []
    for how, corrected in (("as measured", False), ("at typical host speed", True)):
        s = stored.score_sweep(
            Path(root) / "data",
            ["operator_roofline", "calibrated_tier"],
            page["level"],
            page["max_step_ci95_rel"],
            host_corrected=corrected,
        )
        s = s[s.target == "time"]
        for model, g in s.groupby("model"):
            by = dict(zip(g.split, g.mape_pct))
            cv = g[~g.split.isin(["pooled", "holdout", "test"])]
            rows.append(
                {
                    "runs": how,
                    "model": model,
                    "pooled_pct": by.get("pooled"),
                    "worst_split_pct": float(cv.mape_pct.max()) if len(cv) else None,
                    "validation_pct": by.get("holdout"),
                    "test_pct": by.get("test"),
                }
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seconds", type=float, default=150.0, help="how long to alternate the steps (default 150)"
    )
    ap.add_argument("--root", type=Path, help="read this checkout's records instead of measuring")
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error(f"--seconds {args.seconds}: give a positive duration")
    import pandas as pd

    pd.set_option("display.width", 200)
    if args.root is not None:
        table = pd.DataFrame(from_records(args.root))
        if not table.empty:
            print("the spread of one run between replicates, raw and at the sweep's typical host speed (%):")
            print(table.round(2).to_string(index=False))
        print("\nthe build's time MAPE (%), its runs as measured and at the sweep's typical host speed:")
        print(pd.DataFrame(scores_both_ways(args.root)).round(2).to_string(index=False))
        return 0
    table = pd.DataFrame(summarise(measure(args.seconds)))
    if table.empty:
        print("too few windows: give more --seconds")
        return 0
    print("per step size and reference workload: how the window's step time moves with the workload's (log)")
    print(table.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
