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
# Every run gets three proxies, from its configuration and measured token counts: **compute**
# (FLOPs per step), **memory traffic** (bytes per step, all ranks) and the **efficiency factor**
# η(p) = T₁ / (p·T_p), against the single-device run of the same configuration (or its smallest degree
# measured). Measured η(p) runs from {glue:text}`eta_min` to {glue:text}`eta_max` over the parallel runs,
# each plotted on [the fit's page](03_fit.ipynb).

# %% tags=["parameters"]
profile = "cpu"
check_configs = [
    [2, 128, 4, 128, 8],
    [4, 256, 8, 64, 8],
    [1, 64, 2, 256, 4],
]  # layers, hidden, heads, seq, batch

# %%
# hide
import re

import numpy as np
import pandas as pd
from IPython.display import HTML, display
from myst_nb import glue

from companion import paths

from companion.energy import hardware, tables

from companion.report import figures, prose, sentences
from companion.energy.opcount import proxy_check
from companion.energy.noise import replicate_noise
from companion.energy.calibration import measured_roofs
from companion.energy.opmodel import layout_degrees
from companion.energy.predict import find_calibration
from companion.runs.calibrate import calibration_facts, calibration_summary
from companion.runs.records import write_json

figures.use_offline_renderer()
runs = pd.read_csv(paths.derived_dir(profile) / "runs.csv")
devices_measured = [d for d in set(runs.device_name) if hardware.device_spec(d)["bandwidth_tbs"] == "measure"]
roofs = {d: measured_roofs(d) for d in devices_measured}  # the device's calibration (data/devices/<d>.json)
df = tables.proxies_frame(runs, roofs, tables.host_speed_reference(runs))  # at the sweep's typical host speed


# %% [markdown]
# ## The roofs and the calibration
#
# The compute roof (peak FLOP/s) and the memory roof (bandwidth) bound what a run can reach; above their
# ratio, the ridge, a run can be compute-bound. A CPU's come from its calibration, a one-minute benchmark; a
# GPU's from the hardware table.

# %%
# hide
roof_table = (
    df.groupby("device_name")[["peak_flops_per_s", "bandwidth_bytes_per_s"]]
    .first()
    .assign(ridge=lambda t: t.peak_flops_per_s / t.bandwidth_bytes_per_s)
    .assign(
        source=lambda t: [
            ("calibration" if roofs[d]["method"].startswith("calibration") else roofs[d]["method"])
            if d in roofs
            else "hardware table"
            for d in t.index
        ]
    )
    .reset_index()
    .rename(
        columns={
            "device_name": "device",
            "peak_flops_per_s": "compute roof (FLOP/s)",
            "bandwidth_bytes_per_s": "memory roof (B/s)",
            "ridge": "ridge (FLOP/byte)",
            "source": "from",
        }
    )
)
roof_table.style.format(
    {"compute roof (FLOP/s)": "{:.3g}", "memory roof (B/s)": "{:.3g}", "ridge (FLOP/byte)": "{:.1f}"}
).hide(axis="index")

# %% [markdown]
# It also times what [the operator roofline](03_fit.ipynb) reads. A GEMM of shape M×N×K
# reaches peak / (1 + k₀(1/M + 1/N + 1/K)); a collective over p ranks takes a latency (p − 1)·λ plus bytes / B. It ran on
# {glue:text}`calibration_measured_at`. Its collectives, timed twice, took up to {glue:text}`calibration_spread` as
# long in the slower pass; a quiet machine gives about 1. {glue:text}`calibration_warnings`

