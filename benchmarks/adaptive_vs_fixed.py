"""Protocol efficiency: steps and seconds the adaptive stopping rule needs against a fixed-length protocol.

    python benchmarks/adaptive_vs_fixed.py                          # replayed 100 ms NVML counter, simulated GPU configs
    python benchmarks/adaptive_vs_fixed.py --records data/runs/long # recorded windows of run records

The adaptive rule (``companion.runs.train.measure_windows``) stops each configuration at the first window
count >= ``min_windows`` whose 95 % CI of time and energy per step is within the target. A fixed-length
protocol runs every configuration for the same length, chosen in advance: to reach the same CI it must take
the smallest common length at which *every* configuration is within the target. Two fixed protocols are
compared: a fixed duration (the same number of time-calibrated windows everywhere, the stronger baseline)
and a fixed step count (the former ``max_steps`` style). All are read off the same window series, so the
comparison is paired. Target: adaptive / fixed <= 1/2, in steps and seconds.

Sources of window series:

* default: ``--configs`` configurations of a simulated GPU (step times 5-300 ms, 1-8 % step jitter) whose
  energy comes from an NVML-like counter replayed at a 100 ms tick (``CounterReplay``, as in
  tests/runs/test_gpu_dry_run.py), windows of >= 3 s: a stand-in for the hardware, not a measurement. With
  ``--trace FILE`` the counter is a trace recorded on a GPU (``record_meter_log.py --counter-trace``).
* ``--records DIR``: run records with per-window series (``time.per_window_step_s``,
  ``energy.per_window_step_j``), measured with ``target_rel_ci: 0`` so that each series runs to its cap,
  e.g. ``companion sweep --profile my-long.yaml``. Real measurements of this machine.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

from companion.runs.config import Protocol
from companion.runs.meters import CounterReplay, NvmlMeter
from companion.runs.stats import relative_ci
from companion.runs.train import measure_windows, window_steps_for


def windows_to_target(series: list[list[float]], target: float, min_windows: int) -> int | None:
    """Adaptive rule: the first window count k >= min_windows at which every series' relative CI <= target."""
    n = min(len(s) for s in series)
    for k in range(max(2, min_windows), n + 1):
        if all(relative_ci(s[:k]) <= target for s in series):
            return k
    return None


def fixed_windows(configs: list[dict], target: float, min_windows: int) -> int | None:
    """Fixed duration: the smallest common window count K (windows last the same time, >= min_window_s, in
    every configuration) at which every configuration's series, cut at K windows, is within the target."""
    n = min(c["n"] for c in configs)
    for k in range(max(2, min_windows), n + 1):
        if all(relative_ci(s[:k]) <= target for c in configs for s in c["series"]):
            return k
    return None


