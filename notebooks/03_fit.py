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
# The primary model is the **operator roofline**: a step's time is a sum over the operator classes a BERT step
# runs, each costed from this device's calibration ([](02_proxies.ipynb)): GEMMs at the roof of their shape,
# attention, element-wise and optimizer traffic at their measured rates, fixed costs per step and per layer,
# each layout's overhead (TP's dispatch of sharded operations, FSDP's hooks that gather and free weights) and
# the collectives {cite}`shoeybi2019,korthikanti2022`. Energy adds static power, power per busy core (CPU), and
# energy per FLOP, byte and byte communicated, capped at the calibrated loaded power. η(p) is an output.
#
# The fit learns one non-negative multiplier per term, some pulled towards the calibration (the collectives'
# latency is held). Each layout the sweep ran gets one more factor, pulled towards 1; on a shared CPU node the
# fit also chooses how speed grows with threads and how ranks sharing cores slow each other.
#
# Beside it, the paper's reproduction: η(p) per layout mode from the universal scalability law (USL)
# {cite}`gunther2007`, η(p) = 1 / (1 + σ(p−1) + κ·p(p−1)); [the paper's law](../intro.md), with η from that
# fit; an energy roofline $E = \varepsilon_F F + \varepsilon_Q Q + P_0\,T$; and three baselines.
#
# Runs left out of every fit (step time's 95 % interval wider than ±{glue:text}`step_ci_limit_pct` %):
# {glue:text}`n_left_out`.

# %% tags=["parameters"]
profile = "cpu"
laws = ["roofline_power_law", "energy_roofline", "tokens_linear", "flops_power_law", "tdp_time"]
n_boot = 200
seed = 0
max_step_ci95_rel = 0.1
holdout_profile = "holdout"  # the validation set: the intervals' off-grid width (none where it has no runs)

# %%
import pandas as pd
from IPython.display import display
from myst_nb import glue

from companion import paths

from companion.report import figures, prose, sentences
from companion.energy.fit import FittedModel, design_matrix, fit_all
from companion.runs.records import write_json
from companion.energy.laws import LAWS
from companion.energy.models import OperatorPoint, fit_operator, law_intervals
from companion.energy.calibration import load_device_roofs
from companion.energy.opmodel import DeviceRoofs, layout_degrees, layout_names, operator_frame, scaled_terms
from companion.energy.opmodel import proxy_roofs
from companion.energy.tables import host_speed_reference, off_grid_runs, usable_runs
from companion.runs.profiles import off_grid_profile

figures.use_offline_renderer()
grid = pd.read_csv(paths.derived_dir(profile) / "proxies.csv")
df, left_out = usable_runs(grid, max_step_ci95_rel)
glue("n_left_out", str(len(left_out)) if left_out else "none", display=False)
glue("step_ci_limit_pct", f"{max_step_ci95_rel * 100:.0f}", display=False)
artifact = fit_all(df, laws=laws, n_boot=n_boot, seed=seed)
artifact["left_out_runs"] = left_out
dev = load_device_roofs(artifact["device_name"], artifact["precision"][0])
# the validation set's runs (the step-time filter applied as to the sweep's): every interval's off-grid width
held_profile = off_grid_profile(profile, holdout_profile)  # the validation set this profile measured, if any
held = off_grid_runs(
    {"holdout": paths.runs_dir(held_profile) if held_profile else None},
    {dev.name: proxy_roofs(dev)},
    host_speed_reference(grid),  # at the sweep's typical host speed, as its runs
)["holdout"]
held = usable_runs(held, max_step_ci95_rel)[0] if held is not None else None
artifact.update(fit_operator(df, dev, off_grid=held))
artifact["law_intervals"] = law_intervals(
    df, laws, off_grid=held
)  # each law's interval, from held-out groups
fitted = FittedModel(artifact)


# %% [markdown]
# ## η(p) and the USL

# %%
# hide
figures.eta_curves(df, artifact["usl"])

