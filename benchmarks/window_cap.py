"""What a shorter time cap per run would cost, replayed on the stored builds' own windows: for each cap, the
share of runs the step-time filter would keep and how far each run's mean step time would move from what the
full run measured, with the measured seconds per run the cap leaves.

    python benchmarks/window_cap.py                    # the cpu, holdout and testset runs of data/reference/cpu/*.tar.gz
    python benchmarks/window_cap.py --caps 2.3 1.9 1.7 --min-windows 5

A run's windows are replayed in order and stopped as the runner stops them (``train.measure_windows``: at least
``--min-windows``, then on the time's and the energy's convergence, or at the cap once the minimum is in), so each
cap's figures come from the windows a shorter run would have measured, without re-measuring. Prints figures;
asserts nothing. The sweep's wall time falls by roughly the measured seconds saved per run times the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.runs import stats  # noqa: E402
from companion.runs.train import MAX_TIME_OVERRUN  # noqa: E402


def window_steps(time: dict) -> list[int]:
    """The steps of each of a run's windows (older records: one ``window_steps`` for all)."""
    return time.get("per_window_steps") or [time["window_steps"]] * len(time["per_window_step_s"])


def replay(
    time: dict, cap_s: float, min_windows: int, target_rel_ci: float, energy: list | None = None
) -> tuple[list[float], float]:
    """The windows a run capped at ``cap_s`` measured seconds would have kept, and its measured seconds: the
    runner's rule (``train.measure_windows``), converged once the per-step time's CI and, where the run metered
    its windows (``energy``: its per-window energy per step), the energy's are within the target after
    ``min_windows``; at the cap once ``min_windows`` are in, or at ``MAX_TIME_OVERRUN`` times it whatever."""
    kept, measured = [], 0.0
    for i, (x, n) in enumerate(zip(time["per_window_step_s"], window_steps(time))):
        kept.append(x)
        measured += x * n
        if (
            len(kept) >= min_windows
            and stats.relative_ci(kept) <= target_rel_ci
            and (not energy or stats.relative_ci(energy[: i + 1]) <= target_rel_ci)
        ):
            break
        if measured >= cap_s and (len(kept) >= min_windows or measured >= MAX_TIME_OVERRUN * cap_s):
            break
    return kept, measured


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="*", type=Path)
    ap.add_argument("--caps", type=float, nargs="+", default=[3.0, 2.3, 2.0, 1.7, 1.5])
    ap.add_argument("--min-windows", type=int, default=5)
    ap.add_argument("--target-rel-ci", type=float, default=0.02)
    ap.add_argument("--max-step-ci95-rel", type=float, default=0.1, help="the step-time filter's threshold")
    a = ap.parse_args(argv)
    archives = a.archives or sorted((ROOT / "data" / "reference" / "cpu").glob("*.tar.gz"))
    cells: dict = {}
    for arc in archives:
        with tarfile.open(arc) as tf:
            for m in tf.getmembers():
                parts = m.name.split("/")
                if len(parts) != 3 or parts[0] != "runs" or not m.name.endswith(".json"):
                    continue
                rec = json.load(tf.extractfile(m))
                if rec.get("status") != "ok" or len(rec["time"].get("per_window_step_s") or []) < 2:
                    continue
                full = statistics.mean(rec["time"]["per_window_step_s"])
                for cap in a.caps:
                    kept, measured = replay(
                        rec["time"],
                        cap,
                        a.min_windows,
                        a.target_rel_ci,
                        rec["energy"].get("per_window_step_j"),
                    )
                    s = stats.summarize(kept)
                    c = cells.setdefault((parts[1], cap), {"kept": 0, "shift": [], "measured": []})
                    c["kept"] += (s["ci95_rel"] if s["ci95_rel"] is not None else 1.0) <= a.max_step_ci95_rel
                    c["shift"].append(abs(s["mean"] / full - 1) * 100)
                    c["measured"].append(measured)
    print(
        f"{len(archives)} stored builds; per profile and cap: runs, kept by the step-time filter, |mean shift|"
    )
    for (profile, cap), c in sorted(cells.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        n = len(c["shift"])
        shift = sorted(c["shift"])
        print(
            f"  {profile:8s} cap {cap:4.1f} s: {n:5d} runs, kept {c['kept'] / n * 100:5.1f} %, shift median "
            f"{statistics.median(shift):.2f} % p90 {shift[int(0.9 * (n - 1))]:.2f} %, measured "
            f"{statistics.mean(c['measured']):.2f} s per run"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
