"""Held-out accuracy of the models on stored sweeps: scored as the validation page scores them, on every stored
sweep at once, so that a change of a model is judged on more than the one sweep a `make reproduce` measures.

    python benchmarks/model_accuracy.py                          # every data/reference/cpu/*.tar.gz
    python benchmarks/model_accuracy.py SWEEP.tar.gz data/       # archives, or folders holding runs/ and devices/
    python benchmarks/model_accuracy.py --models operator_roofline calibrated_tier flops_power_law
    python benchmarks/model_accuracy.py --pack data/ --out data/reference/cpu/   # store this checkout's sweep
    python benchmarks/model_accuracy.py --device H200    # a GPU's reference runs (data/reference/H200), every tier

A stored sweep is what one `make reproduce` measured, packed as one archive by ``--pack``
(``companion.energy.stored``, which also scores them; the book's page "Across builds" is the same scoring).

Per sweep and model: held-out MAPE of time and energy per step, pooled over the splits and per split, the
off-grid holdout (fitted on the whole sweep, scored on the off-grid runs), the exact-model floor of the runs
each group scores (``companion.energy.noise.exact_model_floor``) and the coverage of the nominal 90 %
intervals; then the mean over sweeps, how many cells have their coverage within 85-95 % beside how many exact
intervals would on groups of the same sizes, and each group's coverage pooled over all sweeps (with a range from
resampling whole sweeps). The step-time filter, the splits and the interval level are the validation page's
(notebooks/04_validation.py, params/04_validation.yaml). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.energy import stored  # noqa: E402
from companion.errors import ConfigError  # noqa: E402

REFERENCE = ROOT / "data" / "reference" / stored.PROFILE
# the validation page's step-time filter and interval level, from its parameters (params/04_validation.yaml)
PAGE = yaml.safe_load((ROOT / "params" / "04_validation.yaml").read_text())
MAX_STEP_CI95_REL, LEVEL = PAGE["max_step_ci95_rel"], PAGE["level"]
# the models page "Across builds" scores: only their scores go to the committed cache (data/reference/cpu/scores/),
# which keeps one file per archive, the one that page reads; other models' scores are computed afresh
BUILDS_PAGE_MODELS = yaml.safe_load((ROOT / "params" / "07_builds.yaml").read_text())["models"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "sweeps", nargs="*", type=Path, help="archives or folders (default: data/reference/cpu/*.tar.gz)"
    )
    ap.add_argument("--models", nargs="+", default=["operator_roofline"])
    ap.add_argument(
        "--workers", type=int, default=1, help="sweeps scored at once, one process each (default 1)"
    )
    ap.add_argument(
        "--pack", type=Path, metavar="DATA", help="pack the sweep under DATA (a data/ folder) and exit"
    )
    ap.add_argument(
        "--out", type=Path, default=REFERENCE, help="where --pack writes (default data/reference/cpu)"
    )
    ap.add_argument(
        "--device", help="score a GPU's reference runs (data/reference/DEVICE) by every tier instead"
    )
    args = ap.parse_args(argv)
    if args.device:
        return gpu_reference(args.device)
    try:
        if args.pack:
            print(f"wrote {stored.pack(args.pack, args.out)}")
            return 0
        try:
            stored.check_models(args.models)
        except ConfigError as exc:
            hint = (
                " (sweeps given after --models are read as model names: put them before it)"
                if any(Path(u).exists() for u in args.models)
                else ""
            )
            raise ConfigError(f"{exc}{hint}") from None
        sweeps = args.sweeps or stored.stored_sweeps(REFERENCE)
        if not sweeps:
            raise ConfigError(f"no stored sweeps in {REFERENCE}; pass archives or folders, or --pack one")
        cache = REFERENCE / "scores" if sorted(args.models) == sorted(BUILDS_PAGE_MODELS) else None
        table = stored.score_stored(
            sweeps, args.models, LEVEL, MAX_STEP_CI95_REL, workers=args.workers, cache=cache
        )
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    pd.set_option("display.width", 200)
    order = ["pooled", *[s for s in table.split.unique() if s != "pooled"]]
    pooled = stored.pooled_coverage(table, LEVEL)
    for (model, target), t in table.groupby(["model", "target"], sort=False):
        print(
            f"\n{model}, {target} per step: held-out MAPE % (exact-model floor of the runs scored; coverage of the "
            f"{LEVEL:.0%} intervals %)"
        )
        cell = t.assign(
            cell=[
                f"{m:5.1f} ({'  -' if pd.isna(f) else f'{f:4.1f}'}; {c:3.0f})"
                for m, f, c in zip(t.mape_pct, t.exact_floor_pct, t.coverage_pct)
            ]
        )
        wide = cell.pivot(index="sweep", columns="split", values="cell")[
            [s for s in order if s in set(t.split)]
        ]
        mean = t.groupby("split")[["mape_pct", "exact_floor_pct", "coverage_pct"]].mean()
        wide.loc["mean"] = [
            f"{mean.mape_pct[s]:5.1f} ({mean.exact_floor_pct[s]:4.1f}; {mean.coverage_pct[s]:3.0f})"
            for s in wide.columns
        ]
        print(wide.to_string())
        print(stored.coverage_cells(t, LEVEL))
        p = pooled[(pooled.model == model) & (pooled.target == target)].set_index("split")
        print(
            f"coverage pooled over the {len(wide) - 1} sweeps (covered of held-out runs; 90 % range resampling sweeps):"
        )
        print(
            "  "
            + "; ".join(
                f"{s} {p.coverage_pct[s]:.1f} % ({p.covered[s]}/{p.n[s]}; "
                f"{p.coverage_lo_pct[s]:.1f}-{p.coverage_hi_pct[s]:.1f})"
                for s in wide.columns
            )
        )
    return 0


def _print_tiers(scores: pd.DataFrame) -> None:
    """Each run's error per tier (time and energy), then each tier's MAPE and coverage."""
    from companion.energy import reference

    wide = scores.pivot(index="run_id", columns="tier", values=["step_s_ape", "energy_per_step_j_ape"])
    print(wide.round(1).to_string())
    print(reference.summary(scores).round(1).to_string())


def _reference_and_test_sets(device: str) -> None:
    """The folder's own reference runs, its test set and each of its one-machine sets, each scored by every
    tier."""
    from companion.energy import reference

    try:
        scores = reference.score_reference(device, level=LEVEL)
        profile = reference.score_profile(device)
    except (ConfigError, FileNotFoundError) as exc:
        raise SystemExit(f"error: {exc}") from None
    pd.set_option("display.width", 200)
    print(
        f"{device}: {scores.run_id.nunique()} reference runs, energy measured (NVML); prior and calibrated tiers "
        "fitted on nothing, the fitted tier leaves each run out"
    )
    wide = scores.pivot(index="run_id", columns="tier", values=["step_s_ape", "energy_per_step_j_ape"]).round(
        1
    )
    wide[("runs' own", "step CI95 %")] = (scores.groupby("run_id").step_ci95_rel.first() * 100).round(1)
    print(wide.to_string())
    summary = reference.summary(scores).round(1)
    print(
        f"\nper tier: MAPE % and runs inside the stated {LEVEL:.0%} interval (fitted: too few runs for one)"
    )
    print(summary.to_string())
    if not profile.empty:
        print("\nstep profile (eager, step time only): MAPE % per tier")
        print(profile.groupby("tier", sort=False).step_s_ape.mean().round(1).to_string())
    test = reference.testset_numbers(device, level=LEVEL)
    if test:
        cal = test["calibration"]
        print(
            f"\ntest set ({test['runs']} runs of profile gpu-test, another machine, never tuned on): prior; "
            f"calibrated from that machine's calibration (host probe over depths {cal['probe_depths']}, "
            f"{cal['per_op_us']:.3g} us per operator); fitted on every reference run"
        )
        _print_tiers(pd.DataFrame(test["scores"]))
        for r in test["repeat"]:
            print(
                f"measured on both machines: {r['run_id']}: step x{r['step_s_again'] / r['step_s_first']:.3f}, "
                f"energy x{r['energy_j_again'] / r['energy_j_first']:.3f}"
            )
    for one in reference.one_machines_numbers(device, level=LEVEL):
        cal = one["calibration"]
        print(
            f"\n{one['set']}: one machine's calibration ({cal['per_op_us']:.3g} us per operator over depths "
            f"{cal['probe_depths']}, flagged: {cal['flagged'] or 'nothing'}; the runs' host over the probe's: "
            f"{one['host_speed_over_probe'] or 'not timed'}), then its runs; calibrated and prior "
            "fitted on nothing, fitted: leave one out (reference), fitted on that machine's reference runs (test)"
        )
        for split, rows in one["scores"].items():
            print(f"{split}:")
            _print_tiers(pd.DataFrame(rows))


def gpu_reference(device: str) -> int:
    """Every tier of the operator model on a GPU's reference runs (NVML-measured energy): per run and pooled,
    with the runs' own step-time CI beside the error, and the step profile's further configurations (time)."""
    from companion.energy import reference

    folder = reference.reference_dir(device)
    if not any((folder / d).is_dir() for d in ("runs", reference.MODES, reference.HOST)):
        raise SystemExit(
            f"error: nothing measured on {device} in {folder} (no runs/, {reference.MODES}/ or {reference.HOST}/); "
            "benchmarks/gpu_check.sh measures a GPU"
        )
    if (folder / "runs").is_dir():
        _reference_and_test_sets(device)
    modes = reference.modes_numbers(device, level=LEVEL)
    if modes:
        print(
            f"\nexecution modes and engines on one machine ({modes['runs']} runs; excluded: "
            f"{len(modes['excluded_runs'])}, see the folder's README): mean per configuration"
        )
        print(pd.DataFrame(modes["groups"]).round(2).to_string(index=False))
        for seq, b in modes["best"].items():
            print(
                f"s{seq} b32: best mode {b['mode']} (attn {b['attn']}): {b['speedup']:.2f}x eager's speed, energy x"
                f"{b['energy_ratio']:.2f}, MFU {b['mfu_pct']:.1f} % (eager {b['eager_mfu_pct']:.1f} %)"
            )
        for seq, e in modes["engines"].items():
            print(
                f"s{seq} b32: Accelerate / native (eager; runs {e['runs']}): energy per step x"
                f"{e['energy_ratio']:.3f}, step x{e['step_ratio']:.3f}"
            )
        ceilings = "; ".join(
            f"s{seq}: {c['matmul_attention_mfu_pct']:.1f} / {c['with_elementwise_mfu_pct']:.1f} / "
            f"{c['with_state_mfu_pct']:.1f}"
            for seq, c in modes["mfu_ceilings"].items()
        )
        print(
            f"MFU % the calibrated roofs allow eager's kernels (matmul+attention / +element-wise / +AdamW): {ceilings}"
        )
        probed = (
            "with the execution probe" if modes["probe"] else "without an execution probe (compiled as eager)"
        )
        print(f"calibrated tier {probed} (fitted on nothing), MAPE % per mode:")
        for m, v in modes["calibrated_mape_pct"].items():
            print(f"  {m}: time {v['time']:.1f}, energy {v['energy']:.1f} ({v['runs']} runs)")
        print(pd.DataFrame(modes["calibrated_by_run"]).round(1).to_string(index=False))
    host = reference.host_speed(device)
    if host:
        print(f"\n{host['config']} per machine (ms per step):")
        print(pd.DataFrame(host["rows"]).round(1).to_string(index=False))
        print(
            f"host cost per operator from the three-depth probe: {host['probe_per_op_us']:.3g} us; its calibration "
            "gives the calibrated tier (time / energy MAPE %): "
            + "; ".join(
                f"{k} {v['time_mape_pct']:.1f} / {v['energy_mape_pct']:.1f}"
                for k, v in host["calibrated_from_probe_machine"].items()
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
