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
check_configs = [[2, 128, 4, 128, 8], [4, 256, 8, 64, 8], [1, 64, 2, 256, 4]]  # layers, hidden, heads, seq, batch

# %%
import pandas as pd
from myst_nb import glue

from companion import paths

from companion.energy import hardware, tables

from companion.report import figures
from companion.energy.opcount import byte_model_check
from companion.energy.noise import replicate_noise
from companion.runs.records import write_json

figures.use_offline_renderer()
runs = pd.read_csv(paths.derived_dir(profile) / "runs.csv")
devices_measured = [d for d in set(runs.device_name) if hardware.device_spec(d)["bandwidth_tbs"] == "measure"]
roofs = {d: hardware.measure_cpu_roofs() for d in devices_measured}
df = tables.proxies_frame(runs, roofs)
glue("energy_label", figures.energy_label(df), display=False)
for d, r in roofs.items():
    print(f"{d}: measured roofs {r['peak_flops_per_s']:.3g} FLOP/s, {r['bandwidth_bytes_per_s']:.3g} B/s ({r['method']})")

# %% [markdown]
# ## Memory traffic: which model, and how it compares
#
# We use the analytic model of `companion.energy.proxies` (weights, gradients, AdamW state and stored
# activations). An op-level count — the bytes every ATen op reads and writes, with no fusion and no cache
# reuse — is an upper bound on real DRAM traffic. Their ratio on a few configurations:

# %%
check = byte_model_check(check_configs)
glue("byte_ratio_min", f"{check.ratio.min():.1f}", display=False)
glue("byte_ratio_max", f"{check.ratio.max():.1f}", display=False)
check

# %% [markdown]
# ## Where the runs sit on the roofline
#
# Achieved FLOP/s per rank against arithmetic intensity (FLOP/byte), under the device's compute roof and
# memory roof. For a CPU the roofs are measured here; for GPUs they come from the hardware table.

# %%
glue("fig_roofline", figures.roofline(df), display=False)
glue("mfu_max_pct", f"{df.mfu.max() * 100:.0f}", display=False)
glue("mfu_min_pct", f"{df.mfu.min() * 100:.1f}", display=False)
figures.roofline(df)

# %%
glue("fig_energy_flops", figures.energy_vs_flops(df), display=False)
figures.energy_vs_flops(df)

# %% [markdown]
# ## The measured efficiency factor
#
# Energies on this page: {glue:text}`energy_label`.
#
# η(p) compares a p-rank run with the single-device run of the same configuration. Where a
# configuration has no single-device run, the smallest measured degree is the reference, and
# `eta_reference` says so.

# %%
eta = df[df.world_size > 1][["run_id", "mode", "world_size", "step_s", "eta", "eta_reference"]]
glue("eta_min", f"{eta.eta.min():.2f}", display=False)
glue("eta_max", f"{eta.eta.max():.2f}", display=False)
eta

# %% [markdown]
# ## The replicate noise floor
#
# Each configuration is measured more than once, in separate passes of the sweep. How far replicates
# of one configuration fall from their mean (mean absolute relative deviation) is the noise no law can
# beat; the validation reports its errors beside it. Saved as `noise.json`.

# %%
noise = replicate_noise(df)
write_json(paths.derived_dir(profile) / "noise.json", noise)
pd.DataFrame(noise["metrics"]).T.assign(converged_fraction=noise["converged_fraction"])

# %%
out = paths.derived_dir(profile) / "proxies.csv"
df.to_csv(out, index=False)
print(f"wrote {out}")
