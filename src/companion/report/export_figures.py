"""Export every figure of a profile as SVG and PNG, rebuilt from the stage artifacts.

python -m companion.report.export_figures --profile cpu --out build/figures/cpu
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from companion import paths

from companion.report import figures
from companion.report.stages import profile_name
from companion.energy.fit import FittedModel, design_matrix
from companion.energy.laws import LAWS


def all_figures(profile: str) -> dict:
    d = paths.derived_dir(profile)
    df = pd.read_csv(d / "proxies.csv")
    fitted = FittedModel.load(d / "fit.json")
    val = json.loads((d / "validation.json").read_text())
    summary, pred = pd.DataFrame(val["summary"]), pd.DataFrame(val["predictions"])
    coef = fitted.coefficient_table()
    parts = LAWS["energy_roofline"].decompose(
        design_matrix(df, fitted.usl), fitted.energy["energy_roofline"].theta
    )
    split = pd.concat([df[["run_id", "mode", "flops_per_step"]], parts], axis=1)
    return {
        "energy_vs_flops": figures.energy_vs_flops(df),
        "roofline": figures.roofline(df),
        "eta": figures.eta_curves(df, fitted.artifact["usl"]),
        "predicted_vs_measured": figures.predicted_vs_measured(pred, df, "roofline_power_law"),
        "residuals_by_group": figures.residuals_by_group(pred, df, "roofline_power_law"),
        "coefficients": figures.coefficients(coef[coef.target == "energy_per_step_j"], df),
        "baselines": figures.baseline_comparison(summary, df),
        "static_vs_dynamic": figures.static_vs_dynamic(split, df),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for name, chart in all_figures(profile_name(args.profile)).items():
        for path in figures.export(chart, args.out, name):
            print(path)


if __name__ == "__main__":
    main()
