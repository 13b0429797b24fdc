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
# # Proxies and the roofline
#
# For every run we compute three lightweight proxies from its configuration and its measured token
# counts: **compute** (FLOPs per step), **memory traffic** (bytes per step, all ranks) and the
# **efficiency factor** η(p) = T₁ / (p·T_p). The formulas live in `companion.energy.proxies`, each in one place,
# and are tested against independent counts (`FlopCounterMode`, `numel()`).

# %% tags=["parameters"]
profile = "cpu"
check_configs = [
    [2, 128, 4, 128, 8],
    [4, 256, 8, 64, 8],
    [1, 64, 2, 256, 4],
]  # layers, hidden, heads, seq, batch

# %%
# hide
import numpy as np
import pandas as pd
from IPython.display import HTML, display
from myst_nb import glue

from companion import paths

from companion.energy import hardware, tables

from companion.report import figures, prose
from companion.energy.opcount import proxy_check
from companion.energy.noise import replicate_noise
from companion.energy.calibration import measured_roofs
from companion.energy.opmodel import FSDP_UNIT_WORDS, layout_unit_words
from companion.energy.predict import find_calibration
from companion.runs.calibrate import calibration_facts, calibration_summary, shown_value
from companion.runs.records import write_json

figures.use_offline_renderer()
runs = pd.read_csv(paths.derived_dir(profile) / "runs.csv")
devices_measured = [d for d in set(runs.device_name) if hardware.device_spec(d)["bandwidth_tbs"] == "measure"]
roofs = {d: measured_roofs(d) for d in devices_measured}  # the device's calibration (data/devices/<d>.json)
df = tables.proxies_frame(runs, roofs)
glue("energy_label", figures.energy_label(df), display=False)

# %% [markdown]
# ## The roofs of each device
#
# The compute roof (peak FLOP/s) and the memory roof (bandwidth) bound what a run can reach; their ratio is
# the ridge, the arithmetic intensity above which a run can be compute-bound. For a CPU they are the ones
# its calibration measured (`companion calibrate`, the same file the operator model reads); for GPUs they
# come from the hardware table.

# %%
roof_table = (
    df.groupby("device_name")[["peak_flops_per_s", "bandwidth_bytes_per_s"]]
    .first()
    .assign(ridge=lambda t: t.peak_flops_per_s / t.bandwidth_bytes_per_s)
    .assign(source=lambda t: [roofs[d]["method"] if d in roofs else "hardware table" for d in t.index])
    .reset_index()
    .rename(
        columns={
            "device_name": "device",
            "peak_flops_per_s": "compute roof (FLOP/s)",
            "bandwidth_bytes_per_s": "memory roof (B/s)",
            "ridge": "ridge (FLOP/byte)",
            "source": "how obtained",
        }
    )
)
glue("roof_table", roof_table.style.format(precision=3).hide(axis="index"), display=False)
roof_table.style.format(
    {"compute roof (FLOP/s)": "{:.3g}", "memory roof (B/s)": "{:.3g}", "ridge (FLOP/byte)": "{:.1f}"}
).hide(axis="index")

# %% [markdown]
# ## What the calibration measured
#
# `companion calibrate` times, in about a minute, every quantity the operator roofline reads: GEMM throughput
# over BERT's shapes, attention, memory, element-wise and optimizer traffic, the cost of one operator in a
# training step, how the node's cores share work, the collectives over several ranks, and idle and loaded
# power. The collectives are timed in two passes, first and last; each timing keeps the faster, and the
# spread between the passes says how quiet the node was.

# %%
cal_rows, facts = [], {"measured_at": "(no calibration file)", "wall_s": "-", "spread": "-", "warnings": "-"}
for d in sorted(set(runs.device_name)):
    found = find_calibration(d, precision="fp32" if d == "cpu" else "bf16")  # checked; None without a file
    if found:
        cal = found.record
        cal_rows += [{"device": d, **row} for row in calibration_summary(cal)]
        # each probed layout's overhead, as the operator roofline reads it from the file
        for name, per_unit_s in sorted(found.roofs.layout_overhead_s.items()):
            cal_rows.append(
                {
                    "device": d,
                    "quantity": f"layout overhead, {name}",
                    "shown": f"{shown_value(per_unit_s, 's')} {layout_unit_words(name)}",
                    "how": "tiny BERT probe under the layout, less its ranks' compute (one process's step "
                    "times the node's oversubscription) and its collectives' latency"
                    + ("; " + FSDP_UNIT_WORDS if "FSDP" in layout_unit_words(name) else ""),
                }
            )
        facts = calibration_facts(
            {**cal, "warnings": [*(cal.get("warnings") or []), *prose.calibration_notes(found)]}
        )
        banner = prose.calibration_banner(d, found.problems, gpu=d != "cpu")
        if banner:  # the quantities the checks replaced, said where the page uses them
            display(HTML(banner))
for key, text in facts.items():
    glue(f"calibration_{key}", text, display=False)
