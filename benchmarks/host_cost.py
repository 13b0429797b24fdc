"""The host's cost per layer of a training step, across depths and batch sizes: how linear step time is in depth
where the step is host-bound, and how the calibration's probe (``companion calibrate``: BERT of 1-3 layers at
its probe's shape) compares with deeper models. Prints one line per batch size and writes the rows as JSON.

    python benchmarks/host_cost.py --device cuda --out host_cost.json
    python benchmarks/host_cost.py --device cpu --depths 1 2 3 4 --batches 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from companion.runs.calibrate import SIZES, host_probe  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4, 6, 12])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--budget-s", type=float, default=8.0, help="timing budget per batch size")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    device = torch.device("cuda:0" if a.device == "cuda" else "cpu")
    rows = []
    for batch in a.batches:
        probe = {**SIZES[device.type]["op_probe"], "batch": batch}
        found = host_probe(device, tuple(a.depths), a.budget_s, probe=probe)
        d = np.array(a.depths, float)
        t = np.array([found["step_s"][k] for k in a.depths])
        n = np.array([found["counts"][k] for k in a.depths], float)
        slope = np.polyfit(d, t, 1)[0]
        per_layer_ops = (n[-1] - n[0]) / (d[-1] - d[0])
        inc = np.diff(t) / np.diff(d)
        print(
            f"batch {batch} x {probe['seq']}, hidden {probe['hidden']}: step ms "
            + ", ".join(f"L{k} {found['step_s'][k] * 1e3:.2f}" for k in a.depths)
            + f"; per layer {slope * 1e3:.3f} ms (increments {', '.join(f'{x * 1e3:.2f}' for x in inc)}),"
            f" {per_layer_ops:.0f} ops per layer -> {slope / per_layer_ops * 1e6:.2f} us per operator"
        )
        rows.append(
            {
                **{k: v for k, v in probe.items()},
                "depths": a.depths,
                "step_s": [found["step_s"][k] for k in a.depths],
                "ops": [found["counts"][k] for k in a.depths],
                "per_layer_s": float(slope),
                "per_op_s": float(slope / per_layer_ops),
            }
        )
    if a.out:
        a.out.write_text(json.dumps({"device": a.device, "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
