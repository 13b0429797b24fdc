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
# A *build* is one complete measurement of the cpu sweep and its off-grid runs on one machine, with that
# machine's calibration. The stored builds, {glue:text}`sweeps_text`, are each scored by today's code exactly
# as [](04_validation.ipynb) scores this build's runs, host by host first. Pooled over them, the operator
# roofline's {glue:text}`level_pct` intervals cover {glue:text}`coverage_short`.
#
# ````{dropdown} Why many builds, and how they are scored
# Each group of held-out runs one build scores (one split's, such as every run of a held-out parallel degree,
# or the off-grid runs) holds {glue:text}`split_sizes_text`. *Exact* intervals here means intervals that cover
# each run independently with probability exactly the nominal level; even they land outside
# {glue:text}`band_text` in many groups, so one build cannot say how close to the nominal level the intervals
# come in a given split. Each stored build holds its runs, its off-grid runs and its calibration; the
# step-time filter and the interval level are this build's. The operator roofline is refitted in every fold of
# every build; the measurements are the stored ones, the model is today's. {glue:text}`energy_text`
# ````

# %% tags=["parameters"]
profile = "cpu"
models = ["operator_roofline"]
workers = 2
n_boot = 2000
range_level = 0.9
seed = 0

# %%
import pandas as pd
from myst_nb import glue

from companion import paths
from companion.energy import stored
from companion.report import builds, figures, headline
from companion.errors import ConfigError

figures.use_offline_renderer()
d = paths.derived_dir(profile)
validation = headline._read_json(d / "validation.json")
level = float(validation.get("level", 0.9))
max_step_ci95_rel = float((validation.get("ci_filter") or {}).get("max_step_ci95_rel", 0.1))
# stored builds are the cpu profile's (with its off-grid runs); another profile has none
sources = stored.stored_sweeps(paths.reference_dir(profile)) if profile == stored.PROFILE else []
# this build's own sweep, from its validation page; a stored archive of it (the same calibration, packed at any
# point of its sweep) is left out, so that a build is never pooled twice
try:
    here = stored.archive_name(paths.data_dir())[:15]  # its calibration's time
except (
    ConfigError,
    OSError,
    KeyError,
    TypeError,
    ValueError,
):  # no cpu sweep in this checkout (another profile)
    here = None
if sources and here is not None:
    sources = [s for s in sources if not stored.sweep_name(s).startswith(here)]
# each archive's scores are cached beside it (keyed by the archive, the scoring code and the arguments): a build
# re-scores the stored builds only after the scoring code changed
scores = [
    stored.score_stored(
        sources,
        models,
        level,
        max_step_ci95_rel,
        workers=workers,
        cache=paths.reference_dir(profile) / "scores",
    )
]
if here is not None and profile == stored.PROFILE:
    scores.append(
        stored.this_build_scores(
            validation, headline._read_csv(d / "runs.csv"), stored.measured_commit(paths.data_dir()), models
        )
    )
table = pd.concat([s for s in scores if len(s)] or scores[:1], ignore_index=True)
pooled = (
    stored.pooled_coverage(table, level, n_boot=n_boot, seed=seed, interval=range_level)
    if len(table)
    else table
)
meeting = stored.builds_meeting_band(table, level)
glue("sweeps_text", builds.sweeps_text(table), display=False)
glue("split_sizes_text", builds.split_sizes_text(table, level), display=False)
glue("band_text", f"{stored.BAND_PCT[0]:.0f}–{stored.BAND_PCT[1]:.0f} %", display=False)
glue("energy_text", builds.energy_text(table), display=False)
glue("level_pct", f"{level * 100:.0f} %", display=False)
glue("range_pct", f"{range_level * 100:.0f} %", display=False)

# %% [markdown]
# ## Host by host
#
# The stored builds ran on more than one machine under one device name; each host's figures come first, and
# everything after this table pools the hosts (*across hosts*). Each cell: the builds' mean held-out MAPE (%),
# lowest–highest in brackets.

# %%
headline.styled_scores(
    builds.per_host_table(table) if len(table) else None,
    "Operator roofline: held-out MAPE (%) per host, every split pooled and the off-grid runs",
)

# %% [markdown]
# ## How close to the nominal level, across hosts
#
# Each group's held-out predictions pooled over the builds: the share that the operator roofline's nominal
# {glue:text}`level_pct` interval covered, with the {glue:text}`range_pct` range of that share from resampling
# whole builds (a
# build's predictions share its machine's state and its fits, so they are not independent draws); then how
# many builds' own coverage of that group lies within {glue:text}`band_text`, beside how many exact intervals
# would put there on groups of the same sizes. A run is held out by several splits, so the predictions of all
# splits pooled outnumber the runs.
#
# ```{glue:} coverage_text
# ```
#
# ```{glue:} one_build_text
# ```

# %%
glue("coverage_text", headline.paragraph(builds.coverage_text(pooled, level)), display=False)
glue("one_build_text", headline.paragraph(builds.one_build_text(meeting)), display=False)
glue(
    "coverage_short",
    builds.coverage_short(pooled) if len(pooled) else "not available (no stored builds)",
    display=False,
)
headline.styled_scores(
    builds.coverage_table(pooled) if len(pooled) else None,
    f"Operator roofline: coverage (%) of its {level * 100:.0f} % intervals, held-out predictions "
    f"pooled over the builds [{range_level * 100:.0f} % range from resampling builds]; builds "
    "whose own coverage lies in the band: time, energy (exact intervals' expectation)",
)

# %%
glue("fig_coverage_sweeps", figures.coverage_across_sweeps(table, pooled, level), display=False)
figures.coverage_across_sweeps(table, pooled, level)

# %% [markdown]
# ## How far off, build after build
#
# The same scores as held-out MAPE: the builds' mean with their lowest and highest, beside the mean
# *exact-model floor*, what a model that knew every configuration's true mean would score on the same runs
# (estimated from the replicates; an estimate, not a bound, so a group's MAPE can fall below it).
# {glue:text}`floor_text`.

# %%
glue("floor_text", builds.floor_text(table), display=False)
headline.styled_scores(
    builds.mape_table(pooled) if len(pooled) else None,
    "Operator roofline: held-out MAPE (%) over the builds, their mean (lowest–highest), and the mean "
    "exact-model floor",
)

# %%
out = d / "builds.csv"
table.to_csv(out, index=False)
print(f"wrote {out}")
