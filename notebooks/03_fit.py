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
# # The efficiency factor and the law
#
# Two models are fitted to every run of the profile:
#
# * η(p) per layout mode with the universal scalability law, η(p) = 1 / (1 + σ(p−1) + κ·p(p−1)), so that
#   degrees never measured can be predicted;
# * the laws, each a small named model (`companion.energy.laws`): the paper's roofline-inspired power law
#   $E = c\,F^{\alpha} Q^{\beta} / \eta(p)$, an energy roofline
#   $E = \varepsilon_F F + \varepsilon_Q Q + P_0\,T$, and three baselines.
#
# The laws read η from the *fitted* USL model, never from a run's own measured speedup. Coefficient
# intervals come from a case bootstrap.

# %% tags=["parameters"]
profile = "cpu"
laws = ["roofline_power_law", "energy_roofline", "tokens_linear", "flops_power_law", "tdp_time"]
n_boot = 200
seed = 0

# %%
import pandas as pd
from myst_nb import glue

from companion import paths

from companion.report import figures
from companion.energy.fit import FittedModel, design_matrix, fit_all
from companion.runs.records import write_json
from companion.energy.laws import LAWS

figures.use_offline_renderer()
df = pd.read_csv(paths.derived_dir(profile) / "proxies.csv")
glue("energy_label", figures.energy_label(df), display=False)
artifact = fit_all(df, laws=laws, n_boot=n_boot, seed=seed)
fitted = FittedModel(artifact)

# %% [markdown]
# ## η(p): measured points and fitted curves

# %%
usl = pd.DataFrame([{k: u[k] for k in ("mode", "sigma", "kappa", "degrees", "sigma_ci90", "kappa_ci90")}
                    for u in artifact["usl"]])
glue("usl_table", usl, display=False)
glue("fig_eta", figures.eta_curves(df, artifact["usl"]), display=False)
figures.eta_curves(df, artifact["usl"])

# %% [markdown]
# ## Coefficients with 90 % bootstrap intervals
#
# Fitted to {glue:text}`energy_label`.

# %%
coef = fitted.coefficient_table()
law_coef = coef[(coef.law == "roofline_power_law") & (coef.target == "energy_per_step_j")].set_index("param")
for name in ("alpha", "beta"):
    glue(f"law_{name}", f"{law_coef.loc[name, 'value']:.2f}", display=False)
    glue(f"law_{name}_ci", f"[{law_coef.loc[name, 'lo']:.2f}, {law_coef.loc[name, 'hi']:.2f}]", display=False)
glue("fig_coefficients", figures.coefficients(coef[coef.target == "energy_per_step_j"], df), display=False)
figures.coefficients(coef[coef.target == "energy_per_step_j"], df)

# %% [markdown]
# ## Static and dynamic energy
#
# The energy roofline splits each run's energy into a compute part ε_F·F, a memory part ε_Q·Q and a
# static part P₀·T. Its fitted static power P₀ is bounded by the device's idle power and TDP where the
# hardware table knows them.

# %%
theta = fitted.energy["energy_roofline"].theta
parts = LAWS["energy_roofline"].decompose(design_matrix(df, fitted.usl), theta)
split = pd.concat([df[["run_id", "mode", "flops_per_step"]], parts], axis=1)
glue("static_share_pct", f"{(parts.static_j.sum() / parts.sum(axis=1).sum()) * 100:.0f}", display=False)
glue("p0_w", f"{theta[2]:.1f}", display=False)
glue("fig_static", figures.static_vs_dynamic(split, df), display=False)
figures.static_vs_dynamic(split, df)

# %%
out = write_json(paths.derived_dir(profile) / "fit.json", artifact)
print(f"wrote {out}")
