"""What a shorter time cap per run would do to the model's scores, replayed on stored builds' own windows.

    python benchmarks/window_cap_scores.py                          # the stored builds of data/reference/cpu/
    python benchmarks/window_cap_scores.py A.tar.gz --factors 1 0.8 --filter-exponent 0.5

Each run's windows are replayed as the runner stops them (``window_cap.replay``: the runner's rule, the energy's CI
included), with every cap of the build's profiles (grid, parallel group, validation and test sets) multiplied by a
factor. The record's step time, energy per step and their 95 % CIs become the replayed windows'. The build is then
scored as the validation page scores it (``stored.score_sweep``: the operator roofline, fitted and calibrated), with
the step-time filter's threshold at ``--max-step-ci95-rel`` times factor ** -``--filter-exponent`` (0, the default:
unchanged; 0.5: a run's CI narrows as the square root of its length, so the filter keeps the same runs in
expectation). At factor 1 the replay keeps every recorded window (tests/test_window_cap.py checks it on stored
records), so that row is the build's own score. Prints figures; asserts nothing; the measured seconds saved per run
times the runs is what the sweep would save.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from companion.runs import stats  # noqa: E402
from window_cap import replay, window_steps  # noqa: E402

MODELS = ["operator_roofline", "calibrated_tier"]


def capped(rec: dict, factor: float) -> tuple[dict, float, float]:
    """The record as a run capped at ``factor`` x its cap would have written it (the time's and the energy's
    mean, median and CI over the windows it would have kept), with the measured seconds of the full run and of
    the capped one."""
    t, p, e = rec["time"], rec["config"]["protocol"], rec["energy"]
    windows = t.get("per_window_step_s") or []
    if rec.get("status") != "ok" or len(windows) < 2:
        return rec, t.get("measured_s") or 0.0, t.get("measured_s") or 0.0
    energy = e.get("per_window_step_j")
    kept, measured = replay(t, p["max_time_s"] * factor, p["min_windows"], p["target_rel_ci"], energy)
    k = len(kept)
    s = stats.summarize(kept)
    steps = window_steps(t)[:k]
    new_t = {
        **t,
        "per_window_step_s": kept,
        "step_mean_s": s["mean"],
        "step_median_s": s["median"],
        "step_ci95_rel": s["ci95_rel"],
        "step_ci95_halfwidth_s": s["ci95_halfwidth"],
        "steps_measured": int(sum(steps)),
        "windows": k,
        "measured_s": measured,
    }
    new_e = dict(e)
    if energy:
        se = stats.summarize(energy[:k])
        new_e.update(
            per_window_step_j=energy[:k],
            per_step_mean_j=se["mean"],
            per_step_median_j=se["median"],
            per_step_ci95_rel=se["ci95_rel"],
            per_step_ci95_halfwidth_j=se["ci95_halfwidth"],
        )
    return {**rec, "time": new_t, "energy": new_e}, t.get("measured_s") or 0.0, measured


def score_capped(archive: Path, factor: float, threshold: float) -> tuple[dict, float, float, int, int]:
    """The build's scores with every run capped at ``factor`` (time MAPE per split, both models), the measured
    seconds before and after, and how many grid runs the filter keeps of how many."""
    from companion.energy import stored

    full = short = 0.0
    kept = n = 0
    with tempfile.TemporaryDirectory() as tmp:
        data = stored.unpacked(archive, Path(tmp))
        for path in (data / "runs").glob("*/*.json"):
            rec = json.loads(path.read_text())
            if "time" not in rec or "config" not in rec:
                continue
            new, a, b = capped(rec, factor)
            full, short = full + a, short + b
            if path.parent.name == "cpu" and new.get("status") == "ok":
                n += 1
                ci = new["time"].get("step_ci95_rel")
                kept += ci is not None and ci <= threshold
            path.write_text(json.dumps(new))
        scores = stored.score_sweep(data, MODELS, 0.9, threshold)
    t = scores[scores.target == "time"]
    table = {(r.model, r.split): r.mape_pct for r in t.itertuples()}
    return table, full, short, kept, n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="*", type=Path)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.0, 0.8, 0.7])
    ap.add_argument("--max-step-ci95-rel", type=float, default=0.1, help="the step-time filter's threshold")
    ap.add_argument("--filter-exponent", type=float, default=0.0)
    a = ap.parse_args(argv)
    archives = a.archives or sorted((ROOT / "data" / "reference" / "cpu").glob("*.tar.gz"))
    splits = ("pooled", "leave_one_degree_out", "leave_one_mode_out", "holdout", "test")
    print(
        "time MAPE % of the fitted operator roofline (calibrated tier's pooled in brackets); grid runs kept"
    )
    print(
        f"{'build':26s} {'factor':>6s} {'filter':>6s} {'measured s':>10s} {'kept':>7s}  " + "  ".join(splits)
    )
    rows = []
    for arc in archives:
        for f in a.factors:
            thr = a.max_step_ci95_rel * f**-a.filter_exponent
            table, full, short, kept, n = score_capped(arc, f, thr)
            worst = max(
                (v for (m, s), v in table.items() if m == MODELS[0] and s.startswith(("leave", "extrap"))),
                default=float("nan"),
            )
            cells = [table.get((MODELS[0], s), float("nan")) for s in splits]
            rows.append({"build": arc.name, "factor": f, "cells": cells, "worst": worst, "kept": kept / n})
            print(
                f"{arc.name.split('.')[0]:26s} {f:6.2f} {thr:6.3f} {short:10.0f} {kept:3d}/{n:<3d}  "
                + "  ".join(f"{v:5.1f}" for v in cells)
                + f"  worst {worst:4.1f}  [{table.get((MODELS[1], 'pooled'), float('nan')):.1f}]",
                flush=True,
            )
    print(
        "mean over builds per factor: pooled, worst split, validation set, test set (where held), kept share"
    )
    for f in a.factors:
        sel = [r for r in rows if r["factor"] == f]
        mean = lambda i: statistics.mean(r["cells"][i] for r in sel if r["cells"][i] == r["cells"][i])  # noqa: E731
        tests = [r["cells"][4] for r in sel if r["cells"][4] == r["cells"][4]]
        print(
            f"  x{f:.2f}: pooled {mean(0):.2f}  worst {statistics.mean(r['worst'] for r in sel):.2f}  "
            f"validation {mean(3):.2f}  test {statistics.mean(tests) if tests else float('nan'):.2f}  "
            f"kept {statistics.mean(r['kept'] for r in sel) * 100:.1f} %"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
