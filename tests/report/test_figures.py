"""Figures: words instead of code names, one colour per series, and a width that fits the text column."""

import re

import pandas as pd

from companion.report import figures, numbers

RUNS = pd.DataFrame({"device_name": ["cpu"], "energy_measured": [False], "energy_source": ["nvml"]})


def test_energy_label_says_how_the_energy_was_obtained():
    runs = pd.DataFrame(
        {
            "device_name": ["cpu", "cpu"],
            "energy_measured": [False, False],
            "energy_source": ["codecarbon[cpu=cpu_load,ram=ram_model]"] * 2,
        }
    )
    assert figures.energy_label(runs) == (
        "estimated energy (CodeCarbon: CPU power modelled from load and TDP, "
        "RAM power from the installed memory) on a CPU"
    )
    assert figures.describe_source("nvml") == "NVML energy counter"
    assert figures.describe_source("something-new") == "something-new"


def test_operator_classes_get_one_colour_each_and_words():
    terms = pd.DataFrame(
        {
            "run_id": ["r1"],
            "mode": ["single"],
            "flops_per_step": [1.0],
            **{t: [1.0] for t in figures.OPERATOR_WORDS},
        }
    )
    spec = figures.operator_time_breakdown(terms, RUNS).to_dict()
    scale = spec["encoding"]["color"]["scale"]
    assert scale["domain"] == list(figures.OPERATOR_WORDS.values())
    assert len(set(scale["range"])) == len(scale["domain"])  # no two classes share a colour


def test_per_run_figures_show_one_bar_per_configuration_its_runs_averaged():
    split = pd.DataFrame(
        {
            "run_id": [
                "L1-h64_tp1-dp1@cpu-fp32.aaaaaa",
                "L1-h64_tp1-dp1@cpu-fp32-r1.bbbbbb",
                "L2-h64_tp1-dp1@cpu-fp32.cccccc",
            ],
            "mode": ["single"] * 3,
            "flops_per_step": [1.0, 1.0, 2.0],
            "compute_j": [1.0, 1.0, 2.0],
            "memory_j": [1.0, 1.0, 2.0],
            "static_j": [2.0, 4.0, 2.0],  # the measured time differs between the replicates
        }
    )
    data = pd.DataFrame(figures.static_vs_dynamic(split, RUNS).to_dict()["datasets"].popitem()[1])
    static = data[data.part == "static"].set_index("run")
    assert list(static.index) == ["L1-h64 tp1-dp1", "L2-h64 tp1-dp1"]  # one bar each, no replicate suffix
    assert static.energy_j.tolist() == [3.0, 2.0] and static.runs.tolist() == [2, 1]


def test_the_model_comparison_fits_the_text_column():
    import vl_convert as vlc

    rows = [
        {
            "split": s,
            "model": m,
            "target": t,
            "n": 5,
            "mape_pct": 10.0,
            "mape_lo_pct": 8.0,
            "mape_hi_pct": 12.0,
            "coverage_pct": 90.0,
        }
        for s in numbers.SPLITS
        for m in numbers.MODELS
        for t in ("time", "energy")
    ]
    svg = vlc.vegalite_to_svg(figures.static_spec(figures.model_comparison(pd.DataFrame(rows), RUNS)))
    width = float(re.search(r'width="([\d.]+)"', svg).group(1))
    assert width <= 784, width  # the book's text column at 1400 px
    assert "operator roofline" in svg and "off-grid runs" in svg and "operator_roofline" not in svg