calibration = pd.DataFrame(cal_rows, columns=["device", "quantity", "shown", "how"]).rename(
    columns={"shown": "value"}
)
(
    calibration.drop(columns=["device"] if calibration.device.nunique() < 2 else [])
    .style.hide(axis="index")
    .set_properties(padding="0.15em 0.8em 0.15em 0")
)

# %% [markdown]
# The calibration ran on {glue:text}`calibration_measured_at` and took {glue:text}`calibration_wall_s` s. It
# timed the collectives twice; the slower of the two passes took at most {glue:text}`calibration_spread` the
# time of the faster (median over message sizes, for each number of ranks): near 1 means the node was quiet.
# Its warnings: {glue:text}`calibration_warnings`.

# %% [markdown]
# ## The proxies against independent counts
#
# The FLOPs and parameter counts of the proxies are formulas; here they meet independent counts on a few
# configurations (a parameter of this page): torch's FLOP counter over one forward and backward pass (eager
# attention, so the attention-score matrix multiplies are counted), and the built model's parameter count. The FLOPs {glue:text}`flops_agree` and the parameter counts {glue:text}`params_agree`.
#
# Memory traffic has no such count to agree with. We use the analytic model of `companion.energy.proxies`
# (weights, gradients, AdamW state and stored activations). An op-level count (the bytes every ATen op reads
# and writes, with no fusion and no cache reuse) is an upper bound on real DRAM traffic: on these
# configurations it is {glue:text}`byte_ratio_min` to {glue:text}`byte_ratio_max` times the analytic count.

# %%
check = proxy_check(check_configs)
flops_error = (check.flops_analytic / check.flops_counted - 1).abs().max() * 100
glue(
    "flops_agree",
    "agree exactly" if flops_error < 1e-9 else f"agree to within {flops_error:.2g} %",
    display=False,
)
glue(
    "params_agree",
    "agree exactly"
    if (check.parameters_analytic == check.parameters_counted).all()
    else "differ ("
    + ", ".join(
        f"{r.config}: {r.parameters_analytic:,} against {r.parameters_counted:,}"
        for r in check.itertuples()
        if r.parameters_analytic != r.parameters_counted
    )
    + ")",
    display=False,
)
glue("byte_ratio_min", f"{check.ratio.min():.1f}", display=False)
glue("byte_ratio_max", f"{check.ratio.max():.1f}", display=False)
(
    check.rename(
        columns={
            "config": "configuration",
            "flops_analytic": "FLOPs (formula)",
            "flops_counted": "FLOPs (FlopCounterMode)",
            "parameters_analytic": "parameters (formula)",
            "parameters_counted": "parameters (numel)",
            "analytic_bytes": "bytes (analytic model)",
            "op_level_bytes": "bytes (op-level count)",
            "ratio": "op-level / analytic",
        }
    )
    .style.format(
        {
            "FLOPs (formula)": "{:.4g}",
            "FLOPs (FlopCounterMode)": "{:.4g}",
            "parameters (formula)": "{:,}",
            "parameters (numel)": "{:,}",
            "bytes (analytic model)": "{:.3g}",
            "bytes (op-level count)": "{:.3g}",
            "op-level / analytic": "{:.1f}",
        }
    )
    .hide(axis="index")
    .set_table_attributes('class="companion-numbers"')
)

# %% [markdown]
# ## Where the runs sit on the roofline
#
# Achieved FLOP/s per rank against arithmetic intensity (FLOP/byte), under the device's compute roof and
# memory roof. For a CPU the roofs are its calibration's; for GPUs they come from the hardware table. Model FLOP
# utilisation (MFU) is a run's achieved FLOP/s per rank over that compute roof, so on a CPU it is relative to
# the calibrated GEMM peak, not to a spec sheet. Intensity here divides by the analytic byte count; the op-level
# count above is several times larger, so which side of the ridge a run sits on depends on the byte model.

# %%
# hide
ridge = df.peak_flops_per_s / df.bandwidth_bytes_per_s
glue("n_memory_bound", int((df.intensity_flops_per_byte < ridge).sum()), display=False)
glue("n_compute_side", int((df.intensity_flops_per_byte >= ridge).sum()), display=False)
glue("mfu_max_pct", f"{df.mfu.max() * 100:.0f}", display=False)
glue("mfu_min_pct", f"{df.mfu.min() * 100:.1f}", display=False)
# one process only: a parallel run's MFU counts a rank's FLOPs against the whole device's roof, and on a shared
# node its ranks take turns on the cores, which says nothing of how a GEMM's shape sets its speed
single = df[df.world_size == 1]
glue(
    "single_mfu_range",
    (
        f"{single.mfu.min() * 100:.1f} % to {single.mfu.max() * 100:.1f} % over this build's "
        f"{len(single)} single-process runs"
        if len(single)
        else "not measured: no single-process run"
    ),
    display=False,
)
above = int((df.mfu > 1).sum())
glue(
    "roof_sentence",
    (
        f"{above} of {len(df)} runs exceed the compute roof (MFU above 100 %): a measured roof is "
        "a short benchmark's best, and these runs show it understates the device, so MFU here is "
        "relative to that measurement, not to the device's true peak."
    )
    if above
    else "Every run is below the compute roof.",
    display=False,
)
single = df[df.world_size == 1]
slope = (
    np.polyfit(np.log(single.flops_per_step), np.log(single.energy_per_step_j), 1)[0]
    if len(single) > 1
    else float("nan")
)
glue("energy_flops_slope", f"{slope:.2f}", display=False)
glue("fig_roofline", figures.roofline(df), display=False)
glue("fig_energy_flops", figures.energy_vs_flops(df), display=False)