# %%
# hide
cal_rows, layout_rows = [], []
facts = {"measured_at": "(no calibration file)", "wall_s": "-", "spread": "-", "warnings": "none"}
# left out: checks and counts the model does not read as such, the collectives' spread (said above), and the
# roofs where the table above gives them
LEFT_OUT = (
    "GEMM best measured shape",
    "launch of one tiny operator",
    "operators per",
    "spread between the two passes",
)
for d in sorted(set(runs.device_name)):
    found = find_calibration(d, precision="fp32" if d == "cpu" else "bf16")  # checked; None without a file
    if found:
        cal = found.record
        probe = {}  # each probed layout: its training-size probe's step ratio and busy cores
        for row in calibration_summary(cal):
            m = re.match(r"(tp\d+-dp\d+) (.*)", row["quantity"])
            roof = row["quantity"] in ("GEMM roof (fitted peak)", "memory bandwidth") and d in roofs
            if m:
                probe.setdefault(m.group(1), {})[m.group(2)] = f"{row['value']:.2f}"
            elif not (roof or row["quantity"].startswith(LEFT_OUT)):
                # a collective's latency and bandwidth named as the text above names them (λ, B: the law
                # has its own α and β)
                name = re.sub(
                    r"collective latency alpha, p = (\d+)", r"collectives' λ, \1 ranks", row["quantity"]
                )
                name = re.sub(r"collective bandwidth beta, p = (\d+)", r"collectives' B, \1 ranks", name)
                cal_rows.append({"device": d, "quantity": name, "value": row["shown"]})
        overhead = found.roofs.layout_overhead_s
        for name in sorted(set(probe) | set(overhead), key=lambda n: (np.prod(layout_degrees(n)), n)):
            tp, dp = layout_degrees(name)  # the layout in words: "TP, 2 ranks", "2-D, 4 ranks"
            mode = "2d" if tp > 1 and dp > 1 else "tp" if tp > 1 else "fsdp" if dp > 1 else "single"
            layout_rows.append(
                {
                    "device": d,
                    "layout": f"{figures.MODE_WORDS[mode]}, {tp * dp} ranks",
                    "step / one process's": probe.get(name, {}).get("step / one process's", "—"),
                    "busy cores": probe.get(name, {}).get("busy cores", "—"),
                    "overhead (ms)": f"{overhead[name] * 1e3:.3g}" if name in overhead else "—",
                }
            )
        facts = calibration_facts(
            {**cal, "warnings": prose.calibration_notes(found, cal.get("warnings") or [])}
        )
        banner = prose.calibration_banner(d, found.problems, gpu=d != "cpu")
        if banner:  # the quantities the checks replaced, said where the page uses them
            display(HTML(banner))
facts["warnings"] = "No warnings." if facts["warnings"] == "none" else f"Its warnings: {facts['warnings']}"
for key, text in facts.items():
    glue(f"calibration_{key}", text, display=False)
calibration = pd.DataFrame(cal_rows, columns=["device", "quantity", "value"])
layouts = pd.DataFrame(
    layout_rows, columns=["device", "layout", "step / one process's", "busy cores", "overhead (ms)"]
)
layouts = layouts.loc[:, (layouts != "—").any() | layouts.columns.isin(["device", "layout"])]  # none: dropped
one_device = calibration.device.nunique() < 2
(
    calibration.drop(columns=["device"] if one_device else [])
    .style.hide(axis="index")
    .set_properties(padding="0.15em 0.8em 0.15em 0")
)

# %% [markdown]
# Each parallel layout is probed on a small BERT: its step over one process's, its busy cores, and its
# overhead beyond compute and collective latency, per layer (per FSDP unit under FSDP: a layer, or the
# embeddings, pooler and head).

# %%
# hide
layouts.drop(columns=["device"] if one_device else []).style.hide(axis="index")

# %% [markdown]
# ## The proxies against independent counts
#
# PyTorch's FLOP counter and the built model's parameter count check the formulas on a few configurations:
# the FLOPs {glue:text}`flops_agree` and the parameter counts {glue:text}`params_agree`. Memory traffic has no
# exact count. The analytic model (weights, gradients, AdamW state, stored activations) is
# {glue:text}`byte_ratio_min` to {glue:text}`byte_ratio_max` times below an op-level count, every operator's
# reads and writes without fusion or cache reuse: an upper bound.