def test_validation_charts_name_models_and_splits_in_words():
    pred = pd.DataFrame(
        {
            "law": ["roofline_power_law"] * 2,
            "split": ["leave_one_size_out", "holdout"],
            "fold": ["L1", "off-grid"],
            "mode": ["single", "tp"],
            "run_id": ["a", "b"],
            "measured_j": [1.0, 2.0],
            "predicted_j": [1.1, 1.8],
            "lo_j": [0.9, 1.5],
            "hi_j": [1.3, 2.2],
            "ape_pct": [10.0, 10.0],
        }
    )
    text = str(figures.predicted_vs_measured(pred, RUNS, "roofline_power_law").to_dict())
    assert "paper's law" in text and "size held out" in text and "off-grid runs" in text
    legend = figures.predicted_vs_measured(pred, RUNS, "roofline_power_law").to_dict()["layer"][1]["encoding"]
    assert (
        legend["color"]["legend"]["symbolOpacity"] == 1
    )  # the layout key is not as faint as the interval bars


def test_coefficient_panels_keep_targets_apart():
    coef = pd.DataFrame(
        {
            "law": ["roofline_power_law"] * 2,
            "target": ["energy_per_step_j", "step_s"],
            "param": ["alpha", "alpha"],
            "value": [0.3, 0.25],
            "lo": [0.1, 0.1],
            "hi": [0.5, 0.4],
        }
    )
    keys = set(figures.coefficients(coef, RUNS).data.key)
    law = figures.MODEL_WORDS["roofline_power_law"]  # panels name laws and coefficients in words
    assert keys == {
        f"{law}: α (FLOPs exponent)",
        f"{law}: α (FLOPs exponent) (step time)",
    }


def test_bar_labels_drop_the_content_hash_unless_two_runs_would_share_one():
    ids = pd.Series(
        [
            "L2-h128-a4-s128-b8_tp1-dp1@cpu-fp32-r1.942a08",
            "L2-h128-a4-s128-b8_tp1-dp1@cpu-fp32-r1.942a08",
            "L1-h64-a2-s64-b8_tp1-dp1@cpu-fp32.4afd27",
            "L1-h64-a2-s64-b8_tp1-dp1@cpu-fp32.bb3e75",
        ]
    )
    labels = figures.run_labels(ids).tolist()
    # one run, melted over two parts; the device and precision every run shares left out
    assert labels[:2] == ["L2-h128-a4-s128-b8 tp1-dp1-r1"] * 2
    assert labels[2:] == ids.tolist()[2:]  # two runs that differ only in their hash keep it
    # runs of two devices keep theirs
    two = figures.run_labels(
        pd.Series(["L1-h64-a2-s64-b8_tp1-dp1@cpu-fp32.4afd27", "L1_tp1-dp1@H200-bf16.bb3e75"])
    )
    assert two.tolist() == ["L1-h64-a2-s64-b8 tp1-dp1@cpu-fp32", "L1 tp1-dp1@H200-bf16"]


def test_every_law_coefficient_has_words_for_its_panel():
    # the coefficient figure titles its panels with these: a coefficient without words would show its code name
    from companion.energy.models import UNITS
    from companion.report.figures import PARAM_WORDS

    assert set(PARAM_WORDS) == set(UNITS)


def test_the_first_figure_calls_estimated_energy_estimated_on_its_axis_and_in_its_hover():
    pred = pd.DataFrame(
        {
            "split": ["leave_one_size_out", "test"],
            "model": ["operator_roofline", "roofline_power_law"],
            "target": ["energy", "energy"],
            "measured": [1.0, 2.0],
            "predicted": [1.1, 1.8],
            "ape_pct": [10.0, 10.0],
        }
    )
    text = str(figures.hero_predictions(pred, RUNS).to_dict())
    assert "estimated energy per step (J)" in text and "'estimated (J)'" in text
    assert "measured (J)" not in text and "measured energy" not in text
    measured = RUNS.assign(energy_measured=True)
    assert "'measured (J)'" in str(figures.hero_predictions(pred, measured).to_dict())


def test_a_figure_of_host_speed_corrected_times_says_so():
    import pandas as pd

    from companion.report.figures import time_word

    assert time_word(pd.DataFrame({"step_s": [1.0]})) == "measured"
    assert time_word(pd.DataFrame({"host_speed_factor": [None, None]})) == "measured"
    assert time_word(pd.DataFrame({"host_speed_factor": [None, 1.1]})) == "host-speed-corrected"
