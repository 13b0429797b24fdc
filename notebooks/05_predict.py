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
# With a fitted law, a planned fine-tune's energy, time and CO₂ can be predicted before it runs, each with
# an interval. The same is available from the shell: `companion predict --model bert-tiny --examples 100000
# --epochs 3 --device cpu`. Change the parameters below (or pass them to papermill) to explore.

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

# %%
import pandas as pd
from myst_nb import glue

from companion import paths
from companion.energy.fit import FittedModel
from companion.energy.predict import make_plan, predict

fitted = FittedModel.load(paths.derived_dir(profile) / "fit.json")
runs = pd.read_csv(paths.derived_dir(profile) / "runs.csv")
device = device or fitted.artifact["device_name"]
vocab = vocab or int(runs.vocab.mode().iloc[0])
rows = []
for model in models:
    for seq in seq_lens:
        plan = make_plan(model=model, seq_len=seq, batch_size=batch_size, examples=examples, epochs=epochs,
                         device=device, country=country, vocab=vocab)
        p = predict(plan, fitted, law=law)
        rows.append({"model": model, "seq_len": seq, "steps": p["steps"], "energy_kwh": p["energy_kwh"],
                     "energy_kwh_lo": p["energy_kwh_interval"][0], "energy_kwh_hi": p["energy_kwh_interval"][1],
                     "time_h": p["time_h"], "co2_kg": p["co2_kg"], "warnings": len(p["warnings"]),
                     "energy_kind": p["fit_energy_kind"]})
explore = pd.DataFrame(rows)
first = explore.iloc[0]
glue("example_model", first.model, display=False)
glue("example_kwh", f"{first.energy_kwh:.3g}", display=False)
glue("example_kwh_lo", f"{first.energy_kwh_lo:.3g}", display=False)
glue("example_kwh_hi", f"{first.energy_kwh_hi:.3g}", display=False)
glue("example_time_h", f"{first.time_h:.3g}", display=False)
glue("explore_table", explore.round(4), display=False)
explore.round(4)

# %% [markdown]
# Requests outside the range the law was fitted on are flagged (`warnings`), and the energy kind of the
# fit (measured or estimated) travels with every prediction.

# %%
out = paths.derived_dir(profile) / "explore.csv"
explore.to_csv(out, index=False)
print(f"wrote {out}")
