"""Protocol efficiency: steps and seconds the adaptive stopping rule needs against a fixed-length protocol.

    python benchmarks/adaptive_vs_fixed.py --seeds 0 1 2            # replayed 100 ms NVML counter, simulated GPU configs
    python benchmarks/adaptive_vs_fixed.py --seeds 0 1 2 --close-on steps  # windows closed by step count (the former rule)
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

Windows on the NVML counter close on a counter update (``NvmlMeter``'s default, see
``companion.runs.train.measure_windows``); ``--close-on steps`` measures the former windows closed after a
fixed number of steps, whose energy carries up to one counter tick at each edge.

Besides the oracle fixed duration (which knows every configuration's series in advance), a realistic fixed
protocol is reported: a pilot of ``min_windows`` windows of every configuration sets one common window
count from the largest per-window spread seen, and the figure says how many configurations then miss the
target. With the simulated source, the true per-step time and energy are known, so the benchmark also
reports the coverage of the nominal 95 % CI at the adaptive stopping time (optional stopping can erode it).

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
from companion.runs.stats import ci95_halfwidth, relative_ci, t_quantile_975
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


def windows_within(c: dict, steps: int) -> int:
    """Whole windows of configuration ``c`` that fit in its first ``steps`` steps."""
    return sum(1 for x in c["cum_steps"] if x <= steps)


def fixed_steps(configs: list[dict], target: float, min_windows: int) -> int | None:
    """Fixed step count (the old ``max_steps`` style): the smallest common number of steps N at which every
    configuration's series, cut at N steps, is within the target; None if that lies beyond the series."""
    candidates = sorted({x for c in configs for x in c["cum_steps"][max(2, min_windows) - 1 :]})
    for steps in candidates:
        ks = [windows_within(c, steps) for c in configs]
        if any(steps > c["cum_steps"][-1] or k < 2 for k, c in zip(ks, configs)):
            return None
        if all(relative_ci(s[:k]) <= target for k, c in zip(ks, configs) for s in c["series"]):
            return steps
    return None


def pilot_windows(configs: list[dict], target: float, pilot: int) -> int:
    """A realistic fixed duration: from a pilot of ``pilot`` windows of every configuration, the common window
    count K at which the largest per-window relative spread seen would give a CI within the target,
    t(K-1) * cv_max / sqrt(K) <= target (at least the pilot's own length)."""
    cv_max = max(
        statistics.stdev(s[:pilot]) / abs(statistics.mean(s[:pilot])) for c in configs for s in c["series"]
    )
    k = max(2, pilot)
    while t_quantile_975(k - 1) * cv_max / math.sqrt(k) > target:
        k += 1
    return k


def covers(c: dict, k: int) -> list[bool] | None:
    """Whether the 95 % CI of each series cut at k windows covers the configuration's true per-step value."""
    if c.get("truth") is None:
        return None
    return [
        abs(statistics.mean(s[:k]) - truth) <= ci95_halfwidth(s[:k])
        for s, truth in zip(c["series"], c["truth"])
    ]


