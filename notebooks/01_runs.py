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
# hide
import pandas as pd
from myst_nb import glue

from companion import paths

from companion.energy import tables

from companion.report import figures, prose, provenance
from companion.report.stages import SOURCE_ROOT

from companion.runs import profiles, sweep
from companion.runs.records import load_records

figures.use_offline_renderer()
prof = profiles.load_profile(profile)
records_dir = paths.runs_dir(prof.name)

# %% [markdown]
# ## The sweep
#
# What this build asked of the sweep: runs finished now, runs whose records already existed, and failures.
# A profile can name others to be measured with it: the cpu grid names its validation set and its test set,
# configurations off the grid that the validation predicts without ever fitting on them. Each has its own row. Its runs are interleaved with the grid's, so both see the same minutes of the machine.

# %%
if run_sweep:
    result = sweep.run_sweep(
        prof, records_dir, progress=False, alongside=sweep.measured_alongside(prof, records_dir)
    )
    sweep_table = pd.DataFrame(
        [
            {
                "profile": r.out_dir.name,
                "runs": r.total,
                "run now": len(r.ok),
                "already recorded": r.skipped,
                "failed": len(r.failed),
            }
            for r in [result, *result.alongside]
        ]
    )
else:
    sweep_table = pd.DataFrame(
        [
            {
                "profile": prof.name,
                "runs": len(prof.runs),
                "run now": 0,
                "already recorded": "all (run_sweep is off: records copied in)",
                "failed": "—",
            }
        ]
    )
sweep_table.style.hide(axis="index")

# %% [markdown]
# ## What was measured
#
# One row per layout and degree: how many runs, their median step time and energy per step, and their mean
# power. `energy` says whether the joules came from a hardware counter (NVML, RAPL: measured) or from a power
# model (CodeCarbon's, where the machine has no counter: estimated); the two are never mixed.
# {glue:text}`energy_method_text`
#
# {glue:text}`data_text`
#
# {glue:text}`oversubscription_text`

# %%
# hide
records = load_records(records_dir)
in_profile = {c.run_id for c in prof.runs}  # the folder may also hold records of an earlier grid
mine = [r for r in records if r["run_id"] in in_profile]
runs = tables.runs_frame(mine)
failed = [r for r in records if r.get("status") == "failed"]
glue("n_runs", len(runs), display=False)
glue("n_failed", len(failed), display=False)
# the device, and on a CPU the machine by its CPU model and cores (one device name covers many machines)
cores = pd.to_numeric(runs.get("host_cpus"), errors="coerce").max() if "host_cpus" in runs else float("nan")
glue(
    "device",
    ", ".join(sorted(set(runs.device_name)))
    + (
        f" (host {', '.join(sorted(set(runs.host.astype(str))))}"
        + (f", {int(cores)} cores)" if cores == cores else ")")
        if "host" in runs and set(runs.device_name) == {"cpu"}
        else ""
    ),
    display=False,
)
glue("energy_label", figures.energy_label(runs), display=False)
parallel_modes = [figures.MODE_WORDS.get(m, m) for m in sorted(set(runs["mode"]) - {"single"})]
glue(
    "layouts_text",
    (
        f"on one process and in {len(parallel_modes)} parallel mode{'s' if len(parallel_modes) > 1 else ''} "
        f"({', '.join(parallel_modes)}, up to {int(runs.world_size.max())} ranks)"
        if parallel_modes
        else "on one process only (no parallel layout)"
    ),
    display=False,
)
glue("median_ci_pct", f"{runs.step_ci95_rel.median() * 100:.1f}", display=False)
glue("converged_pct", f"{runs.converged.mean() * 100:.0f}", display=False)
glue("energy_method_text", prose.energy_method_text(runs), display=False)
glue("data_text", prose.data_text(runs), display=False)
glue("oversubscription_text", prose.oversubscription_text(runs), display=False)

# %%
summary = (
    runs.assign(energy=runs.energy_measured.map({True: "measured", False: "estimated"}))
    .groupby(["mode", "world_size", "energy"])
    .agg(
        runs=("run_id", "count"),
        median_step_ms=("step_s", lambda s: s.median() * 1e3),
        median_energy_per_step_j=("energy_per_step_j", "median"),
        mean_power_w=("mean_power_w", "mean"),
    )
    .reset_index()
    .rename(
        columns={
            "mode": "parallel mode",
            "world_size": "ranks",
            "median_step_ms": "median step (ms)",
            "median_energy_per_step_j": "median energy per step (J)",
            "mean_power_w": "mean power (W)",
        }
    )
)
glue("runs_summary", summary.style.format(precision=3).hide(axis="index"), display=False)
summary.style.format(
    {"median step (ms)": "{:.1f}", "median energy per step (J)": "{:.3g}", "mean power (W)": "{:.1f}"}
).hide(axis="index")

# %% [markdown]
# ## Where and with what
#
# The hardware of every data source, as its run records describe it (the profiles measured with this one
# included), and the build that turned the records into this book. The same tables close the book ([provenance](../provenance.md)).

# %%
# the profile's records and those of the profiles measured with it (the cpu grid's off-grid holdout runs)
alongside = []
for other, folder in sweep.measured_alongside(prof, records_dir):
    theirs = {c.run_id for c in other.runs}
    alongside += [r for r in load_records(folder) if r["run_id"] in theirs]
sources = provenance.data_sources(mine + alongside).T.rename(columns=lambda i: f"source {i + 1}")
versions = provenance.versions()
glue("sources_table", sources.style, display=False)
glue("versions_table", versions.style.hide(axis="index"), display=False)
glue("build_commit", provenance.git_commit(SOURCE_ROOT), display=False)
glue("build_date", provenance.build_date(), display=False)
sources.style

# %%
# The artifact of this stage: one row per finished run.
out = paths.derived_dir(prof.name) / "runs.csv"
out.parent.mkdir(parents=True, exist_ok=True)
runs.to_csv(out, index=False)
print(f"wrote {out} ({len(runs)} runs; {len(failed)} failed records left out)")
