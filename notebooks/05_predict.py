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
# three {term}`tiers <Tier>` that every prediction states: **fitted** on this device's sweep, **calibrated** from
# its calibration alone, or **prior** from spec-sheet roofs and published priors, as estimators such as LLMCarbon
# {cite}`faiz2024llmcarbon` do. The commands, for any model and device: [](../reproduce.md).

# %% tags=["parameters"]
profile = "cpu"
device = None  # default: the device the profile's runs were measured on
vocab = None  # default: the vocabulary size of the profile's runs
models = ["bert-tiny", "bert-mini"]
seq_lens = [64, 256]
batch_size = 8
examples = 100000
epochs = 3
country = "USA"
law = "roofline_power_law"
plan_device = "H100"
plan_devices = 8
plan_model = "bert-base"

# %%
# hide
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
    f"{examples:,} examples for {epochs} epochs in batches of {batch_size} sequences on {device}, its energy "
    + (
        "measured, as the sweep's"
        if first.energy_kind == "measured"
        else "estimated like the sweep's, not metered"
    ),
    display=False,
)
warned = int((explore.warnings > 0).sum())
glue(
    "explore_warnings",
    f"The paper's law warns on {warned} of these {len(explore)} requests",
    display=False,
)
# the page shows a compact view (the full table is the stage's download): one interval column per model
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
        "roofline kg CO₂": [f"{x:.3g}" for x in explore.op_co2_kg],
    }
)
shown_style = shown.style.hide(axis="index").set_table_attributes('class="companion-numbers"')
glue("explore_table", shown_style, display=False)
shown_style

# %% [markdown]
# Each row is one fine-tune: {glue:text}`explore_setting`. The roofline columns are the operator roofline in the row's tier; the
# last is the paper's law fitted on the same runs. Each interval is as wide as its model's errors on runs left
# out of its fit ([](04_validation.ipynb)).
# {glue:text}`explore_warnings` (inputs outside its runs, or a layout that may not fit in memory).
#
# ## Planning on GPUs never swept here
#
# The table predicts every layout (TP dividing the heads, the rest FSDP) and global batch (examples per optimizer
# step) of a {glue:text}`plan_model` fine-tune of the same examples and epochs on {glue:text}`plan_devices` ×
# {glue:text}`plan_device`, with
# sequences of {glue:text}`plan_seq_len` tokens in {glue:text}`plan_precision`.
# Tier: {glue:text}`plan_tier`; {glue:text}`plan_notes`. Layouts whose estimated memory exceeds 90 % of the
# GPU's are left out. {glue:text}`plan_best`.

# %%
# hide
planned = plan_layouts(
    plan_devices, model=plan_model, examples=examples, epochs=epochs, device=plan_device, country=country
)
plan_table = pd.DataFrame(planned["layouts"])
for key, value in (
    ("plan_model", plan_model),
    ("plan_devices", str(plan_devices)),
    ("plan_device", plan_device),
    ("plan_tier", planned["tier"]),
    ("plan_seq_len", str(planned["seq_len"])),
    ("plan_precision", planned["precision"]),
    ("plan_notes", "; ".join(planned["notes"]) or "no notes"),
):
    glue(key, value, display=False)
best, faster = plan_table.iloc[0], len(planned["pareto_front"]) - 1
glue(
    "plan_best",
    (
        "The cheapest is also the fastest"
        if not faster
        else f"The cheapest ({faster} faster layouts cost more)"
    )
    + f": TP {best.tp} × FSDP {best.dp} at a global batch of {best.batch_size}, {best.energy_kwh:.3g} kWh "
    f"[{best.energy_kwh_interval[0]:.3g}, {best.energy_kwh_interval[1]:.3g}], {best.time_h:.3g} h "
    f"[{best.time_h_interval[0]:.3g}, {best.time_h_interval[1]:.3g}], {best.co2_kg:.3g} kg CO₂ at the grid "
    f"intensity of {country} "
    f"({first.carbon_g_per_kwh:.0f} g per kWh); η(p) {best.eta:.2f}, {best.memory_gb:.3g} GB per GPU",
    display=False,
)
# the page shows energy and time, one column per layout (CO₂, η(p) and memory: the download and the command)
plan_table["cell"] = [f"{e:.3g} / {t:.3g}" for e, t in zip(plan_table.energy_kwh, plan_table.time_h)]
plan_table["layout"] = [f"TP {tp} × FSDP {dp}" for tp, dp in zip(plan_table.tp, plan_table.dp)]
plan_view = (
    plan_table.pivot(index="batch_size", columns="layout", values="cell")
    .sort_index(ascending=False)
    .fillna("—")
    .reset_index()
    .rename(columns={"batch_size": "global batch"})
)
plan_view.columns.name = None
plan_styled = (
    plan_view.style.hide(axis="index")
    .set_table_attributes('class="companion-numbers"')
    .set_caption(
        f"Predicted, not measured ({planned['tier']} tier): kWh / hours for {plan_model} on {plan_devices} × "
        f"{plan_device}; each within the interval stated above"
    )
)
glue("plan_table", plan_styled, display=False)
plan_styled

# %%
out = paths.derived_dir(profile) / "explore.csv"
explore.to_csv(out, index=False)
print(f"wrote {out}")
