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
# # Results at a glance
#
# Each model's error on runs it never saw, then the primary model's verdict. How they are computed:
# [](04_validation.ipynb).

# %% tags=["parameters"]
profile = "cpu"

# %%
# hide
import pandas as pd
import yaml
from myst_nb import glue

from companion import paths
from companion.energy import registry, stored
from companion.report import figures, numbers, sentences, tables
from companion.report.stages import SOURCE_ROOT
from companion.runs.records import write_json

figures.use_offline_renderer()
d = paths.derived_dir(profile)
validation = numbers.read_json(d / "validation.json")
sweep_noise = numbers.read_json(
    d / "noise.json"
)  # every run of the sweep, the step-time filter's left-outs too
# the floor of the runs the validation scored (within its CI filter); stage 02's floor of every run otherwise
noise = validation.get("noise") or sweep_noise
fit = numbers.read_json(d / "fit.json")
runs = numbers.read_csv(d / "runs.csv")
explore = numbers.read_csv(d / "explore.csv")
try:
    predict_params = yaml.safe_load((SOURCE_ROOT / "params" / "05_predict.yaml").read_text()) or {}
except (OSError, yaml.YAMLError):
    predict_params = {}
try:
    label = figures.energy_label(runs) or numbers.NA
except (AttributeError, KeyError, TypeError):
    label = numbers.NA
# the page's tables: predictions made before running (the after-the-fact estimates are said in words)
scores = {t: tables.score_table(validation, t, after_the_fact=False, floors=False) for t in numbers.TARGETS}
paper = tables.paper_vs_reproduction(validation, fit, label, noise)
coefficients = tables.coefficient_table(fit)
floor = numbers.noise_floor(noise)
answer = sentences.absolute_answer(explore, predict_params, label, fit.get("device_name", numbers.NA))
# the coverage criterion on every stored build's runs (stage 07), where it exists
stored_scores = numbers.read_csv(d / "builds.csv")
gpu_numbers = numbers.read_json(d / "gpu.json")  # the GPU chapter's (stage 08): measured energy on a GPU
builds = (
    stored.pooled_coverage(stored_scores, float(validation.get("level", 0.9))) if len(stored_scores) else None
)
verdict = tables.verdict_table(validation, builds)
glue("energy_label", label, display=False)
glue("level_pct", numbers.level_pct(validation), display=False)
glue("mape_level_pct", numbers.mape_level_pct(), display=False)
glue("verdict_model", numbers.verdict_model(validation), display=False)
# the introduction's first screen: the answer in a box, and the held-out predictions of the primary model beside
# the paper's law
host = ", ".join(sorted(set(runs.host.astype(str)))) if "host" in runs else None
cores = f", {int(runs.host_cpus.max())} cores" if "host_cpus" in runs and runs.host_cpus.notna().any() else ""
device_words = (
    f"{', '.join(numbers.host_slug_words(h) for h in host.split(', '))} CPU{cores}"
    if host and fit.get("device_name") == "cpu"
    else str(fit.get("device_name", numbers.NA))
)
glue(
    "answer_box",
    sentences.answer_box(validation, runs, gpu_numbers, device_words, noise, builds),
    display=False,
)
glue(
    "fig_hero",
    figures.hero_predictions(pd.DataFrame(validation.get("model_predictions") or []), runs),
    display=False,
)
# sentences travel as HTML paragraphs (pasted text would be bold end to end); the introduction pastes them too
for key, text in (
    ("scored_runs_text", sentences.scored_and_filter_text(validation, sweep_noise, runs)),
    ("summary_text", sentences.summary_text(validation, noise)),
    ("absolute_answer", answer),
    ("energy_honesty_text", sentences.energy_honesty_text(validation, runs)),
    ("filter_sensitivity_text", sentences.filter_sensitivity_text(validation, runs)),
):
    glue(key, sentences.paragraph(text), display=False)
glue("split_legend", sentences.legend_html(validation), display=False)
glue("scored_runs_short", sentences.scored_runs_short(validation), display=False)
glue("device", str(fit.get("device_name", numbers.NA)), display=False)
captions = {
    t: f"{what.capitalize()}: held-out MAPE (%) [interval], coverage" for t, what in numbers.TARGETS.items()
}
for target in numbers.TARGETS:
    glue(f"scores_{target}", tables.styled_scores(scores[target], captions[target]), display=False)
# for the pages on measurement and limitations: the protocol's target, the replicates, the noise and coverage
glue("target_ci_pct", numbers.target_ci_pct(runs), display=False)
glue("replicates_words", sentences.replicates_words(runs), display=False)
glue("noise_floor_time", floor["time"], display=False)
glue("noise_floor_energy", floor["energy"], display=False)
glue("exact_floor_time", floor["exact_time"], display=False)
glue("exact_floor_energy", floor["exact_energy"], display=False)
glue("pass_drift", sentences.pass_drift_text(noise, kept=bool(validation.get("noise"))), display=False)
for key, text in numbers.coverage_summary(validation).items():
    glue(f"coverage_{key}", text, display=False)
glue("verdict_table", tables.styled_prose(verdict), display=False)
# the introduction's table of the paper's claims, in few words (headline.json keeps the long one)
glue("paper_table", tables.styled_prose(tables.paper_claims(validation, fit)), display=False)

# %% [markdown]
# ## Held-out error, per split and model
#
# What each column holds out:
#
# ```{glue:} split_legend
# ```
#
# A cell gives the held-out MAPE in bold, its {glue:text}`mape_level_pct` % interval over model sizes ([—]: too
# few sizes), and the coverage of the {glue:text}`level_pct` % prediction intervals, red where exact intervals
# would rarely show it. Under each split: its runs and the MAPE of an {term}`exact model <Exact model>` (none where
# they were measured once).
#
# ```{glue:} scored_runs_text
# ```

# %%
# hide
tables.styled_scores(scores["time"], captions["time"])

# %% [markdown]
# ```{glue:} energy_honesty_text
# ```

# %%
# hide
# the baselines' energy where it is estimated: only the best one, which the verdict weighs the primary model against
# (the time table has them all)
energy_rows = scores["energy"]
best = (tables.verdict_target(validation, "energy") or {}).get("best_baseline")
estimated = not runs.energy_measured.astype(bool).all() if "energy_measured" in runs else True
if best and estimated and not energy_rows.empty:
    label = energy_rows.iloc[:, 0]
    energy_rows = energy_rows[~label.str.contains("baseline") | (label == registry.label(best))]
tables.styled_scores(energy_rows, captions["energy"])

# %% [markdown]
# ## The verdict on the primary model
#
# The {glue:text}`verdict_model` against its criteria:

# %%
# hide
tables.styled_prose(tables.verdict_table(validation, builds, short=True), first_width="40%")

# %%
out = write_json(
    d / "headline.json",
    {
        "energy_label": label,
        **numbers.headline_record(validation, noise, verdict),
        "absolute_answer": answer,
        "gpu": {k: gpu_numbers.get(k) for k in ("device", "runs", "energy", "tiers")},
        "law_coefficients": numbers.law_coefficients(fit),
        "coefficients": coefficients.to_dict("records"),
        "paper_vs_reproduction": paper.to_dict("records"),
    },
)
print(f"wrote {out}")
