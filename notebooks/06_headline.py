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
# # Results at a glance
#
# What the earlier stages' artifacts say, split by split and model by model, before any pooling: how far
# each model's predictions for runs it never saw fall from the measurements (MAPE, with a 90 % bootstrap
# interval over the held-out runs), and how often its 90 % prediction intervals contain the measurement
# (coverage; 90 % is the promise). The values are read from `validation.json`, `fit.json`, `runs.csv` and
# `explore.csv` by `companion.report.headline`.

# %% tags=["parameters"]
profile = "cpu"

# %%
# hide
import pandas as pd
import yaml
from myst_nb import glue

from companion import paths
from companion.report import figures, headline
from companion.report.stages import SOURCE_ROOT
from companion.runs.records import write_json

d = paths.derived_dir(profile)
validation = headline._read_json(d / "validation.json")
fit = headline._read_json(d / "fit.json")
runs = headline._read_csv(d / "runs.csv")
explore = headline._read_csv(d / "explore.csv")
predict_params = yaml.safe_load((SOURCE_ROOT / "params" / "05_predict.yaml").read_text()) or {}
label = figures.energy_label(runs) if len(runs) else headline.NA
splits = headline.split_table(validation)
coef = headline.law_coefficients(fit)
paper = headline.paper_vs_reproduction(validation, fit, label, splits)
glue("energy_label", label, display=False)
glue("noise_floor_pct", headline.noise_floor_pct(runs), display=False)
glue("absolute_answer", headline.absolute_answer(explore, predict_params, label), display=False)
glue("law_alpha", coef["alpha"], display=False)
for key, text in headline.pooled(validation).items():
    glue(f"pooled_{key}", text, display=False)
glue("law_beta", coef["beta"], display=False)
table = splits.style.format(precision=1).hide(axis="index") if len(splits) else headline.NA
glue("splits_table", table, display=False)
paper_style = paper.style.hide(axis="index").set_table_attributes('class="companion-prose"')
glue("paper_table", paper_style, display=False)
coefficients = headline.coefficient_table(fit)
flagged = coefficients[coefficients.note != ""] if len(coefficients) else coefficients
glue("n_flagged", len(flagged), display=False)
glue("n_coefficients", len(coefficients), display=False)

# %% [markdown]
# ## Held-out error and coverage, per split and model
#
# Energies: {glue:text}`energy_label`. The runs' own measurement noise — the median 95 % confidence
# half-width of a run's step time — is {glue:text}`noise_floor_pct` %: no model can be judged more precisely
# than that. A split with one held-out run has no interval.

# %%
table

# %% [markdown]
# ## The paper's claims and this reproduction
#
# The paper's abstract is not reproduced here; the left column states its claims as this project reads
# them (README, introduction), as claims. The right column is what this build's artifacts show.

# %%
paper_style

# %% [markdown]
# ## Fitted coefficients, with what they can and cannot tell
#
# Every coefficient of every model, per device, with its 90 % bootstrap interval. Of
# {glue:text}`n_coefficients` coefficients, {glue:text}`n_flagged` carry a note: a negative exponent on
# memory traffic, an energy per FLOP below what any device spends, an interval that spans zero or orders of
# magnitude, or an efficiency curve fitted through a single degree. Such a coefficient is not evidence about
# the hardware; it says these runs cannot separate that term from the others.

# %%
(coefficients.style.hide(axis="index").set_table_attributes('class="companion-prose"')
 if len(coefficients) else headline.NA)

# %%
out = write_json(d / "headline.json", {"energy_label": label, "noise_floor_pct": headline.noise_floor_pct(runs),
                                       "splits": splits.to_dict("records"), "law_coefficients": coef,
                                       "coefficients": coefficients.to_dict("records"),
                                       "paper_vs_reproduction": paper.to_dict("records")})
print(f"wrote {out}")
