"""How much of the model's off-grid error is the model's, and how much moves from build to build, per host.

    python benchmarks/error_spread.py                     # every stored build of data/reference/cpu/
    python benchmarks/error_spread.py A.tar.gz data/      # archives, or folders holding runs/ and devices/

The validation set's configurations are the same in every build, and so are the test set's (its current draw), so
one configuration's prediction error can be followed across builds. Each build's fitted tier (and its calibrated
tier) is fitted on that build's grid, after the validation page's step-time filter, and predicts that build's
off-grid runs. Per host, set and tier, a configuration's error (predicted / measured - 1) splits into

- its mean over builds: the model's own error on that configuration, which every build repeats
  ("structural", summarised as the root mean square over configurations), and
- its standard deviation over builds: what moves with the build (the host's state while the runs and the
  calibration were measured, each run's noise, the fit's own variance), pooled over configurations ("spread").

The MAPE, over the same runs, also carries each run's own noise between the replicates of one build, which neither
part holds. A spread near the MAPE says that a better model would gain little on that host. The test set is scored for reporting only, as on the validation page. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.energy import stored  # noqa: E402

REFERENCE = ROOT / "data" / "reference" / stored.PROFILE
# the validation page's step-time filter (params/04_validation.yaml)
MAX_STEP_CI95_REL = yaml.safe_load((ROOT / "params" / "04_validation.yaml").read_text())["max_step_ci95_rel"]
TIERS = {"operator_roofline": True, "calibrated_tier": False}  # name: fitted
GROUPS = {"holdout": "validation set", "test": "test set"}


def off_grid_errors(source: str, max_step_ci95_rel: float = MAX_STEP_CI95_REL) -> pd.DataFrame:
    """One row per off-grid run of one build and tier: build, host, group ('holdout', 'test'), configuration
    (``configuration``), the measured and predicted step time (s)."""
    from companion.energy import models as m
    from companion.energy.tables import usable_runs

    with tempfile.TemporaryDirectory() as tmp:
        dev, runs_all, off_grid = stored.build_runs(stored.unpacked(Path(source), Path(tmp)))
        grid, _ = usable_runs(runs_all, max_step_ci95_rel)
        rows = []
        for name, fitted in TIERS.items():
            point = m.fit_point(m.OperatorRoofline(name, name, dev=dev, fitted=fitted), grid)
            for group, runs_all in off_grid.items():
                if runs_all is None or runs_all.empty:
                    continue
                runs, _ = usable_runs(runs_all, max_step_ci95_rel)
                if runs.empty:
                    continue
                t, _ = point.predict(runs)
                rows.append(
                    pd.DataFrame(
                        {
                            "build": stored.sweep_name(Path(source)),
                            "host": runs.host.astype(str) if "host" in runs else "unknown-cpu",
                            "group": group,
                            "model": name,
                            "config": configuration(runs.run_id),
                            "measured_s": runs.step_s.to_numpy(float),
                            "predicted_s": np.asarray(t, float),
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def configuration(run_ids: pd.Series) -> np.ndarray:
    """A run's configuration as builds share it: its id without its replicate's number and without the digest of
    its protocol (a change of the measurement protocol gives the same shape, layout and precision a new digest)."""
    return run_ids.astype(str).str.replace(r"(-r\d+)?\.[0-9a-f]+$", "", regex=True).to_numpy()


def per_build(rows: pd.DataFrame, min_builds: int) -> pd.DataFrame:
    """Per host, group, model, configuration and build: the mean error (%) of the build's replicates of it, for
    the configurations at least ``min_builds`` builds measured (two at least: a spread needs two)."""
    if min_builds < 2:
        raise ValueError(f"min_builds={min_builds}: a spread between builds needs at least 2")
    keys = ["host", "group", "model", "config"]
    t = (
        rows.assign(error_pct=(rows.predicted_s / rows.measured_s - 1) * 100)
        .groupby([*keys, "build"])
        .error_pct.mean()
        .reset_index()
    )
    return t[t.groupby(keys).build.transform("size") >= min_builds]


def decompose(rows: pd.DataFrame, min_builds: int = 3) -> pd.DataFrame:
    """Per host, group and model, over the configurations at least ``min_builds`` builds measured: builds,
    configurations, runs, the MAPE of those runs (%), the structural error (root mean square over configurations
    of each one's mean error over builds, %) and the spread (each configuration's standard deviation of its
    per-build error, pooled over configurations, %). A build's replicates of a configuration are averaged first,
    so that the spread is between builds."""
    out = []
    kept = per_build(rows, min_builds)
    runs = rows.merge(kept[["host", "group", "model", "config", "build"]], how="inner")
    runs = runs.assign(error_pct=(runs.predicted_s / runs.measured_s - 1) * 100)
    for (host, group, model), g in kept.groupby(["host", "group", "model"], sort=True):
        per_config = g.groupby("config").error_pct.agg(["mean", "var", "size"])
        dof = per_config["size"] - 1
        r = runs[(runs.host == host) & (runs.group == group) & (runs.model == model)]
        out.append(
            {
                "host": host,
                "group": group,
                "model": model,
                "builds": int(g.build.nunique()),
                "configs": int(len(per_config)),
                "runs": int(len(r)),
                "mape_pct": float(r.error_pct.abs().mean()),
                "structural_pct": float(np.sqrt(np.mean(per_config["mean"] ** 2))),
                "spread_pct": float(np.sqrt(np.sum(per_config["var"] * dof) / np.sum(dof))),
            }
        )
    return pd.DataFrame(out)


def worst_configs(
    rows: pd.DataFrame, model: str = "operator_roofline", n: int = 5, min_builds: int = 3
) -> pd.DataFrame:
    """The validation set's configurations with the largest mean error over builds, per host (the fitted tier):
    builds, the mean and the standard deviation over builds of each build's mean error (%)."""
    g = per_build(rows[(rows.model == model) & (rows.group == "holdout")], min_builds)
    t = (
        g.groupby(["host", "config"])
        .error_pct.agg(builds="size", mean_pct="mean", sd_pct="std")
        .reset_index()
    )
    t = t.assign(size=t.mean_pct.abs()).sort_values(["host", "size"], ascending=[True, False])
    return t.groupby("host").head(n).drop(columns="size")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "sweeps", nargs="*", type=Path, help="archives or folders (default: data/reference/cpu/*.tar.gz)"
    )
    ap.add_argument("--workers", type=int, default=2, help="builds scored at once (default 2)")
    ap.add_argument(
        "--min-builds", type=int, default=3, help="builds a configuration needs to count (2 at least)"
    )
    args = ap.parse_args(argv)
    if args.min_builds < 2:
        ap.error(f"--min-builds {args.min_builds}: a spread between builds needs at least 2")
    sources = [str(s) for s in (args.sweeps or stored.stored_sweeps(REFERENCE))]
    if not sources:
        print(f"no stored builds under {REFERENCE}", file=sys.stderr)
        return 2
    with Pool(max(1, args.workers)) as pool:
        rows = pd.concat(pool.map(off_grid_errors, sources), ignore_index=True)
    table = decompose(rows, args.min_builds)
    if table.empty:
        print(
            f"no configuration was measured by {args.min_builds} of these {len(sources)} builds: give more builds, "
            "or a smaller --min-builds",
            file=sys.stderr,
        )
        return 2
    table["group"] = table.group.map(GROUPS)
    pd.set_option("display.width", 200)
    print(f"{len(sources)} builds; per host, set and tier (time per step, %):")
    print(table.round(1).to_string(index=False))
    print("\nthe validation set's configurations the fitted tier misses most, over builds:")
    print(worst_configs(rows, min_builds=args.min_builds).round(1).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
