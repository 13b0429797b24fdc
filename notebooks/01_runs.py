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
# # The runs
#
# Every number in this companion comes from run records: one JSON file per fine-tune configuration,
# written by the sweep below. This stage runs (or resumes) the sweep of a profile and collects its
# finished records into one table. A run that already has a record is skipped, so re-executing this
# notebook after an interruption only runs what is missing.

# %% tags=["parameters"]
profile = "cpu"  # ci, cpu, gpu-1, gpu-node, or a profile .yaml path
run_sweep = True  # False: only tabulate records already on disk (e.g. records copied from a cluster)

# %%
from myst_nb import glue

from companion import paths

from companion.energy import tables

from companion.report import figures

from companion.runs import profiles, sweep
from companion.runs.records import load_records

figures.use_offline_renderer()
prof = profiles.load_profile(profile)
records_dir = paths.runs_dir(prof.name)
print(f"profile {prof.name}: {len(prof.runs)} configurations -> {records_dir}")

# %%
if run_sweep:
    result = sweep.run_sweep(prof, records_dir, progress=False)
    print(result.summary())

# %% [markdown]
# ## What was measured
#
# Each row is one finished run. `energy_measured` says whether its energy came from a hardware counter
# (NVML, RAPL) or from a power model (CodeCarbon's TDP × load estimate): the two are never mixed.

# %%
records = load_records(records_dir)
in_profile = {c.run_id for c in prof.runs}  # the folder may also hold records of an earlier grid
runs = tables.runs_frame([r for r in records if r["run_id"] in in_profile])
failed = [r for r in records if r.get("status") == "failed"]
glue("n_runs", len(runs), display=False)
glue("n_failed", len(failed), display=False)
glue("device", ", ".join(sorted(set(runs.device_name))), display=False)
glue("energy_label", figures.energy_label(runs), display=False)
glue("n_layouts", runs["mode"].nunique(), display=False)
glue("max_world_size", int(runs.world_size.max()), display=False)
glue("median_ci_pct", f"{runs.step_ci95_rel.median() * 100:.1f}", display=False)
glue("converged_pct", f"{runs.converged.mean() * 100:.0f}", display=False)
summary = runs.groupby(["mode", "world_size"]).agg(
    runs=("run_id", "count"), median_step_ms=("step_s", lambda s: s.median() * 1e3),
    median_energy_j=("energy_per_step_j", "median"), mean_power_w=("mean_power_w", "mean"))
glue("runs_summary", summary.round(3))

# %%
runs[["run_id", "mode", "world_size", "step_s", "step_ci95_rel", "energy_per_step_j", "energy_measured",
      "energy_source", "samples_per_s"]].head(12)

# %%
# The artifact of this stage: one row per finished run.
out = paths.derived_dir(prof.name) / "runs.csv"
out.parent.mkdir(parents=True, exist_ok=True)
runs.to_csv(out, index=False)
print(f"wrote {out} ({len(runs)} runs; {len(failed)} failed records left out)")
