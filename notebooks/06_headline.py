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
# How far each model's predictions for runs it never saw fall from the observed runs, split by split and
# model by model, time and energy apart, before any single pooled number. Every value on this page is read
# from what the earlier stages wrote.

# %% tags=["parameters"]
profile = "cpu"

# %%
# hide
import pandas as pd
import yaml
from myst_nb import glue

from companion import paths
from companion.energy import stored
from companion.report import figures, gpu, headline
from companion.report.stages import SOURCE_ROOT
from companion.runs.records import write_json

figures.use_offline_renderer()
d = paths.derived_dir(profile)
validation = headline._read_json(d / "validation.json")
sweep_noise = headline._read_json(
    d / "noise.json"
)  # every run of the sweep, the step-time filter's left-outs too
# the floor of the runs the validation scored (within its CI filter); stage 02's floor of every run otherwise
noise = validation.get("noise") or sweep_noise
fit = headline._read_json(d / "fit.json")
runs = headline._read_csv(d / "runs.csv")
explore = headline._read_csv(d / "explore.csv")
try:
    predict_params = yaml.safe_load((SOURCE_ROOT / "params" / "05_predict.yaml").read_text()) or {}
except (OSError, yaml.YAMLError):
    predict_params = {}
try:
    label = figures.energy_label(runs) or headline.NA
except (AttributeError, KeyError, TypeError):
    label = headline.NA
scores = {t: headline.score_table(validation, t) for t in headline.TARGETS}
paper = headline.paper_vs_reproduction(validation, fit, label, noise)
coefficients = headline.coefficient_table(fit)
flagged = coefficients[coefficients.note != ""] if len(coefficients) else coefficients
floor = headline.noise_floor(noise)
answer = headline.absolute_answer(explore, predict_params, label, fit.get("device_name", headline.NA))
# the coverage criterion on every stored build's runs (stage 07), where it exists
stored_scores = headline._read_csv(d / "builds.csv")
gpu_numbers = headline._read_json(d / "gpu.json")  # the GPU chapter's (stage 08): measured energy on a GPU
builds = (
    stored.pooled_coverage(stored_scores, float(validation.get("level", 0.9))) if len(stored_scores) else None
)
verdict = headline.verdict_table(validation, builds)
glue("energy_label", label, display=False)
glue("level_pct", headline.level_pct(validation), display=False)
glue("mape_level_pct", headline.mape_level_pct(), display=False)
glue("verdict_model", headline.verdict_model(validation), display=False)
glue("n_flagged", str(len(flagged)), display=False)
glue("n_coefficients", str(len(coefficients)), display=False)
# the introduction's first screen: the answer in a box, and the held-out predictions of the primary model beside
# the paper's law
host = ", ".join(sorted(set(runs.host.astype(str)))) if "host" in runs else None
device_words = str(fit.get("device_name", headline.NA)) + (f" (host {host})" if host else "")
glue("answer_box", headline.answer_box(validation, runs, gpu_numbers, device_words), display=False)
glue(
    "fig_hero",
    figures.hero_predictions(pd.DataFrame(validation.get("model_predictions") or []), runs),
    display=False,
)
# sentences travel as HTML paragraphs (pasted text would be bold end to end); the introduction pastes them too
for key, text in (
    ("noise_text", headline.noise_text(noise)),
    ("scored_runs_text", headline.scored_runs_text(validation, sweep_noise)),
    ("summary_text", headline.summary_text(validation, noise)),
    ("absolute_answer", answer),
    ("energy_honesty_text", headline.energy_honesty_text(validation, runs)),
    ("filter_sensitivity_text", headline.filter_sensitivity_text(validation, runs)),
    (
        "gpu_text",
        gpu.headline_sentence(gpu_numbers)
        if gpu_numbers
        else "This build has no GPU reference measurements to score.",
    ),
):
    glue(key, headline.paragraph(text), display=False)
glue("split_legend", headline.legend_html(validation), display=False)
glue("scored_runs_short", headline.scored_runs_short(validation), display=False)
glue("device", str(fit.get("device_name", headline.NA)), display=False)
captions = {
    t: f"{what.capitalize()}: held-out MAPE (%), its interval, the coverage of the prediction intervals "
    "and the runs' replicate floor; under each split, its runs and the MAPE an exact model would score "
    "on them"
    for t, what in headline.TARGETS.items()
}
for target in headline.TARGETS:
    glue(f"scores_{target}", headline.styled_scores(scores[target], captions[target]), display=False)
# for the pages on measurement and limitations: the protocol's target, the replicates, the noise and coverage
glue("target_ci_pct", headline.target_ci_pct(runs), display=False)
glue("replicates_words", headline.replicates_words(runs), display=False)
glue("noise_floor_time", floor["time"], display=False)
glue("noise_floor_energy", floor["energy"], display=False)
glue("exact_floor_time", floor["exact_time"], display=False)
glue("exact_floor_energy", floor["exact_energy"], display=False)
glue("pass_drift", headline.pass_drift_text(noise), display=False)
holdout_floor = headline.noise_floor(
    validation.get("noise_holdout") or {}
)  # the off-grid runs' own replicates
glue("holdout_floor_time", holdout_floor["time"], display=False)
glue("holdout_floor_energy", holdout_floor["energy"], display=False)
for key, text in headline.coverage_summary(validation).items():
    glue(f"coverage_{key}", text, display=False)
