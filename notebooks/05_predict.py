# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Predict your own fine-tune
#
# A planned fine-tune's energy, time and CO₂ can be predicted before it runs, each with an interval, in one of
# three tiers that every answer states: **fitted** (the operator roofline with coefficients fitted on this
# device's sweep), **calibrated** (the operator roofline at face value from the device's calibration file,
# `companion calibrate`, nothing fitted to a sweep; its interval is as wide as its errors on a swept device's
# runs, that device's own where it has a sweep) and **prior** (spec-sheet roofs and TDP with the efficiency and power priors
# cited in the hardware table, and wide intervals: what spec-sheet estimators such as LLMCarbon
# {cite}`faiz2024llmcarbon` give, with the uncertainty stated). The same is available from the shell (the table's first
# row's command is printed below it), and for a device never measured here,
# `companion plan --model bert-base --examples 100000 --epochs 3 --device H100 --devices 8`.
# Change the parameters below (or pass them to papermill) to explore.

# %% tags=["parameters"]
profile = "cpu"
device = None  # default: the device the profile's runs were measured on
vocab = None  # default: the vocabulary size of the profile's runs
models = ["bert-tiny", "bert-mini"]
seq_lens = [64, 128, 256]
batch_size = 8
examples = 100000
epochs = 3
country = "USA"
law = "roofline_power_law"
plan_device = "H100"
plan_devices = 8
plan_model = "bert-base"

# %%
import pandas as pd
from myst_nb import glue

from companion import paths
from companion.energy.fit import FittedModel
from companion.energy.predict import interval_cells, make_plan, plan_layouts, predict, predict_tiered

fitted = FittedModel.load(paths.derived_dir(profile) / "fit.json")
runs = pd.read_csv(paths.derived_dir(profile) / "runs.csv")
device = device or fitted.artifact["device_name"]
vocab = vocab or int(runs.vocab.mode().iloc[0])
rows = []
for model in models:
    for seq in seq_lens:
        plan = make_plan(
            model=model,
            seq_len=seq,
            batch_size=batch_size,
            examples=examples,
            epochs=epochs,
            device=device,
            country=country,
            vocab=vocab,
        )
        p = predict(plan, fitted, law=law)
        op = predict_tiered(plan)
        rows.append(
            {
                "model": model,
                "seq_len": seq,
                "steps": p["steps"],
                "energy_kwh": p["energy_kwh"],
                "energy_kwh_lo": p["energy_kwh_interval"][0],
                "energy_kwh_hi": p["energy_kwh_interval"][1],
                "time_h": p["time_h"],
                "co2_kg": p["co2_kg"],
                "warnings": len(p["warnings"]),
                "energy_kind": p["fit_energy_kind"],
                "op_tier": op["tier"],
                "op_energy_kwh": op["energy_kwh"],
                "op_energy_kwh_lo": op["energy_kwh_interval"][0],
                "op_energy_kwh_hi": op["energy_kwh_interval"][1],
                "op_time_h": op["time_h"],
                "op_time_h_lo": op["time_h_interval"][0],
                "op_time_h_hi": op["time_h_interval"][1],
                "op_co2_kg": op["co2_kg"],
                "carbon_g_per_kwh": op["carbon_intensity_g_per_kwh"],
            }
        )
explore = pd.DataFrame(rows)
first = explore.iloc[0]
glue("example_model", first.model, display=False)
glue("example_kwh", f"{first.energy_kwh:.3g}", display=False)
glue("example_kwh_lo", f"{first.energy_kwh_lo:.3g}", display=False)
glue("example_kwh_hi", f"{first.energy_kwh_hi:.3g}", display=False)
glue("example_time_h", f"{first.time_h:.3g}", display=False)
glue(
    "explore_setting",
    f"a batch of {batch_size} sequences, {examples:,} examples and {epochs} epochs on {device}; "
    f"CO₂ at the grid intensity of {country} ({first.carbon_g_per_kwh:.0f} g per kWh)",
    display=False,
)
# the page shows a compact view (the full table is explore.csv): one interval column per model
shown = pd.DataFrame(
    {
        "model": explore.model,
        "sequence length": explore.seq_len,
        "steps": explore.steps,
        "tier": explore.op_tier,
        **{
            name: interval_cells(explore[col], explore[f"{col}_lo"], explore[f"{col}_hi"])
            for name, col in (
                ("roofline kWh [90 %]", "op_energy_kwh"),
                ("roofline h [90 %]", "op_time_h"),
                ("paper's law kWh [90 %]", "energy_kwh"),
            )
        },
        "warnings": explore.warnings,
    }
)
shown_style = shown.style.hide(axis="index").set_table_attributes(
    'class="companion-numbers"'
)  # warnings: a count
glue("explore_table", shown_style, display=False)
shown_style

