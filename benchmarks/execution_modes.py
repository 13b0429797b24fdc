"""Execution modes and engines on this machine's CPU: eager against torch.compile, the project's engine against HF
Accelerate, for one small BERT on one process, in three passes that rotate their order; and the calibrated tier's
step time for each, with and without the execution probe (``companion calibrate --executions``).

    python benchmarks/execution_modes.py                   # ~1.5 min on 2 cores (compilations included)
    python benchmarks/execution_modes.py --max-time-s 4    # longer windows
    python benchmarks/execution_modes.py --store           # and keep them for the book (one folder per host)

Energy on a CPU without RAPL is CodeCarbon's estimate (a power model times the measured time): its ratios repeat
the time ratios. ``--store`` keeps the run records (the primers in ``primer/``) and the calibration with its
execution probe under ``data/reference/cpu/modes/<host>/``, refusing a host already stored; the book's section on
execution modes reads each host's (``reference.cpu_modes_numbers``). The GPU's measured figures: ``python
benchmarks/model_accuracy.py --device H200`` (execution modes and engines). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION_NAME = "calibration.json"  # beside runs/; read by companion.energy.reference.cpu_modes_numbers

MODEL = {"layers": 2, "hidden": 128, "heads": 4, "vocab": 4096, "max_positions": 512, "seq_len": 128}
# (execution, engine, attn): eager native, compiled native, eager Accelerate (torch.compile under Accelerate adds
# nothing the other two do not show); with --island also compiled with attention left out of the graphs
COMBOS = (("eager", "native", "sdpa"), ("compile", "native", "sdpa"), ("eager", "accelerate", "sdpa"))
ISLAND = ("compile", "native", "sdpa-nocompile")
# Every run goes in one process, in passes, and a run's place in the process can move its time by as much as the
# combinations differ (docs/decisions.md): so the combinations rotate, each taking every place once (pass k seeds
# its runs k: replicates differ in weights and data), after a primer run that pays the process's one-time costs
# and is left out of the figures
PRIMER_SEED = 1000


def rotated(passes: int, combos=COMBOS) -> list[dict]:
    """The profile's groups after the primer: ``passes`` passes over ``combos``, pass k starting at its k-th."""
    n = len(combos)
    return [
        {
            "name": f"p{k}-{execution}-{engine}-{attn}",
            "set": {"seed": k, "execution": execution, "engine": engine, "attn": attn},
        }
        for k in range(passes)
        for execution, engine, attn in combos[k % n :] + combos[: k % n]
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=MODEL["layers"])
    ap.add_argument("--hidden", type=int, default=MODEL["hidden"])
    ap.add_argument("--seq-len", type=int, default=MODEL["seq_len"])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--island",
        action="store_true",
        help="also compile with attention left out of the graphs (attn sdpa-nocompile), probed as such",
    )
    ap.add_argument(
        "--max-time-s", type=float, default=2.3, help="measured time cap per run (the cpu profile's)"
    )
    ap.add_argument(
        "--replicates", type=int, default=3, help="passes over the combinations (3: each in every place once)"
    )
    ap.add_argument("--probe-budget-s", type=float, default=2.0, help="timed budget of the execution probe")
    ap.add_argument(
        "--store",
        action="store_true",
        help="keep the records and the probed calibration under data/reference/cpu/modes/<host>/",
    )
    args = ap.parse_args(argv)

    from companion.energy import opmodel
    from companion.energy.calibration import calibration_path, load_calibration
    from companion.energy.models import OperatorPoint
    from companion.energy.tables import load_runs
    from companion.runs.calibrate import execution_probe
    from companion.runs.provenance import cpu_model, host_slug

    store = ROOT / "data" / "reference" / "cpu" / "modes" / host_slug(cpu_model())
    if args.store and store.exists():
        raise SystemExit(
            f"error: {store} exists (records are never overwritten); move it away to measure again"
        )
    if args.store and (args.island or (args.layers, args.hidden, args.seq_len) != (2, 128, 128)):
        raise SystemExit("error: --store keeps the book's set: the default shape, without --island")
    if args.store and calibration_path("cpu") is None:
        raise SystemExit(
            "error: --store needs this host's calibration; run `companion calibrate --device cpu` first"
        )
    combos = COMBOS + ((ISLAND,) if args.island else ())
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "execution-modes.yaml"
        profile.write_text(
            yaml.safe_dump(
                {
                    "description": "execution modes and engines, one process (benchmarks/execution_modes.py)",
                    "device": "cpu",
                    "base": {
                        **MODEL,
                        "layers": args.layers,
                        "hidden": args.hidden,
                        "heads": max(1, args.hidden // 32),
                        "seq_len": args.seq_len,
                        "batch_size": args.batch_size,
                        "warmup_steps": 1,
                        "min_window_s": 0.3,
                        "min_windows": 5,
                        "target_rel_ci": 0.02,
                        "max_time_s": args.max_time_s,
                    },
                    "replicates": 1,
                    "groups": [{"name": "primer", "set": {"seed": PRIMER_SEED}}]
                    + rotated(args.replicates, combos),
                }
            )
        )
        out = Path(tmp) / "runs"
        cmd = [sys.executable, "-m", "companion.cli", "sweep", "--profile", str(profile), "--out", str(out)]
        subprocess.run(cmd + ["--quiet"], check=True, cwd=ROOT)
        records = {f.name: f.read_text() for f in sorted(out.glob("*.json"))}
        primers = {
            json.loads(t)["run_id"]
            for t in records.values()
            if json.loads(t)["config"]["seed"] == PRIMER_SEED
        }
        runs = load_runs(out)
        runs = runs[~runs.run_id.isin(primers)].reset_index(drop=True)  # the primer runs are left out

    cal_path = calibration_path("cpu")
    if cal_path is None:
        print("no CPU calibration here (companion calibrate --device cpu): predictions skipped")
        dev = None
    else:
        dev = load_calibration(cal_path, "cpu", "fp32").roofs
        probe = execution_probe(
            "cpu", ["compile"] + (["compile+sdpa-nocompile"] if args.island else []), args.probe_budget_s
        )
        dev_probed = replace(dev, execution_scale=opmodel.execution_scales(probe))
        # the same probe without its attention-left-out entry: such runs then take the whole-model compile's
        dev_whole = replace(
            dev, execution_scale={k: v for k, v in dev_probed.execution_scale.items() if "+" not in k}
        )

    rows = []
    for (execution, engine, attn), g in runs.groupby(["execution", "engine", "attn"], sort=False):
        row = {
            "execution": execution,
            "engine": engine,
            "attn": attn,
            "runs": len(g),
            "ms per step": g.step_s.mean() * 1e3,
            "replicates apart (%)": (g.step_s.max() / g.step_s.min() - 1) * 100,
            "J per step (estimated)": g.energy_per_step_j.mean(),
        }
        if dev is not None:
            variants = [("eager model", dev), ("with probe", dev_probed)]
            if args.island:
                variants.insert(1, ("whole-model probe", dev_whole))
            for name, d in variants:
                coef = opmodel.prior_coefficients(d)
                t, _ = OperatorPoint(d, coef["time"], coef["energy"]).predict(g)
                row[f"calibrated, {name}: error (%)"] = (t / g.step_s.to_numpy() - 1).mean() * 100
        rows.append(row)
    table = pd.DataFrame(rows)
    base = table[(table.execution == "eager") & (table.engine == "native")].iloc[0]
    table["time / native eager"] = table["ms per step"] / base["ms per step"]
    table["energy / native eager"] = table["J per step (estimated)"] / base["J per step (estimated)"]
    print(f"L{args.layers} h{args.hidden} s{args.seq_len} b{args.batch_size}, one process, fp32, {cal_path}")
    print(table.round(3).to_string(index=False))
    if dev is not None:
        print("execution probe (compile vs eager):", json.dumps(dev_probed.execution_scale))
    if args.store:
        for sub in ("runs", "primer"):
            (store / sub).mkdir(parents=True)
        for name, text in records.items():
            (store / ("primer" if json.loads(text)["run_id"] in primers else "runs") / name).write_text(text)
        calibration = json.loads(cal_path.read_text())
        calibration["execution"] = probe  # as `companion calibrate --executions compile` records it
        (store / CALIBRATION_NAME).write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"stored {len(records)} records and the probed calibration in {store.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
