"""What one launch per world size for every pass saves a CPU sweep, and whether it moves what the runs measure.

    python benchmarks/sweep_launches.py                        # the cpu grid's 4-rank parallel runs, 2 rounds
    python benchmarks/sweep_launches.py --layouts tp1-dp1 --rounds 3

Sweeps a two-replicate profile (the cpu profile's earlier ``parallel`` group, two sizes, by default, on the layouts
asked for) into fresh folders, alternating the two ways of launching it, A B A B ...:

* ``per pass``: every replicate pass starts its launches afresh (as the sweep did before ``sweep.Launches``);
* ``kept``: each world size's launch serves every pass (``companion sweep`` on CPU).

Printed per sweep: its wall time; the first steps' seconds per pass (DTensor's sharding propagation, cached per
process, is most of a TP or FSDP run's first step); and the mean over configurations of log(second pass's step
median / first pass's), with its sd. A kept launch that slowed (or sped) its second pass would show as a ratio
outside the spread of the ``per pass`` sweeps. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PROFILE = """
description: the cpu grid's earlier parallel group on {layouts}, two replicates (benchmarks/sweep_launches.py)
device: cpu
base: {{layers: 2, hidden: 128, heads: 4, vocab: 4096, max_positions: 512, seq_len: 128, batch_size: 8,
        warmup_steps: 1, min_window_s: 0.2, min_windows: 5, target_rel_ci: 0.02, max_time_s: 1.5}}
replicates: 2
groups:
  - name: parallel
    zip: {{layers: [4, 2], hidden: [128, 256], heads: [4, 8], batch_size: [4, 8]}}
    set: {{threads: 1, min_window_s: 0.3, max_time_s: 2.5}}
    layouts: [{layouts}]
"""


def one_sweep(profile_path: Path, out: Path, kept: bool) -> dict:
    from companion.runs import sweep
    from companion.runs.profiles import load_profile

    init = sweep.Launches.__init__

    def launches(self, out_dir, serve):
        init(self, out_dir, serve=serve and kept)

    sweep.Launches.__init__ = launches
    try:
        t0 = time.perf_counter()
        result = sweep.run_sweep(load_profile(str(profile_path)), out, progress=False)
        wall = time.perf_counter() - t0
    finally:
        sweep.Launches.__init__ = init
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    first = {0: 0.0, 1: 0.0}
    pairs: dict[str, dict[int, float]] = {}
    for r in records:
        rep = r["config"]["replicate"]
        first[rep] = first.get(rep, 0.0) + (r["execution"]["first_step_s"] or 0.0)
        pairs.setdefault(r["config_id"], {})[rep] = r["time"]["step_median_s"]
    logs = [math.log(p[1] / p[0]) for p in pairs.values() if 0 in p and 1 in p]
    return {
        "wall_s": wall,
        "failed": len(result.failed),
        "first_steps_s": first,
        "log_ratio_mean": statistics.mean(logs) if logs else math.nan,
        "log_ratio_sd": statistics.stdev(logs) if len(logs) > 1 else math.nan,
        "pairs": len(logs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layouts", default="tp4-dp1, tp1-dp4, tp2-dp2", help="layouts of the parallel group")
    ap.add_argument("--rounds", type=int, default=2, help="A B pairs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "launches.yaml"
        profile.write_text(PROFILE.format(layouts=args.layouts))
        print(f"{'sweep':<14}{'wall':>9}{'first steps, pass 1 / 2':>26}{'log(pass 2 / pass 1)':>24}")
        for i in range(args.rounds):
            for kept in (False, True):
                name = "kept" if kept else "per pass"
                got = one_sweep(profile, Path(tmp) / f"{name.replace(' ', '-')}-{i}", kept)
                f = got["first_steps_s"]
                print(
                    f"{name:<14}{got['wall_s']:>8.1f}s{f[0]:>17.1f} / {f[1]:<6.1f}"
                    f"{got['log_ratio_mean']:>+13.3f} (sd {got['log_ratio_sd']:.3f}, {got['pairs']} pairs)"
                    + (f", {got['failed']} failed" if got["failed"] else ""),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