# ------------------------------------------------------------------------------------------- sources
def replay_configs(
    n_configs: int,
    n_windows: int,
    seed: int,
    trace: str | None,
    close_on_update: bool,
    power_w: float = 450.0,
) -> list[dict]:
    """Simulated GPU configurations measured through NvmlMeter on a replayed counter, >= 3 s windows: step
    times log-uniform in 5-300 ms, step jitter 1-8 % (log-normal). The truth (synthetic counter only): time per
    step step_s * exp(jitter^2 / 2), energy per step power_w times that."""
    rng = random.Random(seed)
    out = []
    shapes = [
        (math.exp(rng.uniform(math.log(0.005), math.log(0.3))), rng.uniform(0.01, 0.08))
        for _ in range(n_configs)
    ]
    for step_s, jitter in shapes:
        clock = _Clock()
        if trace:
            replay = CounterReplay.from_jsonl(trace, clock)
            clock.t = replay.t_s[0] + 0.5
        else:
            replay = CounterReplay.synthetic(
                n_windows * 3.6 + 20, rng.randrange(1 << 30), clock, power_w=power_w
            )
            clock.t = 0.5
        meter = NvmlMeter(counter=replay.read_mj, clock=clock, close_on_update=close_on_update)
        proto = Protocol(
            min_window_s=3.0, min_windows=n_windows, target_rel_ci=0.0, max_steps=10**9, max_time_s=1e9
        )
        steps = window_steps_for(proto, meter.min_window_s, step_s)
        step_rng = random.Random(rng.randrange(1 << 30))

        def step(step_s=step_s, jitter=jitter, step_rng=step_rng, clock=clock):
            clock.t += step_s * math.exp(step_rng.gauss(0, jitter))

        w = measure_windows(
            meter,
            step,
            Protocol(**{**proto.__dict__, "max_time_s": n_windows * steps * step_s * 0.999}),
            steps,
        )
        true_step_s = step_s * math.exp(jitter**2 / 2)
        out.append(
            {
                "name": f"gpu-sim step {step_s * 1e3:.0f} ms +-{jitter * 100:.0f} %",
                "window_steps": steps,
                "step_s": statistics.mean(w.time_per_step_s),
                "series": [w.time_per_step_s, w.energy_per_step_j],
                "n": len(w.time_per_step_s),
                "cum_steps": _cumsum(w.steps_per_window),
                "cum_s": _cumsum([m.time_s for m in w.own]),
                "truth": None if trace else [true_step_s, power_w * true_step_s],
            }
        )
    return out