# %% [markdown]
# ## The laws' coefficients

# %%
# hide
coef = fitted.coefficient_table()
law_coef = coef[(coef.law == "roofline_power_law") & (coef.target == "energy_per_step_j")].set_index("param")
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
    else "The paper's law passes the physical checks 0 < α ≤ 1.5 and β ≥ 0.",
    display=False,
)
figures.coefficients(coef[coef.target == "energy_per_step_j"], df)

# %% [markdown]
# {glue:text}`law_unphysical`
#
# ## Static and dynamic energy
#
# The energy roofline splits each run's {glue:text}`fit_energy_label` energy into compute ε_F·F, memory ε_Q·Q
# and static P₀·T. {glue:text}`static_power_text`

# %%
# hide
theta = fitted.energy["energy_roofline"].theta
parts = LAWS["energy_roofline"].decompose(design_matrix(df, fitted.usl), theta)
split = pd.concat([df[["run_id", "mode", "flops_per_step"]], parts], axis=1)
glue("fit_energy_label", figures.energy_word(df), display=False)  # how it was obtained: the runs' page
glue(
    "static_power_text",  # CodeCarbon's RAM share is said on the runs' page, where the joules are described
    prose.static_power_text(parts.static_j.sum() / parts.sum(axis=1).sum(), theta[2], dev.idle_w, None),
    display=False,
)
figures.static_vs_dynamic(split, df)

# %% [markdown]
# ## The operator roofline
#
# Its coefficients, on the {glue:text}`op_roofs_source` roofs. A time multiplier scales its term's calibrated
# cost (1: as calibrated); a layout's factor (rows named by layout), its overhead and collectives.
# {glue:text}`op_zero_energy`

# %%
# hide
op = artifact["operator_model"]
op_dev = DeviceRoofs.from_json(op["dev"])  # the calibration's roofs, with the thread exponent the fit chose
glue("op_roofs_source", f"{dev.tier} ({dev.name})", display=False)
# the coefficients as the fitted point describes itself (multipliers, energies, thread exponent, layouts)
op_coef = OperatorPoint(op_dev, op["time"], op["energy"], op.get("layout_scale") or {}).describe()
energy_rows = op_coef.target == "energy_per_step_j"
glue(
    "op_zero_energy",
    "A term fitted to 0 is one these runs cannot tell from the others, not proof that it costs nothing."
    if (op_coef.value == 0).any()
    else "",
    display=False,
)
names = []  # each coefficient in words; a layout's factor by its layout ("TP, 2 ranks")
for p in op_coef.param:
    if p.startswith("layout_scale["):
        tp, dp = layout_degrees(p[len("layout_scale[") : -1])
        mode = "2d" if tp > 1 and dp > 1 else "tp" if tp > 1 else "fsdp" if dp > 1 else "single"
        names.append(f"{figures.MODE_WORDS[mode]}, {tp * dp} ranks")
    else:
        names.append(sentences.coefficient_words(p))
pd.DataFrame(
    {
        "coefficient": names,
        "value": [
            f"{r.value:.3g} {r.unit.split(' (')[0].replace('metered unit', 'metered node or device')}"
            if energy
            else f"{r.value:.3g}"
            for r, energy in zip(op_coef.itertuples(), energy_rows)
        ],
    }
).style.hide(axis="index")

# %%
# hide
terms = operator_frame(df, op_dev)
scaled = pd.concat(
    [
        df[["run_id", "mode", "flops_per_step"]],
        scaled_terms(terms, op["time"], op.get("layout_scale"), layout_names(df)),
    ],
    axis=1,
)
figures.operator_time_breakdown(scaled, df)

# %%
# hide
eta_rows = pd.DataFrame(artifact["eta_model"])
if len(eta_rows):
    display(figures.eta_model_vs_measured(eta_rows, df))

# %%
out = write_json(paths.derived_dir(profile) / "fit.json", artifact)
print(f"wrote {out}")