glue("verdict_table", headline.styled_prose(verdict), display=False)
glue("paper_table", headline.styled_prose(paper), display=False)

# %% [markdown]
# How energy was obtained, the step-time filter's effect and the GPU's figures are said once, on
# [](../intro.md); the GPU's runs, tier by tier: [](08_gpu.ipynb). This page is this build's sweep.
#
# ## Held-out error and coverage, per split and model
#
# Each model is refitted without a whole group of runs and scored only on that group. A cell gives:
#
# * the mean absolute percentage error on the held-out runs (MAPE, %, in bold), with its
#   {glue:text}`mape_level_pct` % interval from resampling whole model sizes ([—] where the held-out runs come
#   from fewer than four sizes);
# * how often the model's {glue:text}`level_pct` % prediction intervals contained the observed value
#   (coverage, {glue:text}`level_pct` % being the promise). It is red where it lies outside the range that exact
#   {glue:text}`level_pct` % intervals show nine times in ten on as many runs: below that range the intervals
#   are too narrow, above it wider than promised. A small split's full coverage is no sign of either;
# * the replicate noise floor of the runs the cell scores (floor, %): how far those runs measured twice lie
#   from their configuration's mean, where at least four were. A split of parallel runs can be noisier or
#   quieter than the sweep.
#
# Energies: {glue:text}`energy_label`.
#
# What each column holds out:
#
# ```{glue:} split_legend
# ```
#
# ```{glue:} noise_text
# ```
#
# ```{glue:} scored_runs_text
# ```
#
# ### Time per step
#
# The baseline that multiplies a fitted power by the measured time reads a run's time, so it has no row here.

# %%
# hide
headline.styled_scores(scores["time"], captions["time"])

# %% [markdown]
# ### Energy per step
#
# The row "fitted power × measured time" reads each held-out run's measured time, so it is an after-the-fact
# estimate, not a prediction made before running; the other rows predict from the planned configuration alone.
# Its power is a share of the device's TDP where the hardware table has one; a CPU has none there, so on a CPU
# it is one constant power in W fitted to the runs.

# %%
# hide
headline.styled_scores(scores["energy"], captions["energy"])

# %% [markdown]
# ### The verdict on the primary model
#
# The criteria the {glue:text}`verdict_model` is held to, and what it reached on this build's runs:
# {glue:text}`scored_runs_short`.

# %%
# hide
headline.styled_prose(verdict)

# %% [markdown]
# ## One absolute answer
#
# From [](05_predict.ipynb):
#
# ```{glue:} absolute_answer
# ```
#
# ## The paper's claims and this reproduction
#
# Claim by claim, with this build's figures beside each: [](../intro.md) (the table is there only).

# %% [markdown]
# ## Fitted coefficients, with what they can and cannot tell
#
# Every coefficient that the fit stage learned from this build's runs ({glue:text}`device`), as the
# fit stage wrote them (the baselines' step-time forms are fitted only inside the validation's folds, so none
# of theirs is here). The operator roofline comes first, each parallel layout's factor last: its coefficients are point values (most are multipliers of a term computed from the device's
# calibration), and its uncertainty is carried by its prediction intervals, which come from held-out
# residuals. The laws and the USL curves of η(p) follow with their bootstrap intervals. Of
# {glue:text}`n_coefficients` coefficients, {glue:text}`n_flagged` carry a note: a negative exponent on
# FLOPs or memory traffic, an energy per FLOP below what any device spends, an interval that spans zero or
# orders of magnitude, a term at its lower bound of zero (or an interval reaching it) or held rather than
# fitted, a static power below the calibration's idle power, or an efficiency curve fitted through a single
# degree. Such a coefficient is not evidence about the hardware; it says these runs
# cannot separate that term from the others.

# %%
# hide
# each coefficient in words (headline.json keeps its name in code beside them)
shown = (
    coefficients.assign(coefficient=coefficients.meaning).drop(columns="meaning")
    if "meaning" in coefficients
    else coefficients
)
headline.styled_prose(shown, first_width="9em", nowrap=(1, 3, 5))

# %%
out = write_json(
    d / "headline.json",
    {
        "energy_label": label,
        **headline.headline_record(validation, noise, builds),
        "absolute_answer": answer,
        "gpu": {k: gpu_numbers.get(k) for k in ("device", "runs", "energy", "tiers")},
        "law_coefficients": headline.law_coefficients(fit),
        "coefficients": coefficients.to_dict("records"),
        "paper_vs_reproduction": paper.to_dict("records"),
    },
)
print(f"wrote {out}")
