"""Execution modes and engines on this machine's CPU: eager against torch.compile, the project's engine against HF
Accelerate, for one small BERT on one process, each measured in two interleaved passes; and the calibrated tier's
step time for each, with and without the execution probe (``companion calibrate --executions``).

    python benchmarks/execution_modes.py                   # ~3 min on 2 cores (two compilations included)
    python benchmarks/execution_modes.py --max-time-s 4    # longer windows

Energy on a CPU without RAPL is CodeCarbon's estimate (a power model times the measured time): its ratios repeat
the time ratios. The GPU's measured figures: ``python benchmarks/model_accuracy.py --device H200`` (execution modes
and engines). Prints figures; asserts nothing.
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

MODEL = {"layers": 2, "hidden": 128, "heads": 4, "vocab": 4096, "max_positions": 512, "seq_len": 128}
# (execution, engine): eager native, compiled native, eager Accelerate (torch.compile under Accelerate adds
# nothing the other two do not show)
COMBOS = {"execution": ["eager", "compile", "eager"], "engine": ["native", "native", "accelerate"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--max-time-s", type=float, default=2.3, help="measured time cap per run (the cpu profile's)"
    )
    ap.add_argument("--probe-budget-s", type=float, default=2.0, help="timed budget of the execution probe")
    args = ap.parse_args(argv)

    from companion.energy import opmodel
    from companion.energy.calibration import calibration_path, load_calibration
    from companion.energy.models import OperatorPoint
    from companion.energy.tables import load_runs
    from companion.runs.calibrate import execution_probe

    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "execution-modes.yaml"
        profile.write_text(
            yaml.safe_dump(
                {
                    "description": "execution modes and engines, one process (benchmarks/execution_modes.py)",
                    "device": "cpu",
                    "base": {
                        **MODEL,
                        "batch_size": args.batch_size,
                        "warmup_steps": 1,
                        "min_window_s": 0.3,
                        "min_windows": 5,
                        "target_rel_ci": 0.02,
                        "max_time_s": args.max_time_s,
                    },
                    "replicates": 2,
                    "groups": [{"name": "modes", "zip": COMBOS}],
                }
            )
        )
        out = Path(tmp) / "runs"
        cmd = [sys.executable, "-m", "companion.cli", "sweep", "--profile", str(profile), "--out", str(out)]
        subprocess.run(cmd + ["--quiet"], check=True, cwd=ROOT)
        runs = load_runs(out).reset_index(drop=True)

    cal_path = calibration_path("cpu")
    if cal_path is None:
        print("no CPU calibration here (companion calibrate --device cpu): predictions skipped")
        dev = None
    else:
        dev = load_calibration(cal_path, "cpu", "fp32").roofs
        probe = execution_probe("cpu", ["compile"], args.probe_budget_s)
        dev_probed = replace(dev, execution_scale=opmodel.execution_scales(probe))

    rows = []
    for (execution, engine), g in runs.groupby(["execution", "engine"], sort=False):
        row = {
            "execution": execution,
            "engine": engine,
            "runs": len(g),
            "ms per step": g.step_s.mean() * 1e3,
            "replicates apart (%)": (g.step_s.max() / g.step_s.min() - 1) * 100,
            "J per step (estimated)": g.energy_per_step_j.mean(),
        }
        if dev is not None:
            for name, d in (("eager model", dev), ("with probe", dev_probed)):
                coef = opmodel.prior_coefficients(d)
                t, _ = OperatorPoint(d, coef["time"], coef["energy"]).predict(g)
                row[f"calibrated, {name}: error (%)"] = (t / g.step_s.to_numpy() - 1).mean() * 100
        rows.append(row)
    table = pd.DataFrame(rows)
    base = table[(table.execution == "eager") & (table.engine == "native")].iloc[0]
    table["time / native eager"] = table["ms per step"] / base["ms per step"]
    table["energy / native eager"] = table["J per step (estimated)"] / base["J per step (estimated)"]
    print(
        f"L{MODEL['layers']} h{MODEL['hidden']} s{MODEL['seq_len']} b{args.batch_size}, one process, fp32, {cal_path}"
    )
    print(table.round(3).to_string(index=False))
    if dev is not None:
        print("execution probe (compile vs eager):", json.dumps(dev_probed.execution_scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
