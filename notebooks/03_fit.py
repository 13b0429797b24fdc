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
# # The efficiency factor, the law and the operator roofline
#
# The primary model is the **operator-level roofline** (`companion.energy.opmodel`). A step's time is a sum
# over the operators a BERT step runs: GEMMs by shape, attention, element-wise and norm traffic, and the
# weights', gradients' and AdamW's traffic. A GEMM costs its own roofline, max(FLOPs / the achieved GEMM roof for
# its shape, bytes / bandwidth). Where the calibration measured a class directly, its measurement replaces the
# roofline: attention costs its measured time per score element (per kernel, fused or not), element-wise
# traffic and the AdamW step move their bytes at the bandwidths measured for them (without a calibration:
# the attention GEMMs' roofline and the memory roof). To that sum come fixed costs per step and per layer,
# each parallel layout's own overhead, and the TP and FSDP collectives (latency + bytes / bandwidth; TP's
# activation all-reduces are counted per layer as in {cite}`shoeybi2019,korthikanti2022`). A layout's overhead is the extra
# work its framework does on every step: for TP, routing each sharded operation through PyTorch's distributed
# tensors (*DTensor dispatch*); for FSDP, gathering and freeing each layer's weights around its use (*FSDP
# hooks*).
#
# The roofs come from this device's calibration file (`companion calibrate`). The calibration also trains a
# tiny BERT under every TP, FSDP and 2-D layout to measure the layouts' overheads. The fit then learns one
# non-negative multiplier per term, except the collectives' latency, which stays at its calibrated value
# (it grows with collectives × hops as the layouts' overheads do, so the sweep cannot tell the two apart).
# Three groups of multipliers are pulled towards what the calibration measured, so that a few runs cannot set
# them for every case:
#
# * the layout overheads', so a layout mode the sweep never ran is still predicted from its measurement;
# * the collective bandwidth's (weakly): a training step's collectives run well below the isolated bandwidth,
#   and a few runs of one mode must not decide by how much for every mode;
# * the weights' and optimizer state's traffic, towards the calibration's timed AdamW step: across a grid this
#   traffic grows with the parameter count as the GEMMs do, so its multiplier could take over GEMM time on the
#   large runs, and a short run, mostly this traffic, would then be predicted with that multiplier.
#
# Last, each parallel layout the sweep ran gets one more factor, on its own overhead and collective seconds
# ("factor on layout tpT-dpD" below: T-way TP × D-way FSDP, so tp1-dp2 is FSDP over 2 ranks and tp2-dp2 is
# 2-D), pulled towards 1; a layout the sweep never ran keeps 1.
#
# Energy is static power × metered units (the devices or nodes an energy meter reads) × time, plus, on a CPU
# node, a power per busy core × time (ranks waiting on a collective or a time slice still hold their core),
# plus dynamic energy per FLOP, per byte and per byte communicated. So η(p) and the power under each layout are
# outputs of the model. The mean power is capped at the device's loaded power from its calibration (every
# core running GEMMs): a short step's FLOP and byte rates can push the linear terms past a power the device
# never draws.
#
# Beside it, as the paper's reproduction:
#
# * η(p) per layout mode with the universal scalability law {cite}`gunther2007`,
#   η(p) = 1 / (1 + σ(p−1) + κ·p(p−1)), so that degrees never measured can be predicted;
# * the laws, each a small named model (`companion.energy.laws`): the paper's roofline-inspired power law
#   $E = c\,F^{\alpha} Q^{\beta} / \eta(p)$ (with $p\,\eta(p)$ in the denominator where one meter reads a node's p
#   ranks, see [the introduction](../intro.md)), an energy roofline
#   $E = \varepsilon_F F + \varepsilon_Q Q + P_0\,T$, and three baselines.
#
# The laws read η from the *fitted* USL model, never from a run's own measured speedup. Coefficient
# intervals come from a case bootstrap. A law's *prediction* interval does not: it comes from the law's errors
# on model sizes, layouts and degrees left out of its fit (each left-out fit refits the USL too), as the
# operator roofline's does.

# %% tags=["parameters"]
profile = "cpu"
laws = ["roofline_power_law", "energy_roofline", "tokens_linear", "flops_power_law", "tdp_time"]
n_boot = 200
seed = 0
max_step_ci95_rel = 0.1

# %%
import pandas as pd
from IPython.display import display
from myst_nb import glue

from companion import paths

from companion.report import figures, headline, prose
from companion.energy.fit import FittedModel, design_matrix, fit_all
from companion.runs.records import write_json
from companion.energy.laws import LAWS
from companion.energy.models import OperatorPoint, fit_operator, law_intervals
from companion.energy.calibration import load_device_roofs
from companion.energy.opmodel import DeviceRoofs, layout_names, operator_frame, scaled_terms
from companion.energy.tables import usable_runs

figures.use_offline_renderer()
df, left_out = usable_runs(pd.read_csv(paths.derived_dir(profile) / "proxies.csv"), max_step_ci95_rel)
glue("energy_label", figures.energy_label(df), display=False)
glue("n_left_out", str(len(left_out)) if left_out else "none", display=False)
glue("step_ci_limit_pct", f"{max_step_ci95_rel * 100:.0f}", display=False)
artifact = fit_all(df, laws=laws, n_boot=n_boot, seed=seed)
artifact["left_out_runs"] = left_out
dev = load_device_roofs(artifact["device_name"], artifact["precision"][0])
artifact.update(fit_operator(df, dev))
artifact["law_intervals"] = law_intervals(df, laws)  # each law's prediction interval, from held-out groups
fitted = FittedModel(artifact)