def fixed_steps(configs: list[dict], target: float, min_windows: int) -> int | None:
    """Fixed step count (the old ``max_steps`` style): the smallest common number of steps N at which every
    configuration's series, cut at N steps, is within the target; None if that lies beyond the series."""
    candidates = sorted({k * c["window_steps"] for c in configs for k in range(max(2, min_windows), c["n"] + 1)})
    for steps in candidates:
        ks = [steps // c["window_steps"] for c in configs]
        if any(k > c["n"] or k < 2 for k, c in zip(ks, configs)):
            return None
        if all(relative_ci(s[:k]) <= target for k, c in zip(ks, configs) for s in c["series"]):
            return steps
    return None


# ------------------------------------------------------------------------------------------- sources
def replay_configs(n_configs: int, n_windows: int, seed: int, trace: str | None) -> list[dict]:
    """Simulated GPU configurations measured through NvmlMeter on a replayed counter, >= 3 s windows: step
    times log-uniform in 5-300 ms, step jitter 1-8 % (log-normal)."""
    rng = random.Random(seed)
    out = []
    shapes = [(math.exp(rng.uniform(math.log(0.005), math.log(0.3))), rng.uniform(0.01, 0.08))
              for _ in range(n_configs)]
    for step_s, jitter in shapes:
        clock = _Clock()
        if trace:
            replay = CounterReplay.from_jsonl(trace, clock)
            clock.t = replay.t_s[0] + 0.5
        else:
            replay = CounterReplay.synthetic(n_windows * 3.5 + 20, rng.randrange(1 << 30), clock)
            clock.t = 0.5
        meter = NvmlMeter(counter=replay.read_mj, clock=clock)
        proto = Protocol(min_window_s=3.0, min_windows=n_windows, target_rel_ci=0.0, max_steps=10**9,
                         max_time_s=1e9)
        steps = window_steps_for(proto, meter.min_window_s, step_s)
        step_rng = random.Random(rng.randrange(1 << 30))

        def step(step_s=step_s, jitter=jitter, step_rng=step_rng, clock=clock):
            clock.t += step_s * math.exp(step_rng.gauss(0, jitter))

        w = measure_windows(meter, step, Protocol(**{**proto.__dict__, "max_time_s": n_windows * steps * step_s * 0.999}),
                            steps)
        out.append({"name": f"gpu-sim step {step_s * 1e3:.0f} ms +-{jitter * 100:.0f} %", "window_steps": steps,
                    "step_s": statistics.mean(w.time_per_step_s), "series": [w.time_per_step_s, w.energy_per_step_j],
                    "n": len(w.time_per_step_s)})
    return out


def record_configs(folder: Path) -> list[dict]:
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("status") != "ok" or "per_window_step_s" not in rec["time"]:
            continue
        series = [rec["time"]["per_window_step_s"]]
        if rec["energy"].get("per_window_step_j"):
            series.append(rec["energy"]["per_window_step_j"])
        out.append({"name": rec["run_id"], "window_steps": rec["time"]["window_steps"],
                    "step_s": rec["time"]["step_mean_s"], "series": series, "n": len(series[0])})
    return out


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


# --------------------------------------------------------------------------------------------- report
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, help="folder of run records with per-window series")
    ap.add_argument("--trace", help="a recorded NVML counter trace (JSONL) instead of the synthetic one")
    ap.add_argument("--windows", type=int, default=40, help="windows per simulated configuration")
    ap.add_argument("--configs", type=int, default=45, help="simulated configurations (the cpu sweep has 45)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95 %% CI half-width target")
    ap.add_argument("--min-windows", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    configs = record_configs(args.records) if args.records else replay_configs(args.configs, args.windows, args.seed, args.trace)
    if not configs:
        print(f"no window series in {args.records}; measure with target_rel_ci: 0", file=sys.stderr)
        return 2
    source = f"records in {args.records}" if args.records else (
        f"replayed NVML trace {args.trace}" if args.trace else "simulated GPU on a synthetic 100 ms NVML counter")
    print(f"source: {source}; target {args.target * 100:.1f} % (95 % CI half-width), min {args.min_windows} windows")
    reached = []
    for c in configs:
        k = windows_to_target(c["series"], args.target, args.min_windows)
        c["adaptive_steps"] = None if k is None else k * c["window_steps"]
        print(f"  {c['name']:<58} window {c['window_steps']:>5} steps ({c['window_steps'] * c['step_s']:.2f} s): "
              f"adaptive {'-' if k is None else k:>3} windows of {c['n']}")
        if k is not None:
            reached.append(c)
    print(f"{len(reached)} of {len(configs)} configurations reach the target within their series")
    if not reached:
        return 0
    a_steps = sum(c["adaptive_steps"] for c in reached)
    a_s = sum(c["adaptive_steps"] * c["step_s"] for c in reached)
    print(f"adaptive: {a_steps} steps, {a_s:.1f} s in all")
    k = fixed_windows(reached, args.target, args.min_windows)
    if k is None:
        print("fixed duration: no common window count within the series reaches the target everywhere")
    else:
        f_steps = sum(k * c["window_steps"] for c in reached)
        f_s = sum(k * c["window_steps"] * c["step_s"] for c in reached)
        print(f"fixed duration ({k} windows per configuration): {f_steps} steps, {f_s:.1f} s; "
              f"adaptive / fixed = {a_steps / f_steps:.3f} in steps, {a_s / f_s:.3f} in seconds (target <= 0.5)")
    n = fixed_steps(reached, args.target, args.min_windows)
    if n is None:
        # N must be at least each configuration's first crossing: a bound, not a figure
        bound = max(c["adaptive_steps"] for c in reached)
        print(f"fixed step count: beyond the series (>= {bound} steps per configuration); adaptive / fixed <= "
              f"{a_steps / (bound * len(reached)):.3f} in steps, <= "
              f"{a_s / sum(bound * c['step_s'] for c in reached):.3f} in seconds")
    else:
        f_s = sum(n * c["step_s"] for c in reached)
        print(f"fixed step count ({n} steps per configuration): {n * len(reached)} steps, {f_s:.1f} s; adaptive / "
              f"fixed = {a_steps / (n * len(reached)):.3f} in steps, {a_s / f_s:.3f} in seconds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
