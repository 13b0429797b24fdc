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
# A *build* is one complete measurement of the cpu sweep, its off-grid runs and a calibration on one machine.
# Here {glue:text}`sweeps_text` are scored by this build's code as
# [](04_validation.ipynb) scores this build. Pooled over them, the operator roofline's {glue:text}`level_pct`
# intervals cover {glue:text}`coverage_hosts_text`.

# %% tags=["parameters"]
profile = "cpu"
models = ["operator_roofline"]
workers = 2
n_boot = 2000
range_level = 0.9
seed = 0

# %%
# hide
import pandas as pd
from myst_nb import glue

from companion import paths
from companion.energy import stored
from companion.report import builds, figures, numbers, sentences, tables
from companion.errors import ConfigError

figures.use_offline_renderer()
d = paths.derived_dir(profile)
validation = numbers.read_json(d / "validation.json")
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
            validation, numbers.read_csv(d / "runs.csv"), stored.measured_commit(paths.data_dir()), models
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
coverage_short = (
    builds.coverage_over_builds_text(pooled) if len(pooled) else "not available (no stored builds)"
)
hosts = builds.hosts_text(table)
glue("coverage_short", coverage_short, display=False)  # the limitations page quotes it
glue("coverage_hosts_text", coverage_short + (f"; {hosts}" if hosts else ""), display=False)
glue("level_pct", f"{level * 100:.0f} %", display=False)
glue(
    "builds_stats_text",
    sentences.paragraph(
        f"{builds.energy_text(table)} One build's split holds "
        f"{builds.split_sizes_text(table, level)}: hence many builds. {builds.coverage_text(pooled, level)} "
        f"{builds.one_build_text(meeting)} {builds.floor_text(table)}"
    ),
    display=False,
)
glue("fig_coverage_sweeps", figures.coverage_across_sweeps(table, pooled, level), display=False)
figures.coverage_across_sweeps(table, pooled, level)

# %% [markdown]
# ````{dropdown} Statistics
# ```{glue:} builds_stats_text
# ```
#
# ```{glue:} builds_table
# ```
# ````

# %%
# hide
# per group, the builds' pooled coverage and mean held-out MAPE (their ranges: the figure and the download)
cells = pooled[pooled.model == "operator_roofline"].set_index(["split", "target"]) if len(pooled) else None
glue(
    "builds_table",
    tables.styled_scores(
        pd.DataFrame(
            [
                {
                    "held-out group": builds.GROUP_WORDS.get(g, g),
                    **{
                        f"{t} {what}": (f"{cells.loc[(g, t), col]:.1f}" if (g, t) in cells.index else "-")
                        for what, col in (("coverage %", "coverage_pct"), ("MAPE %", "mape_pct"))
                        for t in numbers.TARGETS
                    },
                }
                for g in builds.group_order(cells.index.get_level_values(0).unique())
            ]
        )
        if cells is not None
        else None,
    ),
    display=False,
)

# %%
out = d / "builds.csv"
table.to_csv(out, index=False)
print(f"wrote {out}")