# %% [markdown]
# ## η(p): measured points and fitted curves

# %%
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
# static part P₀·T, its time predicted as T = max(F / (u·peak), Q / (v·bandwidth)) / (p·η(p)): u and v are
# the shares of the compute and the memory roof a run reaches, fitted with the rest. Its fitted static power
# P₀ is bounded by the device's idle power and TDP where the hardware table knows them.
# {glue:text}`static_power_text`

# %%
theta = fitted.energy["energy_roofline"].theta
parts = LAWS["energy_roofline"].decompose(design_matrix(df, fitted.usl), theta)
split = pd.concat([df[["run_id", "mode", "flops_per_step"]], parts], axis=1)
glue("p0_w", f"{theta[2]:.1f}", display=False)
ram_shares = prose.ram_shares(df)
glue(
    "static_power_text",
    prose.static_power_text(
        parts.static_j.sum() / parts.sum(axis=1).sum(),
        theta[2],
        dev.idle_w,
        ram_shares.median() if len(ram_shares) else None,
    ),
    display=False,
)
glue("fig_static", figures.static_vs_dynamic(split, df), display=False)
figures.static_vs_dynamic(split, df)

# %% [markdown]
# ## The operator roofline
#
# Runs left out of every fit because their step time's 95 % interval was wider than ±{glue:text}`step_ci_limit_pct` %
# (an interval that wide comes from other load on the machine): {glue:text}`n_left_out`. The
# roofs are {glue:text}`op_roofs_source`. Each time coefficient multiplies its term's roofline time: 1 means the
# roofline holds as calibrated; a "factor on layout" row is one more factor, on the overhead and collective
# terms of one parallel layout the sweep ran (1: the layouts' overheads in the ratio the calibration's probe
# measured; a layout the sweep never ran keeps that ratio). The figure shows each term's share of every run's
# step, the table after it the coefficients (the energy ones in their own units: static power per metered unit,
# power per busy core, joules per FLOP, per byte and per byte communicated). Where the ranks share one node's
# cores, the fit also chooses `thread_exponent` (on a grid from 0 to 1): how a step's speed grows with a rank's
# threads, which for a small model's step is less than the calibration's large GEMM shows.
# {glue:text}`op_zero_energy`

# %%
op = artifact["operator_model"]
op_dev = DeviceRoofs.from_json(op["dev"])  # the calibration's roofs, with the thread exponent the fit chose
glue("op_roofs_source", f"{dev.tier} ({dev.name})", display=False)
zero = [headline.coefficient_words(k) for k, v in op["energy"].items() if v == 0]
glue(
    "op_zero_energy",
    (
        f"Fitted to 0 on these runs, so absent from this build's energy model: {', '.join(zero)}. "
        "The fit is non-negative; a term at 0 is one these runs cannot tell from the others, not "
        "a finding that the hardware spends nothing on it."
    )
    if zero
    else "",
    display=False,
)
# the coefficient table as the fitted point describes itself (multipliers, energies, thread exponent, layouts)
op_coef = OperatorPoint(op_dev, op["time"], op["energy"], op.get("layout_scale") or {}).describe()
glue("op_coefficients", op_coef.round(6), display=False)
terms = operator_frame(df, op_dev)
scaled = pd.concat(
    [
        df[["run_id", "mode", "flops_per_step"]],
        scaled_terms(terms, op["time"], op.get("layout_scale"), layout_names(df)),
    ],
    axis=1,
)
glue("fig_operator_time", figures.operator_time_breakdown(scaled, df), display=False)
figures.operator_time_breakdown(scaled, df)

# %%
(
    op_coef.assign(
        target=op_coef.target.map({"step_s": "time", "energy_per_step_j": "energy"}),
        meaning=op_coef.param.map(headline.coefficient_words),
    )[["target", "meaning", "value", "unit"]]  # the names in code are in fit.json
    .rename(columns={"meaning": "coefficient"})
    .style.format({"value": "{:.3g}"})
    .hide(axis="index")
)

# %% [markdown]
# η(p) from the operator roofline (its predicted T₁ / (p T_p)) against the measured η, and beside it the
# paper's USL fitted per model size (table below): a USL per size can follow a fixed per-collective latency
# that one USL per mode pooled over sizes cannot.

# %%
eta_rows = pd.DataFrame(artifact["eta_model"])
if len(eta_rows):
    glue("fig_eta_model", figures.eta_model_vs_measured(eta_rows, df), display=False)
    display(figures.eta_model_vs_measured(eta_rows, df))

# %%
usl_size = headline.usl_table(artifact["usl_per_size"])
unphysical = [
    f"{k} = {law_coef.loc[k, 'value']:.2f}"
    for k, bad in (
        ("alpha", not 0 < law_coef.loc["alpha", "value"] <= 1.5),
        ("beta", law_coef.loc["beta", "value"] < 0),
    )
    if bad
]
glue(
    "law_unphysical",
    (
        "The paper's law has unphysical coefficients here (" + ", ".join(unphysical) + "): energy "
        "cannot fall as FLOPs or memory traffic rise; F and Q are too correlated in this sweep to be "
        "told apart."
    )
    if unphysical
    else (
        "The paper's law's coefficients pass the physical checks: "
        "0 < α ≤ 1.5 and β ≥ 0 (energy does not fall as FLOPs or memory traffic rise)."
    ),
    display=False,
)
usl_size.style.hide(axis="index")

# %% [markdown]
# {glue:text}`law_unphysical`

# %%
out = write_json(paths.derived_dir(profile) / "fit.json", artifact)
print(f"wrote {out}")
