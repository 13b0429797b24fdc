"""How much of the spread between a build's replicates the host-speed reference removes.

    python benchmarks/host_speed.py                  # this checkout's records (data/runs/cpu, holdout, testset)
    python benchmarks/host_speed.py --root CLONE     # another checkout's
    python benchmarks/host_speed.py --live 60        # no records: time a fixed step and the reference, 60 s

Every CPU run times the reference workload just before and just after its windows (``companion.runs.hostspeed``).
Two replicates of one configuration ran the same step; whatever moved their times apart was the host. Per set of
runs, over the pairs of replicates whose records carry the reference: the spread of one run (the standard deviation
of the pairs' log ratios over sqrt 2, in %), raw and with each run's step divided by its reference's time (the
ratio the analysis applies, ``companion.energy.tables.host_corrected``), the correlation of the two log ratios and
their slope. A correction that tracked nothing would leave the spread as it is (or widen it by the reference's own
noise); the figures say which. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SETS = {"cpu": "grid", "holdout": "validation set", "testset": "test set"}


def pairs(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per pair of replicates (first two of each ``config_id`` carrying the reference): their step
    times' log ratio and their reference timings' log ratio."""
    r = runs[runs.host_speed_s.notna() & (runs.host_speed_s > 0)].sort_values(["config_id", "replicate"])
    first = r.groupby("config_id").nth(0).set_index("config_id")
    second = r.groupby("config_id").nth(1).set_index("config_id")
    both = first.join(second, lsuffix="_a", rsuffix="_b", how="inner")
    return pd.DataFrame(
        {
            "step": np.log(both.step_s_b / both.step_s_a),
            "speed": np.log(both.host_speed_s_b / both.host_speed_s_a),
        }
    )


def summary(p: pd.DataFrame) -> dict:
    corrected = p.step - p.speed
    sd = lambda x: float(np.std(x, ddof=1) / np.sqrt(2) * 100)  # noqa: E731
    return {
        "pairs": len(p),
        "raw_sd_pct": sd(p.step),
        "corrected_sd_pct": sd(corrected),
        "raw_median_abs_pct": float(np.median(np.abs(p.step)) * 100),
        "corrected_median_abs_pct": float(np.median(np.abs(corrected)) * 100),
        "correlation": float(np.corrcoef(p.step, p.speed)[0, 1]) if len(p) > 2 else float("nan"),
        "slope": float(np.polyfit(p.speed, p.step, 1)[0]) if len(p) > 2 else float("nan"),
    }


def from_records(root: Path) -> pd.DataFrame:
    from companion.energy.tables import load_runs

    rows = []
    for folder, name in SETS.items():
        path = root / "data" / "runs" / folder
        if not any(path.glob("*.json")):
            continue
        runs = load_runs(path)
        if "host_speed_s" not in runs or runs.host_speed_s.notna().sum() == 0:
            print(f"{name}: no record carries the host-speed reference (measured before it)")
            continue
        p = pairs(runs)
        if len(p) < 3:
            print(f"{name}: {len(p)} pairs of replicates with the reference; too few")
            continue
        rows.append({"set": name, **summary(p)})
        if (
            folder == "cpu"
        ):  # the grid's pairs by the layout's ranks: a 4-rank run timed its reference on one core
            for world, g in runs.groupby("world_size"):
                q = pairs(g)
                if len(q) >= 3:
                    rows.append({"set": f"  grid, {world} rank(s)", **summary(q)})
    return pd.DataFrame(rows)


def live(seconds: float, window_s: float = 1.5) -> pd.DataFrame:
    """No records: alternate a fixed training step for ``window_s`` with the reference, for ``seconds``, and
    treat consecutive windows as replicates."""
    import torch

    from companion.runs import hostspeed

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(512, 256)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    for _ in range(5):
        step()
    rows, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        before = hostspeed.reference_s()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < window_s:
            step()
            n += 1
        step_s = (time.perf_counter() - t0) / n
        rows.append({"step_s": step_s, "host_speed_s": float(np.sqrt(before * hostspeed.reference_s()))})
    w = pd.DataFrame(rows)
    p = pd.DataFrame(
        {
            "step": np.log(w.step_s.to_numpy()[1:] / w.step_s.to_numpy()[:-1]),
            "speed": np.log(w.host_speed_s.to_numpy()[1:] / w.host_speed_s.to_numpy()[:-1]),
        }
    )
    return pd.DataFrame([{"set": f"live, {len(w)} windows of {window_s:g} s", **summary(p)}])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose records are read")
    ap.add_argument(
        "--live", type=float, default=0.0, help="seconds of a live measurement instead of records"
    )
    args = ap.parse_args(argv)
    table = live(args.live) if args.live > 0 else from_records(args.root)
    if table.empty:
        print("nothing to compare")
        return 0
    pd.set_option("display.width", 200)
    print("the spread of one run between replicates, raw and at the reference's speed (%):")
    print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
