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
# Every number in this book comes from these run records, one per fine-tune configuration. To run or resume
# the sweep: [](../reproduce.md).

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
# Runs done in this build, already on record, or failed, for the grid and the off-grid validation and test
# sets measured with it.

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
else:  # records copied in: what each profile's folder holds
    sweep_table = pd.DataFrame(
        [
            {
                "profile": p.name,
                "runs": len(p.runs),
                "run now": 0,
                "already recorded": sum(
                    r["run_id"] in {c.run_id for c in p.runs} for r in load_records(folder, "ok")
                ),
                "failed": sum(
                    r["run_id"] in {c.run_id for c in p.runs} for r in load_records(folder, "failed")
                ),
            }
            for p, folder in [(prof, records_dir), *sweep.measured_alongside(prof, records_dir)]
        ]
    )
sweep_table.style.hide(axis="index")

# %% [markdown]
# ## What was measured
#
# One row per layout and degree. How joules are measured or estimated: [](../measurement.md); the machine and
# software: [](../provenance.md).
#
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
# hide
summary = (
    runs.assign(
        energy=runs.energy_measured.map({True: "measured", False: "estimated"}),
        order=runs["mode"].map(lambda m: figures.MODE_ORDER.index(m) if m in figures.MODE_ORDER else 99),
    )
    .groupby(["order", "mode", "world_size", "energy"])
    .agg(
        runs=("run_id", "count"),
        median_step_ms=("step_s", lambda s: s.median() * 1e3),
        median_energy_per_step_j=("energy_per_step_j", "median"),
        mean_power_w=("mean_power_w", "mean"),
    )
    .reset_index()
    .drop(columns="order")
    .assign(mode=lambda t: t["mode"].map(lambda m: figures.MODE_WORDS.get(m, m)))
    .rename(
        columns={
            "mode": "layout",
            "world_size": "ranks",
            "median_step_ms": "median step (ms)",
            "median_energy_per_step_j": "median energy per step (J)",
            "mean_power_w": "mean power (W)",
        }
    )
)
if summary.energy.nunique() < 2:  # one kind of joules for every run: the sentence above says which
    summary = summary.drop(columns="energy")
summary.style.format(
    {"median step (ms)": "{:.1f}", "median energy per step (J)": "{:.3g}", "mean power (W)": "{:.1f}"}
).hide(axis="index")

# %%
# hide
# the hardware and software tables of the provenance page: the profile's records and those of the
# profiles measured with it (the cpu grid's off-grid runs)
alongside = []
for other, folder in sweep.measured_alongside(prof, records_dir):
    theirs = {c.run_id for c in other.runs}
    alongside += [r for r in load_records(folder) if r["run_id"] in theirs]
sources = provenance.merged_sources(provenance.data_sources(mine + alongside))
if "GPU" in sources and (sources.GPU == "none").all():  # no GPU anywhere: no driver row
    sources = sources.drop(columns="GPU driver / CUDA")
sources = sources.T.rename(columns=lambda i: f"source {i + 1}")
versions = provenance.versions()
glue("sources_table", sources.style.set_table_attributes('class="companion-prose"'), display=False)
glue("versions_table", versions.style.hide(axis="index"), display=False)
glue("build_commit", provenance.git_commit(SOURCE_ROOT), display=False)
glue("build_date", provenance.build_date(), display=False)

# %%
# The artifact of this stage: one row per finished run.
out = paths.derived_dir(prof.name) / "runs.csv"
out.parent.mkdir(parents=True, exist_ok=True)
runs.to_csv(out, index=False)
print(f"wrote {out} ({len(runs)} runs; {len(failed)} failed records left out)")
