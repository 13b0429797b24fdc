"""Which sizes the grid's parallel layouts are measured at: the earlier two sizes twice each, or the four sizes of
profile cpu once each, compared on the same build's validation set (the test set is printed, never used to choose;
the stored design builds hold its second draw, which is no longer scored, so their test column is empty).

    python benchmarks/parallel_design.py              # the builds of data/reference/cpu/parallel-design/
    python benchmarks/parallel_design.py DATA [DATA ...]

DATA: an archive (``python benchmarks/model_accuracy.py --pack DATA --out DIR``) or a ``data/`` folder after a sweep
and a calibration, measured with the parallel group of ``src/companion/runs/profiles/cpu.yaml`` at ``replicates: 2``,
so that both designs' runs are in one build: copy the profile to ``<somewhere>/cpu.yaml``, set the group's
``replicates`` to 2, then ``companion sweep --profile <somewhere>/cpu.yaml`` and ``make calibrate``. Each design is
a subset of that build's runs:

- ``two sizes x2``: the earlier grid, L4-h128-a4 s128 b4 and L2-h256-a8 s128 b8, both passes;
- ``four sizes x1``: the grid now, the group's first pass;
- ``four sizes x2``: every run of the group (about 100 s more of the sweep on 2 cores).

Each is scored as the validation page scores a build (``validation.score_build``: the step-time filter, the
held-out splits, the validation and test sets predicted by the fit on the whole sweep), for the fitted tier and the
calibrated tier. The validation set is the same runs for every design, so its differences are the design's.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.energy import stored  # noqa: E402

MAX_STEP_CI95_REL = yaml.safe_load((ROOT / "params" / "04_validation.yaml").read_text())["max_step_ci95_rel"]
DESIGN_BUILDS = ROOT / "data" / "reference" / "cpu" / "parallel-design"
EARLIER_SIZES = ("L4-h128-a4-s128-b4_", "L2-h256-a8-s128-b8_")
MODELS = ("operator_roofline", "calibrated_tier")


def designs(run_ids: pd.Series) -> dict[str, np.ndarray]:
    """{design: which of the sweep's runs it keeps}. The parallel group's runs are those at one thread per rank
    (their ids end in ``-t1``); its second pass's ids carry ``-r1``."""
    rid = run_ids.astype(str)
    group = rid.str.contains(r"-t1(?:-r\d+)?\.", regex=True).to_numpy()
    second = rid.str.contains(r"-r1\.", regex=True).to_numpy()
    earlier = rid.str.startswith(EARLIER_SIZES).to_numpy()
    if not (group & second).any():
        raise SystemExit(
            "no second pass of the parallel group: measure it with replicates: 2 (see the docstring)"
        )
    return {
        "two sizes x2": ~group | earlier,
        "four sizes x1": ~group | ~second,
        "four sizes x2": np.ones(len(rid), bool),
    }


def score(data: Path) -> pd.DataFrame:
    """One row per design and tier: pooled and worst-split time MAPE, the validation set's (all runs and those of
    several ranks) and the test set's."""
    from companion.energy import validation as val
    from companion.energy.registry import validated_models

    with tempfile.TemporaryDirectory() as tmp:
        dev, runs, off_grid = stored.build_runs(stored.unpacked(Path(data), Path(tmp)))
    every = validated_models(dev)
    models = {k: every[k] for k in MODELS}
    rows = []
    for design, keep in designs(runs.run_id).items():
        b = val.score_build(runs[keep], off_grid, models, max_step_ci95_rel=MAX_STEP_CI95_REL, workers=2)
        for model in MODELS:
            h = val.headline_figures(b.by_split, b.pooled, model)["time"]
            p = b.pred[(b.pred.model == model) & (b.pred.target == "time") & (b.pred.split == "holdout")]
            rows.append(
                {
                    "build": stored.sweep_name(Path(data)),
                    "design": design,
                    "model": model,
                    "sweep_runs": int(len(b.runs)),
                    "pooled_pct": h["pooled_mape_pct"],
                    "worst_split_pct": h["worst_split_mape_pct"],
                    "validation_pct": h["holdout_mape_pct"],
                    "validation_multi_pct": float(p[p.world_size > 1].ape_pct.mean()),
                    "test_pct": h["test_mape_pct"],
                }
            )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "data", nargs="*", type=Path, help=f"archives or data/ folders (default: {DESIGN_BUILDS})"
    )
    args = ap.parse_args(argv)
    sources = args.data or sorted(DESIGN_BUILDS.glob("*.tar.gz"))
    if not sources:
        print(f"no builds under {DESIGN_BUILDS}", file=sys.stderr)
        return 2
    table = pd.concat([score(d) for d in sources], ignore_index=True)
    pd.set_option("display.width", 200)
    print("time MAPE (%) per build, design and tier:")
    print(table.round(2).to_string(index=False))
    print("\nmean over builds:")
    print(table.groupby(["model", "design"], sort=False).mean(numeric_only=True).round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