# %%
# the table's first row from the shell (the operator roofline; --law roofline_power_law for the paper's column)
print(
    f"companion predict --model {first.model} --seq-len {first.seq_len} --batch-size {batch_size} --vocab {vocab} \\\n"
    f"    --examples {examples} --epochs {epochs} --device {device} --country {country}"
)

# %% [markdown]
# Each row is {glue:text}`explore_setting`. The roofline columns are the operator roofline in the tier named in
# `tier`; the last interval column is the
# paper's law fitted on the same runs. Both intervals come from each model's errors on groups of runs left out
# of its fit (the operator roofline's, in its fitted tier, scaled for each request by the share of its predicted
# step in fixed costs, layout overheads and collectives: hence widths that differ from row to row); the paper's
# law errs more off its fitted runs, and its interval says so. `explore.csv` holds
# every figure unrounded. `warnings` counts the paper's law's warnings for that request: a value outside the
# range its runs covered, and where they apply a precision its runs were not measured at, the fit's own flags
# on that law, an η(p) its fit has no curve for, a layout that may not fit the device's memory; the text of each is in
# `companion predict --law roofline_power_law --json`.
#
# ## Planning on a device never measured here
#
# Every valid TP × FSDP layout (TP dividing the heads, the rest FSDP) and batch size of a {glue:text}`plan_model`
# fine-tune on {glue:text}`plan_devices` × {glue:text}`plan_device`, ranked by predicted energy; `Pareto` marks the
# layouts no other beats on both energy and time. Sequences of {glue:text}`plan_seq_len` tokens, in
# {glue:text}`plan_precision`; the batch size is global (examples per optimizer step, split over the FSDP ranks).
# CO₂ is at the grid intensity of the same country as above. `memory` is the step's estimated peak on one GPU
# (`companion.energy.memory`: weights, gradients and AdamW states as the layout shards them, the activations
# autograd saves, FSDP's gathered layers, backward's first buffers); a layout whose estimate exceeds 90 % of the
# GPU's memory is left out, and the notes say so.
# Tier: {glue:text}`plan_tier`; {glue:text}`plan_notes`.

# %%
planned = plan_layouts(
    plan_devices, model=plan_model, examples=examples, epochs=epochs, device=plan_device, country=country
)
plan_table = pd.DataFrame(planned["layouts"])
# each layout's point and interval in one cell, as the table above shows them (the page's width holds no more)
for col, name in (("energy_kwh", "kWh [90 %]"), ("time_h", "h [90 %]")):
    plan_table[col] = interval_cells(
        plan_table[col], plan_table[f"{col}_interval"].str[0], plan_table[f"{col}_interval"].str[1]
    )
    plan_table = plan_table.drop(columns=f"{col}_interval").rename(columns={col: name})
plan_table = plan_table.drop(
    columns=["steps", "mean_power_w", "co2_kg_interval"]
)  # all in `companion plan --json`
for key, value in (
    ("plan_model", plan_model),
    ("plan_devices", str(plan_devices)),
    ("plan_device", plan_device),
    ("plan_tier", f"{planned['tier']} ({planned['tier_means']})"),
    ("plan_seq_len", str(planned["seq_len"])),
    ("plan_precision", planned["precision"]),
    ("plan_notes", "; ".join(planned["notes"]) or "no notes"),
):
    glue(key, value, display=False)
plan_table = plan_table.rename(
    columns={
        "tp": "TP",
        "dp": "FSDP",
        "batch_size": "global batch",
        "co2_kg": "CO₂ (kg)",
        "eta": "η(p)",
        "memory_gb": "memory (GB)",
        "pareto": "Pareto",
    }
)
plan_table["Pareto"] = plan_table["Pareto"].map({True: "yes", False: ""})
plan_styled = plan_table.style.format({"CO₂ (kg)": "{:.3g}", "η(p)": "{:.2f}", "memory (GB)": "{:.3g}"}).hide(
    axis="index"
)
glue("plan_table", plan_styled, display=False)
plan_styled

# %% [markdown]
# Every prediction, here and from `companion predict --json`, carries its tier and whether its energy rests on
# measured or estimated power; a fitted tier's prediction also lists each input outside the range of the runs it
# was fitted on (`warnings`).

# %%
out = paths.derived_dir(profile) / "explore.csv"
explore.to_csv(out, index=False)
print(f"wrote {out}")