def _cumsum(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
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
        per_window = rec["time"].get("per_window_steps") or [rec["time"]["window_steps"]] * len(series[0])
        out.append(
            {
                "name": rec["run_id"],
                "window_steps": rec["time"]["window_steps"],
                "step_s": rec["time"]["step_mean_s"],
                "series": series,
                "n": len(series[0]),
                "cum_steps": _cumsum(per_window),
                "cum_s": _cumsum([t * n for t, n in zip(series[0], per_window)]),
                "truth": None,
            }
        )
    return out


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


# --------------------------------------------------------------------------------------------- report
def report(configs: list[dict], target: float, min_windows: int, verbose: bool) -> dict:
    """Print the comparison for one set of configurations; return its figures."""
    reached = []
    for c in configs:
        k = windows_to_target(c["series"], target, min_windows)
        c["k"] = k
        if verbose:
            print(
                f"  {c['name']:<58} window {c['window_steps']:>5} steps ({c['window_steps'] * c['step_s']:.2f} s): "
                f"adaptive {'-' if k is None else k:>3} windows of {c['n']}"
            )
        if k is not None:
            reached.append(c)
    print(f"{len(reached)} of {len(configs)} configurations reach the target within their series")
    fig = {"configs": len(configs), "reached": len(reached)}
    if not reached:
        return fig
    a_steps = sum(c["cum_steps"][c["k"] - 1] for c in reached)
    a_s = sum(c["cum_s"][c["k"] - 1] for c in reached)
    fig.update(adaptive_steps=a_steps, adaptive_s=a_s)
    print(
        f"adaptive: {a_steps} steps, {a_s:.1f} s in all (mean {statistics.mean(c['k'] for c in reached):.2f} "
        "windows per configuration)"
    )
    k = fixed_windows(reached, target, min_windows)
    if k is None or any(c["n"] < k for c in reached):
        print(
            "fixed duration (oracle): no common window count within the series reaches the target everywhere"
        )
    else:
        f_steps = sum(c["cum_steps"][k - 1] for c in reached)
        f_s = sum(c["cum_s"][k - 1] for c in reached)
        fig.update(oracle_windows=k, ratio_steps=a_steps / f_steps, ratio_s=a_s / f_s)
        print(
            f"fixed duration, oracle ({k} windows per configuration): {f_steps} steps, {f_s:.1f} s; "
            f"adaptive / fixed = {a_steps / f_steps:.3f} in steps, {a_s / f_s:.3f} in seconds (target <= 0.5)"
        )
    kp = pilot_windows(reached, target, min_windows)
    if kp > min(c["n"] for c in reached):
        print(
            f"fixed duration, pilot of {min_windows} windows: {kp} windows per configuration, beyond the series"
        )
    else:
        p_steps = sum(c["cum_steps"][kp - 1] for c in reached)
        p_s = sum(c["cum_s"][kp - 1] for c in reached)
        miss = sum(1 for c in reached if any(relative_ci(s[:kp]) > target for s in c["series"]))
        fig.update(
            pilot_windows=kp, pilot_ratio_steps=a_steps / p_steps, pilot_ratio_s=a_s / p_s, pilot_miss=miss
        )
        print(
            f"fixed duration, pilot of {min_windows} windows ({kp} windows per configuration): {p_steps} steps, "
            f"{p_s:.1f} s; adaptive / fixed = {a_steps / p_steps:.3f} in steps, {a_s / p_s:.3f} in seconds; "
            f"{miss} of {len(reached)} configurations miss the target"
        )
    n = fixed_steps(reached, target, min_windows)
    if n is None:
        # N must be at least each configuration's first crossing: a bound, not a figure
        bound = max(c["cum_steps"][c["k"] - 1] for c in reached)
        print(
            f"fixed step count: beyond the series (>= {bound} steps per configuration); adaptive / fixed <= "
            f"{a_steps / (bound * len(reached)):.3f} in steps"
        )
    else:
        print(
            f"fixed step count ({n} steps per configuration): {n * len(reached)} steps; adaptive / fixed = "
            f"{a_steps / (n * len(reached)):.3f} in steps"
        )
    cov = [covers(c, c["k"]) for c in reached]
    if all(x is not None for x in cov):
        fig["cover"] = [sum(x[i] for x in cov) for i in range(2)]
        fig["cover_n"] = len(cov)
        print(
            f"coverage of the nominal 95 % CI at the adaptive stop: time {fig['cover'][0]} / {len(cov)}, "
            f"energy {fig['cover'][1]} / {len(cov)}"
        )
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, help="folder of run records with per-window series")
    ap.add_argument("--trace", help="a recorded NVML counter trace (JSONL) instead of the synthetic one")
    ap.add_argument("--windows", type=int, default=40, help="windows per simulated configuration")
    ap.add_argument("--configs", type=int, default=45, help="simulated configurations (the cpu sweep has 45)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95 %% CI half-width target")
    ap.add_argument("--min-windows", type=int, default=5)
    ap.add_argument(
        "--close-on",
        choices=["update", "steps"],
        default="update",
        help="NVML windows end on a counter update (the runner's default) or after their steps",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--verbose", action="store_true", help="one line per configuration")
    args = ap.parse_args()
    figs = []
    for seed in [None] if args.records else args.seeds:
        configs = (
            record_configs(args.records)
            if args.records
            else replay_configs(args.configs, args.windows, seed, args.trace, args.close_on == "update")
        )
        if not configs:
            print(f"no window series in {args.records}; measure with target_rel_ci: 0", file=sys.stderr)
            return 2
        source = (
            f"records in {args.records}"
            if args.records
            else (
                f"replayed NVML trace {args.trace}"
                if args.trace
                else "simulated GPU on a synthetic 100 ms NVML counter"
            )
        )
        close = (
            ""
            if args.records
            else f", windows close on {'a counter update' if args.close_on == 'update' else 'their step count'}"
        )
        print(
            f"{'' if seed is None else f'seed {seed}: '}source: {source}{close}; target {args.target * 100:.1f} % "
            f"(95 % CI half-width), min {args.min_windows} windows"
        )
        figs.append(report(configs, args.target, args.min_windows, args.verbose))
        print()
    if len(figs) > 1:

        def pooled(key):
            vals = [f[key] for f in figs if key in f]
            return f"{statistics.mean(vals):.3f} (min {min(vals):.3f}, max {max(vals):.3f})" if vals else "-"

        print(
            f"over seeds {' '.join(map(str, args.seeds))}: adaptive / fixed (oracle) {pooled('ratio_steps')} in "
            f"steps, {pooled('ratio_s')} in seconds; adaptive / fixed (pilot) {pooled('pilot_ratio_steps')} in "
            f"steps"
        )
        if all("cover" in f for f in figs):
            n = sum(f["cover_n"] for f in figs)
            print(
                f"coverage of the nominal 95 % CI at the adaptive stop, pooled: time "
                f"{sum(f['cover'][0] for f in figs) / n:.3f}, energy {sum(f['cover'][1] for f in figs) / n:.3f} "
                f"({n} stops)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