# %%
# hide
check = proxy_check(check_configs)
check["config"] = [  # each configuration in words: "2 layers, width 128, 4 heads; 128 × 8"
    f"{n} layer{'s' if n != 1 else ''}, width {h}, {a} heads; {seq} × {b}"
    for n, h, a, seq, b in check_configs
]
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
same = {  # a formula that matches its count on every configuration: one column for both
    "flops_counted": flops_error < 1e-9,
    "parameters_counted": (check.parameters_analytic == check.parameters_counted).all(),
}
(
    check.drop(columns=["ratio", *(c for c, s in same.items() if s)])
    .rename(
        columns={
            "config": "model; sequence × batch",
            "flops_analytic": "FLOPs (formula = count)" if same["flops_counted"] else "FLOPs (formula)",
            "flops_counted": "FLOPs (counted)",
            "parameters_analytic": "parameters (formula = count)"
            if same["parameters_counted"]
            else "parameters (formula)",
            "parameters_counted": "parameters (counted)",
            "analytic_bytes": "bytes (analytic)",
            "op_level_bytes": "bytes (op-level)",
        }
    )
    .style.format(
        {
            **dict.fromkeys(["FLOPs (formula)", "FLOPs (formula = count)", "FLOPs (counted)"], "{:.4g}"),
            **dict.fromkeys(
                ["parameters (formula)", "parameters (formula = count)", "parameters (counted)"], "{:,}"
            ),
            "bytes (analytic)": "{:.3g}",
            "bytes (op-level)": "{:.3g}",
        },
    )
    .hide(axis="index")
    .set_table_attributes('class="companion-numbers"')
)

# %% [markdown]
# ## Where the runs sit on the roofline
#
# Model FLOP utilisation (MFU) is a run's achieved FLOP/s per rank over the compute roof (on a CPU, the
# calibrated GEMM peak, not a spec sheet). Intensity uses the analytic byte count; by the op-level count,
# every run would sit further left.

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
        f"{above} of {len(df)} runs exceed the compute roof: a measured roof is a short benchmark's best, "
        "so MFU here is relative to that measurement, not to the device's true peak."
    )
    if above
    else "Every run is below the compute roof.",
    display=False,
)
slope = (
    np.polyfit(np.log(single.flops_per_step), np.log(single.energy_per_step_j), 1)[0]
    if len(single) > 1
    else float("nan")
)
glue("energy_flops_slope", f"{slope:.2f}", display=False)
eta = df[df.world_size > 1]
glue("eta_min", f"{eta.eta.min():.2f}", display=False)
glue("eta_max", f"{eta.eta.max():.2f}", display=False)
figures.roofline(df)

# %% [markdown]
# {glue:text}`n_memory_bound` runs sit left of the ridge and {glue:text}`n_compute_side` at or right of it.
# MFU ranges from {glue:text}`mfu_min_pct` % to {glue:text}`mfu_max_pct` %. {glue:text}`roof_sentence` A law in
# FLOPs and bytes has to explain the spread in utilisation at equal intensity.

# %%
# hide
figures.energy_vs_flops(df)

# %% [markdown]
# On one device, energy per step grows as FLOPs to the power {glue:text}`energy_flops_slope` (a log–log fit
# over single-device runs): below 1, larger steps use the device better.

# %% [markdown]
# ## The replicate noise floor
#
# How far replicates, measured in separate passes, fall from their configuration's mean, over every run measured:
# the noise of one measurement, a yardstick for any model's error ([](06_headline.ipynb) counts the runs scored).
# {glue:text}`host_speed_sentence`

# %%
# hide
noise = replicate_noise(df)
write_json(paths.derived_dir(profile) / "noise.json", noise)
pct = lambda x: None if x is None else 100 * x  # noqa: E731
raw = noise["as_measured"] or {}
glue("host_speed_sentence", sentences.host_speed_sentence(df, noise), display=False)
pd.DataFrame(
    [
        {
            "metric": metric.replace("_", " "),
            "floor, mean (%)": pct(m["mape"]),
            **({"as measured (%)": pct(raw["mape"].get(metric))} if raw else {}),
            "max (%)": pct(m["max_ape"]),
            "configurations": m["n_configs"],
            "runs": m["n_runs"],
        }
        for metric, m in noise["metrics"].items()
    ]
).style.format(precision=2, na_rep="—").hide(axis="index")

# %%
out = paths.derived_dir(profile) / "proxies.csv"
df.to_csv(out, index=False)
print(f"wrote {out}")
