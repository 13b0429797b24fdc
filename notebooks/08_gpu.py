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
# # On a GPU
#
# ```{glue:} gpu_intro
# ```
#
# Each {term}`tier <Tier>` predicts the runs of the one-machine sets, the first machine and the test machine
# unseen; the calibrated tier, the modes machines' runs.

# %% tags=["parameters"]
profile = "cpu"  # the build whose derived folder this page writes its artifact into
device = "H200"
attention_device = "H100"  # the board that also ran attention outside the compiled graphs
level = 0.9

# %%
# hide
import pandas as pd
from IPython.display import display
from myst_nb import glue

from companion import paths
from companion.energy import hardware, reference
from companion.report import figures, gpu, provenance, sentences
from companion.runs.records import load_records, write_json

figures.use_offline_renderer()
numbers = reference.reference_numbers(device, level=level)
numbers["attention"] = reference.modes_numbers(attention_device, level=level)
scores = pd.DataFrame(numbers["scores"])
power, base = numbers["power_w"], numbers["bert_base_s512"]
total_runs = (
    numbers["runs"]
    + ((numbers.get("test") or {}).get("runs") or 0)
    + sum(sum(one["runs"].values()) for one in numbers["one_machines"])
    + ((numbers.get("modes") or {}).get("runs") or 0)
    + ((numbers.get("modes_masked") or {}).get("runs") or 0)
    + len((numbers.get("test") or {}).get("repeat") or [])
)
glue(
    "gpu_intro",
    sentences.paragraph(
        f"{total_runs} fine-tunes of BERT-class models ran on {device} boards in bf16, their energy measured by "
        f"the board's counter (NVML): {power['runs_min']:.0f} to {power['runs_max']:.0f} W on the first machine. "
        f"{gpu.machines_text(numbers)}"
    ),
    display=False,
)

# %% [markdown]
# ## Calibration and runs from one machine
#
# ```{glue:} gpu_one_machine_text
# ```

# %%
# hide
glue("gpu_one_machine_text", sentences.paragraph(gpu.one_machine_text(numbers)), display=False)
if numbers["one_machines"]:
    display(
        gpu.one_machine_table(numbers)
        .style.hide(axis="index")
        .set_table_attributes('class="companion-numbers"')
    )

# %% [markdown]
# ## The first machine
#
# ```{glue:} gpu_errors_text
# ```

# %%
# hide
glue(
    "gpu_errors_text",
    sentences.paragraph(gpu.first_machine_text(numbers) + " " + gpu.host_bound_text(numbers)),
    display=False,
)

# %%
# hide
figures.gpu_predicted_vs_measured(scores, device)

# %% [markdown]
# ## The test machine
#
# ```{glue:} gpu_test_text
# ```

# %%
# hide
glue("gpu_test_text", sentences.paragraph(gpu.test_text(numbers)), display=False)

# %% [markdown]
# ## The host sets the floor
#
# ```{glue:} gpu_host_text
# ```

# %%
# hide
glue("gpu_host_text", sentences.paragraph(gpu.host_text(numbers)), display=False)

# %% [markdown]
# ## Execution modes and engines
#
# ```{glue:} gpu_modes_text
# ```

# %%
# hide
numbers["cpu_modes"] = reference.cpu_modes_numbers()
glue(
    "gpu_modes_text",
    sentences.paragraph(f"{gpu.modes_text(numbers)} {gpu.cpu_modes_text(numbers['cpu_modes'])}".strip()),
    display=False,
)
if numbers["modes"]:
    display(
        gpu.modes_table(numbers)
        .style.hide(axis="index")
        .set_caption(gpu.modes_caption(numbers))
        .set_table_attributes('class="companion-numbers"')
    )

# %% [markdown]
# ```{glue:} gpu_attention_text
# ```

# %%
# hide
glue("gpu_attention_text", sentences.paragraph(gpu.attention_text(numbers)), display=False)

# %% [markdown]
# ## Two regimes
#
# A step takes whichever is longer: the processor issuing its kernels, or the board running them at up to
# {glue:text}`gpu_peak_tflops` (its dense bf16 peak).

# %%
# hide
points = reference.regime_points(device)
floors = reference.host_floors(points)
peak = hardware.peak_flops_per_s(device, "bf16")
glue("gpu_peak_tflops", f"{peak / 1e12:.0f} TFLOP/s", display=False)
figures.gpu_regimes(points, floors, peak, device)

# %% [markdown]
# ## Power and efficiency
#
# One BERT-base step (512 tokens, batch 32) on the first machine (a probe, not a run):

# %%
# hide
glue("gpu_mfu", f"{base['mfu_pct']:.0f} %", display=False)
glue("gpu_gflop_per_j", f"{base['gflop_per_j']:.0f}", display=False)
glue("gpu_memory_ratio", f"{base['memory_estimate_over_measured']:.2f}", display=False)
gpu.facts_table(numbers).style.hide(axis="index")

# %%
# hide
# the provenance page's table of the GPU runs this page quotes, one column per machine type (every set of the
# board's folder, and the attention set's board)
gpu_records = [
    r
    for board in dict.fromkeys((device, attention_device))
    for d in reference.RECORD_DIRS
    if (reference.reference_dir(board) / d).is_dir()
    for r in load_records(reference.reference_dir(board) / d)
]
glue(
    "gpu_sources_table",
    provenance.merged_sources(provenance.data_sources(gpu_records), hardware_only=True)
    .T.rename(columns=lambda i: f"GPU source {i + 1}")
    .style.set_table_attributes('class="companion-prose"'),
    display=False,
)

# %%
out = write_json(paths.derived_dir(profile) / "gpu.json", numbers)
print(f"wrote {out}")
