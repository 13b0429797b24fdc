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
# # Across builds
#
# The validation page scores one sweep: the runs this build measured. A split of one sweep holds out
# {glue:text}`split_sizes_text`, so one build cannot say whether the intervals hold in a given split. Builds of
# the cpu profile on the project's reference machine are kept instead (`data/reference/cpu/`, one archive per
# build: its runs, its off-grid runs and its calibration; `python benchmarks/model_accuracy.py --pack data/`
# stores this build's). Here this build's code scores every stored sweep exactly as the validation page scores
# its own (the same splits, step-time filter and interval level, read from this build's `validation.json`), and
# pools the held-out runs of each split over all of them: {glue:text}`sweeps_text`. The operator roofline is
# refitted in every fold of every sweep; the measurements are the stored ones, the model is today's.

# %% tags=["parameters"]
profile = "cpu"
models = ["operator_roofline"]
workers = 2
n_boot = 2000
seed = 0

# %%
from myst_nb import glue

from companion import paths
from companion.energy import stored
from companion.report import builds, figures, headline

figures.use_offline_renderer()
validation = headline._read_json(paths.derived_dir(profile) / "validation.json")
level = float(validation.get("level", 0.9))
max_step_ci95_rel = float((validation.get("ci_filter") or {}).get("max_step_ci95_rel", 0.1))
# stored sweeps are the cpu profile's (with its off-grid runs); another profile has none
sources = stored.stored_sweeps(paths.reference_dir(profile)) if profile == stored.PROFILE else []
table = stored.score_stored(sources, models, level, max_step_ci95_rel, workers=workers)
pooled = stored.pooled_coverage(table, level, n_boot=n_boot, seed=seed) if len(table) else table
glue("sweeps_text", builds.sweeps_text(table), display=False)
glue("split_sizes_text", builds.split_sizes_text(table, level), display=False)
glue("level_pct", f"{level * 100:.0f} %", display=False)

# %% [markdown]
# ## Do the intervals hold?
#
# Each group's held-out runs pooled over the stored sweeps: the share that the operator roofline's nominal
# {glue:text}`level_pct` interval covered, with the range of that share from resampling whole sweeps (a
# sweep's runs share its machine's state and its fits, so they are not independent draws); then how many
# sweeps' own coverage of that group lies within 85-95 %, beside how many exact intervals would put there on
# groups of the same sizes.
#
# ```{glue:} coverage_text
# ```

# %%
glue("coverage_text", headline.paragraph(builds.coverage_text(pooled, level)), display=False)
glue("coverage_short", builds.coverage_short(pooled) if len(pooled) else "not available (no stored sweeps)",
     display=False)
headline.styled_scores(builds.coverage_table(pooled) if len(pooled) else None,
                       f"Operator roofline: coverage of its {level * 100:.0f} % intervals over the stored sweeps, "
                       "[range from resampling sweeps]")

# %%
glue("fig_coverage_sweeps", figures.coverage_across_sweeps(table, pooled, level), display=False)
figures.coverage_across_sweeps(table, pooled, level)

# %% [markdown]
# Hover a tick for its sweep and the commit that measured it.
#
# ## How far off, sweep after sweep
#
# The same scores as held-out MAPE: the sweeps' mean with their lowest and highest, beside the mean of what a
# model that knew every configuration exactly would score on the same runs (the replicate floor).
# {glue:text}`floor_text`.

# %%
glue("floor_text", builds.floor_text(table), display=False)
headline.styled_scores(builds.mape_table(pooled) if len(pooled) else None,
                       "Operator roofline: held-out MAPE (%) over the stored sweeps, mean (lowest-highest), "
                       "and the mean exact-model floor")

# %%
out = paths.derived_dir(profile) / "builds.csv"
table.to_csv(out, index=False)
print(f"wrote {out}")