# %%
figures.roofline(df)

# %% [markdown]
# {glue:text}`n_memory_bound` runs sit left of the ridge, where the memory roof bounds them, and
# {glue:text}`n_compute_side` at or right of it. Model FLOP utilisation ranges from
# {glue:text}`mfu_min_pct` % to {glue:text}`mfu_max_pct` %. {glue:text}`roof_sentence` The spread in
# utilisation at equal intensity, not the side of the ridge, is what a law in FLOPs and bytes has to explain.

# %%
figures.energy_vs_flops(df)

# %% [markdown]
# On one device, energy per step grows as FLOPs to the power {glue:text}`energy_flops_slope` (least squares
# in log–log over the single-device runs): a power near 1 means energy follows compute, a power below 1
# means larger steps use the device better.

# %% [markdown]
# ## The measured efficiency factor
#
# Energies on this page: {glue:text}`energy_label`.
#
# η(p) compares a p-rank run with the single-device run of the same configuration. Where a
# configuration has no single-device run, the smallest measured degree is the reference, and a column
# "compared with" says which.

# %%
eta = df[df.world_size > 1]
glue("eta_min", f"{eta.eta.min():.2f}", display=False)
glue("eta_max", f"{eta.eta.max():.2f}", display=False)
eta_table = pd.DataFrame(
    {
        "model": [f"{r.layers} layers, hidden {r.hidden}, {r.heads} heads" for r in eta.itertuples()],
        "sequence × batch": [f"{r.seq_len} × {r.batch_size}" for r in eta.itertuples()],
        "parallel mode": eta["mode"].map(lambda m: figures.MODE_WORDS.get(m, m)),
        "ranks": eta.world_size,
        "replicate": eta.replicate + 1,
        "step (ms)": eta.step_s * 1e3,
        "η(p)": eta.eta,
        "compared with": eta.eta_reference.replace({"p=1": "single device"}),
    }
)
if eta_table["compared with"].nunique() < 2:  # one reference for every row: said above, not repeated per row
    eta_table = eta_table.drop(columns="compared with")
eta_table.sort_values(["model", "sequence × batch", "parallel mode", "ranks", "replicate"]).style.format(
    {"step (ms)": "{:.1f}", "η(p)": "{:.2f}"}
).hide(axis="index")

# %% [markdown]
# ## The replicate noise floor
#
# Each configuration is measured more than once, in separate passes of the sweep. How far replicates
# of one configuration fall from their mean (mean absolute relative deviation) is the noise of one
# measurement: a model's error against single runs cannot be read more finely than that (it is a yardstick,
# not a bound: a model scored on the same runs can fall below it). Saved as `noise.json`, over every run of the sweep; the validation reports its errors beside the same
# floor taken over the runs it scores, so the two can differ (the step-time filter leaves out of every fit and
# score a run whose step time's 95 % interval is wider than the fit's limit, given on the fit's page).
# The last column is how
# the whole machine moved between passes: the median over configurations of the later replicate's value over
# the first's (1: no drift), over every configuration of the sweep measured twice (the other pages take it over
# the runs the step-time filter kept, so their figure can differ). The column before it is what a model that knew every configuration exactly would
# score against single runs: the passes separate a shift of the whole machine (which the floor counts in full)
# from each run's own scatter (of which a configuration's mean of two replicates hides a share).

# %%
noise = replicate_noise(df)
write_json(paths.derived_dir(profile) / "noise.json", noise)
drift = noise.get("between_passes") or {}
pct = lambda x: None if x is None else 100 * x  # noqa: E731
pd.DataFrame(
    [
        {
            "metric": metric.replace("_", " "),
            "floor, mean (%)": pct(m["mape"]),
            "median (%)": pct(m["median_ape"]),
            "max (%)": pct(m["max_ape"]),
            "configurations": m["n_configs"],
            "runs": m["n_runs"],
            "exact model (%)": pct((m.get("exact_model") or {}).get("mape")),
            "later pass / first, median": (drift.get(metric) or {}).get("median_ratio"),
        }
        for metric, m in noise["metrics"].items()
    ]
).style.format(precision=2, na_rep="—").hide(axis="index")

# %%
out = paths.derived_dir(profile) / "proxies.csv"
df.to_csv(out, index=False)
print(f"wrote {out}")
