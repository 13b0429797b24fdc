"""The results-first headline (the page of stage 06_headline), on small synthetic artifacts (no kernel, no
book build).

Its numbers (companion.report.numbers), tables (companion.report.tables) and sentences
(companion.report.sentences) read the primary comparison (validation.json's model_scores, model_scores_pooled,
model_verdict) and the replicate noise floor of noise.json, and say "not available" for whatever an artifact
lacks.
"""

import copy
import re
from pathlib import Path

import pandas as pd
import pytest

from companion.report import builds, numbers, sentences, tables

NA = numbers.NA
ROOT = Path(__file__).resolve().parents[2]


def _score(split, model, target, mape, lo, hi, cov, n=10):
    return {
        "split": split,
        "model": model,
        "target": target,
        "n": n,
        "mape_pct": mape,
        "mape_lo_pct": lo,
        "mape_hi_pct": hi,
        "median_ape_pct": mape,
        "max_ape_pct": 3 * mape,
        "coverage_pct": cov,
        "noise_floor_pct": 99.0,
    }  # the scores' own floor column is not the one the headline quotes


@pytest.fixture
def validation():
    rows = []
    for target in ("time", "energy"):
        rows += [
            _score("leave_one_size_out", "operator_roofline", target, 8.7, 7.6, 9.7, 93.3, n=89),
            _score("leave_one_mode_out", "operator_roofline", target, 18.2, 17.3, 19.0, 58.8, n=17),
            _score("holdout", "operator_roofline", target, 22.3, 14.3, 30.5, 53.8, n=13),
            _score("leave_one_size_out", "roofline_power_law", target, 21.6, 15.3, 29.2, 97.8, n=89),
            _score("leave_one_mode_out", "roofline_power_law", target, 61.4, 53.8, 68.2, 88.2, n=17),
            _score("holdout", "roofline_power_law", target, 38.8, 26.0, 51.3, 61.5, n=13),
            _score("leave_one_size_out", "flops_power_law", target, 25.1, 20.6, 29.4, 91.0, n=89),
            _score("leave_one_size_out", "tokens_linear", target, 71.4, 49.4, 94.2, 88.8, n=89),
        ]
    rows.append(_score("leave_one_size_out", "tdp_time", "energy", 4.4, 1.2, 6.2, 85.4, n=89))
    pooled = [
        {**_score("", m, t, mape, lo, hi, cov, n=106), "split": None}
        for m, t, mape, lo, hi, cov in (
            ("operator_roofline", "time", 9.9, 8.1, 10.8, 90.8),
            ("operator_roofline", "energy", 8.6, 7.7, 9.4, 96.7),
            ("roofline_power_law", "time", 28.5, 14.7, 35.0, 98.7),
            ("roofline_power_law", "energy", 27.8, 15.0, 34.4, 96.7),
            ("flops_power_law", "time", 30.0, 23.9, 33.7, 93.5),
            ("flops_power_law", "energy", 27.6, 21.9, 30.8, 93.5),
            ("tokens_linear", "energy", 74.0, 57.3, 88.6, 86.9),
            ("tdp_time", "energy", 6.4, 1.5, 8.2, 89.5),
        )
    ]
    for p in pooled:
        del p["split"]
    verdict = {
        "model": "operator_roofline",
        "targets": {
            "time": {
                "pooled_mape_pct": 9.9,
                "worst_split": "leave_one_mode_out",
                "worst_split_mape_pct": 18.2,
                "best_baseline": "flops_power_law",
                "best_baseline_mape_pct": 30.0,
                "holdout_mape_pct": 22.3,
                "coverage_pct_by_split": {
                    "leave_one_size_out": 93.3,
                    "leave_one_mode_out": 58.8,
                    "holdout": 53.8,
                },
                "meets_pooled": True,
                "meets_every_split": False,
                "beats_half_best_baseline": True,
                "coverage_in_range": False,
                "meets_holdout": False,
                "unbounded_intervals": 0,
                "coverage_consistent": False,
                "coverage_range_pct_by_split": {
                    "leave_one_size_out": [84.3, 95.5],
                    "leave_one_mode_out": [76.5, 100.0],
                    "holdout": [76.9, 100.0],
                },
            }
        },
    }
    return {
        "level": 0.9,
        "model_splits": {
            "leave_one_size_out": "hold out every run of one model size",
            "leave_one_mode_out": "hold out every run of one parallel mode",
        },
        "model_scores": rows,
        "model_scores_pooled": pooled,
        "model_verdict": verdict,
        # the old laws-only tables: the headline must not read them
        "summary": [{"split": "leave_one_size_out", "law": "roofline_power_law", "mape_pct": 1.0}],
        "verdict": {"mape_pct": 1.0},
    }


NOISE = {
    "definition": "relative deviation of each run from the mean of its configuration's replicates",
    "metrics": {
        "time_per_step": {"mape": 0.0514, "n_configs": 49, "n_runs": 98},
        "energy_per_step": {"mape": 0.0632, "n_configs": 49, "n_runs": 98},
    },
}


def test_score_table_reads_model_scores_per_split_and_model(validation):
    t = tables.score_table(validation, "time")
    assert list(t.model) == [
        numbers.MODELS[m]
        for m in ("operator_roofline", "roofline_power_law", "flops_power_law", "tokens_linear")
    ]
    headers = list(t.columns)
    assert headers[0] == "model" and headers[1].startswith("pooled") and "106 runs" in headers[1]
    assert [h.split("<br>")[0] for h in headers[1:]] == [
        "pooled",
        "size",
        "mode",
        "off-grid",
    ]  # holdout included
    cell = t.iloc[0][headers[1]]
    assert cell.startswith("<b>9.9</b>") and "8.1" in cell and "11]" in cell and "91 %" in cell
    mode = t.iloc[0][headers[3]]
    assert (
        "<b>18.2</b>" in mode and "17" in mode and "19]" in mode and 'color:#b00">59 %' in mode
    )  # below the range: red
    assert "color" not in t.iloc[0][headers[2]]
    assert 'color:#b00">99 %' in t.iloc[1][headers[1]]  # above the range (wider than promised): red too
    # where the scores carry the binomial range, it decides: 100 % on 17 runs is what exact intervals often show
    rows = validation["model_scores"]
    for r in rows:
        r.update({"coverage_lo_pct": 76.5, "coverage_hi_pct": 100.0} if r["n"] == 17 else {})
    ranged = tables.score_table(
        {
            **validation,
            "model_scores": rows + [{**rows[1], "coverage_pct": 100.0, "split": "leave_one_degree_out"}],
        },
        "time",
    )
    degree = [c for c in ranged.columns if c.startswith("degree")][0]
    assert "100 %" in ranged.iloc[0][degree] and "color" not in ranged.iloc[0][degree]
    assert 'color:#b00">59 %' in ranged.iloc[0][headers[3]]  # 58.8 % on 17 runs: below even that range
    assert t.iloc[3][headers[3]] == "—"  # tokens-linear was not scored on that split
    assert "floor" not in cell  # no floor of the cell's own runs in these scores: none shown
    # the floor of a split's runs: under its name where every model scores the same runs, else in each cell
    pooled_floor = {
        **validation,
        "model_scores_pooled": [{**r, "runs_floor_pct": 7.26} for r in validation["model_scores_pooled"]],
    }
    floored = tables.score_table(pooled_floor, "time")
    assert "floor 7.3" in floored.columns[1] and "floor" not in floored.iloc[0, 1]
    uneven = copy.deepcopy(pooled_floor)
    uneven["model_scores_pooled"][0]["runs_floor_pct"] = 5.04
    cells = tables.score_table(uneven, "time")
    assert "floor" not in cells.columns[1] and cells.iloc[0, 1].endswith("<small>floor 5.0</small>")
    assert not any("floor" in c for c in tables.score_table(pooled_floor, "time", floors=False).columns)
    # an exact model's MAPE on a split's runs sits under its name, where the scores carry it
    assert "exact" not in headers[1]
    exact = tables.score_table(
        {
            **validation,
            "model_scores_pooled": [
                {**r, "exact_floor_pct": 7.24} for r in validation["model_scores_pooled"]
            ],
        },
        "time",
    )
    assert exact.columns[1].endswith("<br><small>exact 7.2</small>") and "exact" not in exact.columns[2]
    energy = tables.score_table(validation, "energy")
    assert energy.model.iloc[-1] == numbers.MODELS["tdp_time"]  # the after-the-fact baseline: energy only
    before = tables.score_table(validation, "energy", after_the_fact=False)  # predictions made before running
    assert numbers.MODELS["tdp_time"] not in set(before.model) and len(before) == len(energy) - 1
    assert (
        "<b>27.8</b>" in energy.iloc[1][energy.columns[1]]
    )  # pooled energy of the paper's law, not time's 28.5


def test_noise_floor_is_the_replicate_noise_of_noise_json(validation):
    f = numbers.noise_floor(NOISE)
    assert f == {
        "time": "5.1 %",
        "energy": "6.3 %",
        "n_configs": "49",
        "n_runs": "98",
        "exact_time": NA,
        "exact_energy": NA,
    }
    no_replicates = {"metrics": {"time_per_step": {"mape": None, "n_configs": 0}}}
    assert numbers.noise_floor(no_replicates)["time"] == NA
    # the passes separate a pass's shift from each run's scatter: the exact model's error beside the floor
    exact = copy.deepcopy(NOISE)
    for metric, mape in (("time_per_step", 0.071), ("energy_per_step", 0.088)):
        exact["metrics"][metric]["exact_model"] = {
            "mape": mape,
            "scatter_sd_log": 0.085,
            "n_configs": 36,
            "passes": 2,
            "pass_shift_log": [0.0392, -0.0392],
        }
    f = numbers.noise_floor(exact)
    assert (f["exact_time"], f["exact_energy"]) == ("7.1 %", "8.8 %")


def test_verdict_table_reads_model_verdict(validation):
    v = tables.verdict_table(validation)
    time = v["time per step"].tolist()
    assert time[0] == "9.9 %: met"
    assert time[1] == "mode, 18.2 %: not met"
    assert time[2] == "met (the FLOPs-only power law at 30.0 %)"
    assert time[3].startswith("not met") and "mode 59 %" in time[3] and "off-grid 54 %" in time[3]
    assert "size" not in time[3]  # 93 % lies inside the range
    # the same coverage asked of the sample size: 59 % of 17 runs is not what exact intervals show
    assert time[4].startswith("no (") and "mode 59 % against 76–100 %" in time[4] and "size" not in time[4]
    assert (
        time[6] == "22.3 %: not met (measured once each: no floor of their own)" and "10 %" in v.criterion[6]
    )
    assert set(v["energy per step"]) == {NA}  # the verdict has no energy entry here
    # the coverage criterion on the stored builds' pooled runs: not available without them
    assert (
        time[5] == NA
        and "pooled over the stored builds" in v.criterion[5]
        and "not the criterion" in v.criterion[5]
    )
    pooled = pd.DataFrame(
        {
            "model": "operator_roofline",
            "target": ["time", "time", "time", "energy"],
            "split": ["pooled", "leave_one_mode_out", "holdout", "holdout"],
            "coverage_pct": [90.0, 88.64, 95.4, 91.0],
            "sweeps": 20,
            "n": [900, 395, 542, 542],
        }
    )
    builds_row = tables.verdict_table(validation, pooled)
    assert builds_row["time per step"][5] == (
        "no (88.6–95.4 % over 20 builds, 395–542 held-out predictions per split "
        "summed over them; outside: off-grid 95.4 %)"
    )
    assert builds.coverage_over_builds_text(pooled, "energy", band=(85, 95), predictions=True).startswith(
        "yes (91.0–91.0 % over 20 builds"
    )
    assert (
        builds.coverage_over_builds_text(pooled, "energy", band=None) == NA
        and builds.coverage_over_builds_text(None, "time", band=(85, 95)) == NA
    )
    assert "10 %" in v.criterion[0] and "85–95 %" in v.criterion[3]  # model_verdict's own thresholds
    assert numbers.verdict_model(validation) == "operator roofline"
    # off-grid runs measured twice: the row shows their own replicate floor beside their MAPE
    twice = copy.deepcopy(validation)
    twice["model_verdict"]["targets"]["time"]["holdout_noise_floor_pct"] = 8.4
    assert tables.verdict_table(twice)["time per step"].tolist()[6] == "22.3 %: not met (floor 8.4 %)"
    # the stretch: the split whose MAPE is the most times the floor of its own runs, or why none is judged
    assert time[7] == NA and "1.5 x the replicate floor" in v.criterion[7]
    twice["model_verdict"]["targets"]["time"].update(
        floor_ratio_by_split={"pooled": 1.4, "leave_one_mode_out": 2.46, "holdout": 1.1}, meets_stretch=False
    )
    assert tables.verdict_table(twice)["time per step"].tolist()[7] == "not met (mode, 2.5 x its floor)"
    twice["model_verdict"]["targets"]["time"].update(
        floor_ratio_by_split={"pooled": 1.4, "holdout": None}, meets_stretch=None
    )
    assert (
        tables.verdict_table(twice)["time per step"].tolist()[7]
        == f"{NA} (too few replicated runs for a floor: off-grid)"
    )
    # a split past the stretch fails it, though the off-grid runs have no floor
    twice["model_verdict"]["targets"]["time"].update(
        floor_ratio_by_split={"pooled": 2.2, "holdout": None}, meets_stretch=False
    )
    assert tables.verdict_table(twice)["time per step"].tolist()[7] == "not met (pooled, 2.2 x its floor)"
    # beside the coverage criterion: how often exact intervals would meet it on splits of these sizes
    twice["model_verdict"]["targets"]["time"]["coverage_in_range_chance"] = 0.043
    assert (
        tables.verdict_table(twice)["time per step"]
        .tolist()[3]
        .endswith("; exact intervals would meet it on splits of these sizes about 4 % of the time")
    )
    assert numbers.coverage_summary(twice)["chance_time"] == "4 % of the time"
    assert numbers.coverage_summary(validation)["chance_time"] == NA  # a verdict without it: not available
    # beside the stretch, no criterion: the MAPEs over what an exact model would score on the same runs
    assert time[8] == NA and "no criterion" in v.criterion[8]
    twice["model_verdict"]["targets"]["time"]["exact_floor_ratio_by_split"] = {
        "pooled": 1.38,
        "leave_one_size_out": 1.3,
        "leave_one_mode_out": 2.14,
        "holdout": None,
    }
    assert tables.verdict_table(twice)["time per step"].tolist()[8] == "1.4 x (mode, 2.1 x)"
    # the split where an exact model's own error is above the stretch times the floor is named: 1.3 / 0.8 = 1.6 x
    twice["model_verdict"]["targets"]["time"].update(
        floor_ratio_by_split={"pooled": 1.4, "leave_one_size_out": 1.3, "leave_one_mode_out": 2.46},
        exact_floor_ratio_by_split={"pooled": 1.38, "leave_one_size_out": 0.8, "leave_one_mode_out": 2.14},
        meets_stretch=False,
    )
    assert tables.verdict_table(twice)["time per step"].tolist()[7] == (
        "not met (mode, 2.5 x its floor); an exact model would score above 1.5 x the floor itself on size, 1.6 x"
    )
    # the strongest baseline: the model's own calibrated tier, fitted on nothing
    assert time[9] == f"{NA} (calibrated tier {NA})" and "0.7 × its own calibrated tier" in v.criterion[9]
    twice["model_verdict"]["targets"]["time"].update(
        calibrated_tier_mape_pct=16.5, over_calibrated_tier=9.9 / 16.5, beats_calibrated_tier=True
    )
    assert (
        tables.verdict_table(twice)["time per step"].tolist()[9] == "met (calibrated tier 16.5 %, ratio 0.60)"
    )


def test_paper_vs_reproduction_from_the_artifacts(validation):
    p = tables.paper_vs_reproduction(validation, {}, "estimated energy (x) on cpu", NOISE)
    text = " ".join(p["this reproduction"])
    assert "27.8 % [15.0, 34.4] pooled, worst split mode at 61.4 %, off-grid runs 38.8 %" in text
    assert "the FLOPs-only power law, 27.6 % [21.9, 30.8]" in text
    assert "the law does not beat it (0.2 points worse)" in text and "intervals overlap" in text
    assert "time MAPE 9.9 % [8.1, 10.8] pooled, worst split mode at 18.2 %, off-grid runs 22.3 %" in text
    assert "replicate noise floor 6.3 %" in text
    assert f"α = {NA}" in text  # no fit.json: the coefficients are not available, nothing raises
    # a law with the lower MAPE and separate intervals beats the baseline clearly
    better = dict(
        validation,
        model_scores_pooled=[
            {
                "model": "roofline_power_law",
                "target": "energy",
                "n": 9,
                "mape_pct": 10.0,
                "mape_lo_pct": 8.0,
                "mape_hi_pct": 12.0,
            },
            {
                "model": "flops_power_law",
                "target": "energy",
                "n": 9,
                "mape_pct": 30.0,
                "mape_lo_pct": 25.0,
                "mape_hi_pct": 35.0,
            },
        ],
    )
    text = " ".join(tables.paper_vs_reproduction(better, {}, "x", NOISE)["this reproduction"])
    assert "the law beats it by 20.0 points; their MAPE intervals do not overlap" in text


def test_missing_or_changed_artifacts_give_not_available():
    for broken in ({}, {"model_scores": "changed"}, {"model_scores": [{"split": "s"}]}, {"model_verdict": 3}):
        assert tables.score_table(broken, "time").empty
        assert NA in tables.styled_scores(tables.score_table(broken, "time")).data  # a sentence, not a repr
        assert set(tables.verdict_table(broken)["time per step"]) == {NA}
        p = tables.paper_vs_reproduction(broken, {"energy_laws": 3}, NA, None)
        assert all(NA in text for text in p["this reproduction"][:4])
        assert NA in sentences.summary_text(broken, {})
        assert sentences.split_legend(broken) == NA
    assert numbers.noise_floor({"metrics": "changed"})["energy"] == NA
    assert numbers.level_pct({"level": "0.9"}) == NA and numbers.level_pct({"level": 0.9}) == "90"
    assert numbers.mape_level_pct() == "90"
    assert numbers.default_pct("companion.energy.validation", "no_such_function") == NA


def test_absolute_answer_names_the_model_and_tier():
    explore = pd.DataFrame(
        [
            {
                "model": "bert-tiny",
                "seq_len": 64,
                "steps": 37500,
                "energy_kwh": 0.00764,
                "energy_kwh_lo": 0.0056,
                "energy_kwh_hi": 0.0103,
                "time_h": 0.28,
                "energy_kind": "estimated",
                "op_tier": "fitted",
                "op_energy_kwh": 0.00644,
                "op_energy_kwh_lo": 0.0053,
                "op_energy_kwh_hi": 0.0078,
                "op_time_h": 0.227,
            }
        ]
    )
    params = {"examples": 100000, "epochs": 3, "batch_size": 8}
    label = "estimated energy (CodeCarbon: CPU power modelled from load and TDP) on cpu"
    a = sentences.absolute_answer(explore, params, label, "cpu")
    assert a.startswith(
        "Fine-tuning bert-tiny (sequence length 64, batch size 8) on 100,000 examples for 3 epochs "
        "costs 0.00644 kWh (90 % interval 0.0053–0.0078 kWh) and 0.23 h on cpu"
    )
    assert "by the operator roofline in its fitted tier" in a and "whose energy is estimated (CodeCarbon" in a
    assert "The paper's law, fitted to the same runs, says 0.00764 kWh (90 % interval 0.0056–0.010 kWh)" in a
    calibrated = sentences.absolute_answer(explore.assign(op_tier="calibrated"), params, label, "cpu")
    assert "calibrated tier" in calibrated and "whose energy" not in calibrated
    old = explore.drop(
        columns=[c for c in explore if c.startswith("op_")]
    )  # an explore.csv of before the tiers
    assert "by the paper's law fitted to this build's runs (estimated energy" in sentences.absolute_answer(
        old, params, label
    )
    assert sentences.absolute_answer(explore, {}, label) == NA  # examples and epochs unknown
    assert sentences.absolute_answer(pd.DataFrame(), params, label) == NA


def test_sentences_become_paragraphs_with_their_numbers_in_bold():
    html = sentences.paragraph(
        "costs 0.00644 kWh (0.0053–0.0078 kWh) on 100,000 examples, L2-h128, p > 1, 5.1 %"
    ).data
    assert "<b>0.00644 kWh</b>" in html and "<b>0.0053–0.0078 kWh</b>" in html and "<b>100,000</b>" in html
    assert "<b>5.1 %</b>" in html and "L2-h128" in html and "&gt;" in html
    assert "<b>2</b>" not in html and "<b>128</b>" not in html
    assert "<b>27.6 %</b>." in sentences.paragraph("the baseline 27.6 %. Next").data
    assert (
        "3.2e+05 kWh" in sentences.paragraph("between 2.3e-05 and 3.2e+05 kWh").data
    )  # exponents stay whole


def test_coefficient_table_puts_the_operator_roofline_first():
    fit = {
        "operator_model": {"time": {"gemm_s": 1.24, "comm_latency_s": 1.0}, "energy": {"e_flop_j": 4.4e-12}}
    }
    rows = tables.operator_coefficients(fit)
    assert [r["coefficient"] for r in rows] == ["gemm_s", "comm_latency_s", "e_flop_j"]
    assert rows[0]["unit"] == "x roofline" and rows[2]["unit"] == "J/FLOP"
    assert rows[1]["note"] == "held at its calibrated value, not fitted" and rows[0]["note"] == ""
    assert tables.operator_coefficients({"operator_model": "changed"}) == []
    # each layout's factor comes last, named by its layout, in words too
    scaled = tables.operator_coefficients(
        {"operator_model": {**fit["operator_model"], "layout_scale": {"tp1-dp2": 0.84}}}
    )
    assert scaled[-1]["coefficient"] == "layout_scale[tp1-dp2]" and scaled[-1]["value"] == "0.84"
    assert sentences.coefficient_words(scaled[-1]["coefficient"]) == "factor on layout tp1-dp2"
    dropped = tables.operator_coefficients(
        {"operator_model": {"time": {"elementwise_s": 0.0}, "energy": {"P_core_w": 0.0}}}
    )
    # an energy term is fitted non-negative too: at 0 (e_flop_j, e_comm_j on a sweep) the note says so
    assert "at its bound 0" in dropped[0]["note"] and "at its bound 0" in dropped[1]["note"]
    # a static power below the calibration's idle power is named, one at or above it is not
    static = {"energy": {"P_static_w": 13.5}, "dev": {"idle_w": 20.8, "shared_node": True}}
    note = tables.operator_coefficients({"operator_model": static})[0]["note"]
    assert "below the calibration's idle power (20.8 W)" in note and "per-core power trade off" in note
    static["dev"]["idle_w"] = 10.0
    assert tables.operator_coefficients({"operator_model": static})[0]["note"] == ""


def test_coefficient_notes_name_unphysical_signs_and_coefficients_at_their_bound():
    assert "unphysical" in tables._flag("alpha", -0.8, -1.2, -0.3)
    assert tables._flag("alpha", 0.8, 0.7, 0.9) == ""
    sigma = tables._flag("sigma", 0.0, 0.0, 0.0)
    assert "at its bound 0" in sigma and "bootstrap" not in sigma  # one note, not two for the same fact
    assert "at its bound 0" in tables._flag("kappa", 0.0, 0.0, 0.004)
    assert "reaches its bound 0" in tables._flag("kappa", 0.001, 0.0, 0.004)  # cannot be told from none
    assert tables._flag("sigma", 0.1, 0.05, 0.2) == ""
    # the baselines' and the energy roofline's non-negative coefficients: an interval from 0 is named
    assert "reaches its bound 0" in tables._flag("b_j", 0.1, 0.0, 0.49)
    assert "reaches its bound 0" in tables._flag("eps_Q_j_per_byte", 1e-10, 0.0, 3e-10)


def _prose(lines):
    """The text of markdown lines, without glue roles, code spans, links and directives."""
    text = " ".join(lines)
    for pattern in (
        r"\{glue:[a-z]*\}`[^`]*`",
        r"`[^`]*`",
        r"\]\([^)]*\)",
        r"```\{glue:\}[^\n]*",
        r":doc: \S+",
    ):
        text = re.sub(pattern, " ", text)
    return text


def test_the_headline_page_types_no_number():
    """Every number of the headline page comes from an artifact through glue (section numbers aside)."""
    source = (ROOT / "notebooks" / "06_headline.py").read_text()
    cells = re.split(r"^# %%.*$", source, flags=re.M)
    markdown = [c for c in re.findall(r"^# %% \[markdown\]\n((?:#.*\n?)*)", source, flags=re.M)]
    assert markdown and len(cells) > len(markdown)
    text = _prose(line.lstrip("# ") for block in markdown for line in block.splitlines())
    assert not re.findall(r"\d", text), re.findall(r".{20}\d.{20}", text)


def test_the_introduction_results_are_glued():
    intro = (ROOT / "book" / "intro.md").read_text()
    first, rest = intro.split("## The claim", 1)
    assert "answer_box" in first and "fig_hero" in first  # the first screen: the answer and one figure
    assert "paper_table" in rest  # the paper's claims beside this build's figures
    assert "generated/06_headline.ipynb)" in rest  # the per-split tables live there, linked
    # every number of the answer and the claims is glued: the text types none (the law's symbols and p aside)
    text = _prose(re.sub(r"\$\$.*?\$\$|\$[^$]*\$|\{cite\}`[^`]*`", " ", intro, flags=re.S).splitlines())
    assert not re.findall(r"\d", text), re.findall(r".{20}\d.{20}", text)


def test_the_paper_claims_table_keeps_the_figures(validation):
    fit = {}
    text = " ".join(tables.paper_claims(validation, fit)["this build"])
    for figure in ("27.8 % [15.0, 34.4]", "61.4 %", "27.6 % [21.9, 30.8]", "0.2 points worse"):
        assert figure in text, figure
    assert f"α = {NA}" in text  # no fit.json: the coefficients are not available, nothing raises


def test_a_usl_fitted_at_one_degree_says_kappa_was_fixed_not_fitted():
    fits = [
        {"size": "L2-h256", "mode": "tp", "sigma": 0.61234, "kappa": 0.0412, "degrees": [2, 4]},
        {"size": "L2-h256", "mode": "2d", "sigma": 1.70848, "kappa": 0.0, "degrees": [4]},
    ]
    t = tables.usl_table(fits)
    assert list(t.columns) == ["size", "mode", "σ", "κ", "degrees", "note"]
    assert t.iloc[0].tolist() == ["L2-h256", "tp", "0.612", "0.0412", "2, 4", ""]
    assert (
        t.iloc[1]["κ"] == "0 (fixed)"
        and t.iloc[1]["degrees"] == "4"
        and "one degree only (4)" in t.iloc[1]["note"]
    )
    assert "size" not in tables.usl_table([{k: v for k, v in fits[0].items() if k != "size"}])
    sigma, kappa, *two = tables.usl_coefficient_rows(
        [
            {**fits[1], "sigma_ci90": [1.66, 1.76], "kappa_ci90": [0.0, 0.0]},
            {**fits[0], "sigma_ci90": [0.5, 0.7], "kappa_ci90": [0.0, 0.09]},
        ],
        "90 % interval",
    )
    assert kappa["note"].startswith("fixed at 0, not fitted") and "at its bound" not in kappa["note"]
    assert kappa["90 % interval"] == "—"  # no interval for a value that was never fitted
    assert "κ fixed at 0" in sigma["note"] and sigma["90 % interval"] == "[1.66, 1.76]"
    assert two[0]["note"] == "" and two[1]["90 % interval"] == "[0, 0.09]"  # two degrees: fitted, and its
    assert (
        "reaches its bound 0" in two[1]["note"]
    )  # interval reaching 0 says these runs cannot rule κ = 0 out


def test_the_runs_the_scores_rest_on_are_named_and_a_busy_machine_is_said(validation):
    sweep_noise = {"metrics": {"time_per_step": {"mape": 0.181, "n_configs": 53, "n_runs": 106}}}
    busy = {
        **validation,
        "noise": NOISE,
        "ci_filter": {
            "max_step_ci95_rel": 0.1,
            "sweep": {"runs": 106, "kept": 43, "parallel_runs": 20, "parallel_kept": 3},
            "holdout": {"runs": 28, "kept": 16},
        },
    }
    text = sentences.scored_runs_text(busy, sweep_noise)
    assert "43 of the sweep's 106 runs (3 of its 20 parallel runs) and 16 of the 28 off-grid runs" in text
    assert "within ±10 %" in text and "18.1 % for time, against 5.1 % over the runs scored" in text
    assert "busy" in text and "quiet machine" in text
    assert "mode on 17 runs" not in text  # the fixture's splits all have >= FEW_RUNS runs: none named as few
    few = copy.deepcopy(busy)
    few["model_scores"] = [
        dict(r, n=3) if r["split"] == "leave_one_mode_out" else r for r in few["model_scores"]
    ]
    assert "some splits rest on few (mode on 3 runs)." in sentences.scored_runs_text(few, sweep_noise)
    assert "busy" in sentences.scored_runs_short(
        busy
    ) and "43 of the sweep's 106 runs" in sentences.scored_runs_short(busy)
    # a sweep the filter barely touched is not called busy; the parallel runs count on their own
    quiet = {
        **busy,
        "ci_filter": {
            "max_step_ci95_rel": 0.1,
            "sweep": {"runs": 106, "kept": 100, "parallel_runs": 20, "parallel_kept": 18},
        },
    }
    assert "busy" not in sentences.scored_runs_text(quiet, sweep_noise) + sentences.scored_runs_short(quiet)
    par = {
        **busy,
        "ci_filter": {
            "max_step_ci95_rel": 0.1,
            "sweep": {"runs": 106, "kept": 90, "parallel_runs": 20, "parallel_kept": 4},
        },
    }
    assert "busy" in sentences.scored_runs_text(par, sweep_noise)
    # the test set's runs are counted too, where the artifact has any
    tested = copy.deepcopy(quiet)
    tested["ci_filter"]["test"] = {"runs": 10, "kept": 7}
    assert "parallel runs) and 7 of the 10 test-set runs" in sentences.scored_runs_text(tested, sweep_noise)
    # an artifact from before the filter's counts were written: said, not guessed
    assert NA in sentences.scored_runs_text(validation) and NA in sentences.scored_runs_short(validation)


def test_a_glued_paragraph_sets_commands_as_code():
    html = sentences.paragraph("measure again (then `make reproduce`) on 2 cores").data
    assert "<code>make reproduce</code>" in html and "`" not in html


def test_a_gap_between_two_models_is_the_difference_of_the_printed_figures():
    # 33.24 and 33.46 print as 33.2 and 33.5: the text must say 0.3 points, not the unrounded 0.2
    s = pd.DataFrame(
        [
            _score(numbers.POOLED, "roofline_power_law", "energy", 33.24, 30.0, 36.0, 90.0),
            _score(numbers.POOLED, "flops_power_law", "energy", 33.46, 31.0, 36.5, 90.0),
        ]
    )
    text = tables._beats(s, "roofline_power_law", "flops_power_law", "energy")
    assert text.startswith("the law beats it by 0.3 points") and "intervals overlap" in text
    s.loc[1, "mape_pct"] = 33.21  # both print as 33.2
    assert tables._beats(s, "roofline_power_law", "flops_power_law", "energy").startswith("the law ties")


def test_every_coefficient_has_words():
    assert sentences.coefficient_words("gemm_s") == "GEMMs" and sentences.coefficient_words(
        "alpha"
    ).startswith("α")
    assert sentences.coefficient_words("layout_scale[tp2-dp1]") == "factor on layout tp2-dp1"
    from companion.energy.laws import LAWS
    from companion.energy.opmodel import ENERGY_PARAMS, TIME_UNITS

    names = (
        {p for law in LAWS.values() for p in law.params}
        | set(ENERGY_PARAMS)
        | set(TIME_UNITS)
        | {"sigma", "kappa"}
    )
    assert not [n for n in names if sentences.coefficient_words(n) == n], (
        "a coefficient the book shows as code"
    )


def test_estimated_energy_is_said_not_to_be_a_test_of_its_own(validation):
    runs = pd.DataFrame({"energy_measured": [False, False]})
    v = copy.deepcopy(validation)
    v.setdefault("model_scores_pooled", []).append(
        {"model": "power_given_time", "target": "energy", "mape_pct": 3.21, "split": "pooled"}
    )
    text = sentences.energy_honesty_text(v, runs)
    assert "estimated, not measured" in text and "not an independent test" in text and "3.2 %" in text
    assert "is measured" in sentences.energy_honesty_text(v, runs.assign(energy_measured=True))
    assert NA in sentences.energy_honesty_text(v, pd.DataFrame())


def test_the_verdict_reports_the_test_set_apart(validation):
    v = copy.deepcopy(validation)
    assert tables.verdict_table(v)["time per step"].tolist()[10] == f"{NA} (no test-set runs in this build)"
    v["model_verdict"]["targets"]["time"].update(
        test_mape_pct=8.25,
        meets_test=True,
        test_runs=10,
        test_coverage_pct=90.0,
        test_over_calibrated_tier=0.61,
        test_beats_calibrated_tier=True,
    )
    table = tables.verdict_table(v)
    assert (
        table["time per step"].tolist()[10] == "8.2 %: met (10 runs; coverage 90 %; 0.61 × calibrated: met)"
    )
    assert "nothing chosen by it" in table.criterion[10]
    # with the range resampling its runs gives
    v["model_verdict"]["targets"]["time"]["test_mape_range_pct"] = [6.04, 11.46]
    assert (
        tables.verdict_table(v)["time per step"].tolist()[10].startswith("8.2 % [6.0, 11.5]: met (10 runs;")
    )
    # and, measured in two passes, its own replicate floor
    v["model_verdict"]["targets"]["time"]["test_noise_floor_pct"] = 5.06
    assert "met (10 runs; floor 5.1 %; coverage 90 %" in tables.verdict_table(v)["time per step"].tolist()[10]
    # and, where the host-speed correction moved it, the same predictions against the runs as measured
    v["model_verdict"]["targets"]["time"]["test_as_measured_mape_pct"] = 12.34
    assert (
        "met (10 runs; 12.3 % as measured; floor 5.1 %"
        in tables.verdict_table(v)["time per step"].tolist()[10]
    )
    v["model_verdict"]["targets"]["time"]["test_as_measured_mape_pct"] = 8.249
    assert "as measured" not in tables.verdict_table(v)["time per step"].tolist()[10]


def test_the_headline_figures_are_given_with_and_without_the_step_time_filter():
    figs = {
        "time": {
            "pooled_mape_pct": 9.0,
            "worst_split": "leave_one_mode_out",
            "worst_split_mape_pct": 14.0,
            "holdout_mape_pct": 11.0,
            "test_mape_pct": 8.0,
        },
        "energy": {"pooled_mape_pct": 8.5, "worst_split": "leave_one_size_out", "worst_split_mape_pct": 12.0},
    }
    worse = {"time": {**figs["time"], "pooled_mape_pct": 11.5}, "energy": figs["energy"]}
    v = {
        "filter_sensitivity": {
            "max_step_ci95_rel": 0.1,
            "dropped": {"sweep": ["r1"], "holdout": ["h1", "h2"]},
            "with_filter": figs,
            "without_filter": worse,
        }
    }
    runs = pd.DataFrame(
        {
            "run_id": ["r1", "r2"],
            "layers": [4, 1],
            "hidden": [256, 64],
            "seq_len": [256, 64],
            "batch_size": [8, 2],
            "world_size": [4, 1],
            "mode": ["tp", "single"],
        }
    )
    text = sentences.filter_sensitivity_text(v, runs)
    assert "left out 3 runs (1 of the sweep, 2 of the validation set)" in text
    # the largest change between the figures with and without the filter, in one number
    assert "move by at most 2.5 points (time, pooled: 9.0 % with it, 11.5 % without)" in text
    assert "left out: 1 parallel (4 layers)." in text and "single" not in text
    runs.loc[1, "run_id"] = "r3"
    v["filter_sensitivity"]["dropped"] = {"sweep": ["r1", "r3"]}
    both = sentences.filter_sensitivity_text(v, runs)
    assert "left out: 1 single-process (1 layer), 1 parallel (4 layers)." in both
    v["filter_sensitivity"]["dropped"] = {"sweep": []}
    assert "left out no run" in sentences.filter_sensitivity_text(v, runs)
    assert NA in sentences.filter_sensitivity_text({}, runs)


def test_the_answer_box_gives_the_hardware_the_energy_kind_the_errors_and_the_gpu(validation):
    v = copy.deepcopy(validation)
    v["model_verdict"]["targets"]["time"].update(test_mape_pct=8.6, over_calibrated_tier=0.83)
    runs = pd.DataFrame({"energy_measured": [False] * 3, "world_size": [1, 2, 4]})
    gpu = {
        "device": "H200",
        "runs": 7,
        "tiers": {"calibrated": {"time_mape_pct": 15.0, "energy_mape_pct": 7.8}},
    }
    body = sentences.answer_box(v, runs, gpu, "cpu (host amd-epyc)").data
    assert "cpu (host amd-epyc), 3 runs on 1 to 4 ranks" in body and "estimated" in body
    assert (
        "9.9 % time" in body
        and "on the test set 8.6 % time" in body
        and "0.83 × its calibrated tier's error" in body
    )
    # the ratio beside its criterion, and the runs the scores rest on where the step-time filter left some out
    assert "(≤ 0.7 ×" not in body  # a verdict without the criterion says nothing of it
    v["model_verdict"]["targets"]["time"]["beats_calibrated_tier"] = False
    assert "0.83 × its calibrated tier's error (≤ 0.7 ×: not met)" in sentences.answer_box(v, runs).data
    v["model_verdict"]["targets"]["time"]["beats_calibrated_tier"] = True
    assert "(≤ 0.7 ×: met)" in sentences.answer_box(v, runs).data
    v["ci_filter"] = {"sweep": {"runs": 106, "kept": 66}, "max_step_ci95_rel": 0.1}
    assert (
        "3 runs on 1 to 4 ranks, 66 of the grid's 106 kept by the step-time filter."
        in sentences.answer_box(v, runs).data
    )
    v["ci_filter"]["sweep"]["kept"] = 106
    assert "step-time filter" not in sentences.answer_box(v, runs).data
    assert (
        "criteria</a> met for time" in body
        and f'<a href="{sentences.VERDICT_HREF}">' in body
        and "H200" in body
        and "15.0 % time and 7.8 % energy over 7 runs" in body
    )
    assert "measured by a hardware counter" in sentences.answer_box(v, runs.assign(energy_measured=True)).data
    # the paper's law against the best baseline: a lower MAPE whose interval overlaps the baseline's is no win
    assert "(FLOPs-only power law) 27.6 %: no better (intervals overlap)." in body
    for row in v["model_scores_pooled"]:
        if (row["model"], row["target"]) == ("roofline_power_law", "energy"):
            row.update(mape_pct=12.0, mape_lo_pct=10.0, mape_hi_pct=14.0)
    assert ": it beats it." in sentences.answer_box(v, runs, gpu, "cpu").data
    # beside the errors, how far the same runs measured twice differ (the replicate floor), where it is known
    assert "5.1 %" not in body and "5.1 % and 6.3 %" in sentences.answer_box(v, runs, gpu, "cpu", NOISE).data
    # beside this build's test-set figure, the mean over every build of the draw (the stored builds' scores
    # pooled, as the page Across builds gives them), when several
    from companion.energy import stored

    scores = pd.DataFrame(
        [
            {"sweep": b, "split": "test", "model": "operator_roofline", "target": t, "mape_pct": m}
            for b, t, m in (
                ("a", "time", 8.6),
                ("a", "energy", 9.0),
                ("b", "time", 13.0),
                ("b", "energy", 12.0),
            )
        ]
    ).assign(n=16, n_unbounded=0, coverage_pct=100.0, exact_floor_pct=7.0)
    both = sentences.answer_box(v, runs, gpu, "cpu", None, stored.pooled_coverage(scores, n_boot=10)).data
    assert "on the test set 8.6 % time" in both and "(10.8 % and 10.5 % over 2 builds)" in both
    one = stored.pooled_coverage(scores[scores.sweep == "a"], n_boot=10)
    assert " builds)" not in sentences.answer_box(v, runs, gpu, "cpu", None, one).data


def test_the_verdict_table_states_the_thresholds_the_artifact_recorded(validation):
    v = copy.deepcopy(validation)
    v["model_verdict"]["criteria"] = {
        "target_pct": 12.0,
        "split_pct": 18.0,
        "coverage": [80.0, 97.0],
        "stretch": 2.0,
        "calibrated_ratio": 0.6,
    }
    crit = tables.verdict_table(v).criterion.tolist()
    assert "at most 12 %" in crit[0] and "at most 18 %" in crit[1] and "80–97 %" in crit[3]
    assert "0.6 × its own calibrated tier" in crit[9]


def test_the_answer_box_compares_nothing_it_does_not_have():
    body = sentences.answer_box({}, pd.DataFrame({"energy_measured": [False], "world_size": [1]})).data
    assert "no comparison in this build" in body and "does not beat" not in body and "no verdict" in body


def test_the_answer_box_gives_the_range_of_the_gpu_s_other_calibrations(validation):
    runs = pd.DataFrame({"energy_measured": [False] * 2, "world_size": [1, 2]})
    tier = lambda t, e: {"time_mape_pct": t, "energy_mape_pct": e}  # noqa: E731
    gpu = {
        "device": "H200",
        "one_machines": [
            {
                "runs": {"reference": 7, "test": 6},
                "tiers": {
                    "reference": {"calibrated": tier(7.4, 5.2)},
                    "test": {"calibrated": tier(6.1, 4.9), "prior": tier(13.2, 3.5)},
                },
            },
        ],
        # another machine's calibration on these runs, the first machine's own (some checks failed) and the test
        # machine's own earlier one on its runs
        "host_speed": {
            "calibrated_from_probe_machine": {"reference": tier(27.9, 19.5), "test": tier(37.2, 27.5)}
        },
        "tiers": {"calibrated": tier(15.0, 7.8)},
        "test": {"tiers": {"calibrated": tier(69.7, 45.6)}},
    }
    body = sentences.answer_box(validation, runs, gpu, "cpu").data
    assert "a machine's own calibration misses 6 test runs by 6.1 % time, 4.9 % energy" in body
    # the datasheet's priors beside it: on energy they do as well
    assert "; datasheet priors by 13.2 % and 3.5 %" in body
    # another machine's calibrations only: the first machine's own (some checks failed, 15 %) is not one
    assert "(another machine's: 28–70 % time)" in body
    # a second machine's set: the range over both, the second's prior missing its energy figure
    second = {
        "runs": {"reference": 7, "test": 6},
        "tiers": {
            "reference": {"calibrated": tier(15.1, 10.2)},
            "test": {"calibrated": tier(21.1, 12.1), "prior": tier(20.5, float("nan"))},
        },
    }
    gpu["one_machines"].append(second)
    body = sentences.answer_box(validation, runs, gpu, "cpu").data
    assert "2 machines' own calibrations miss 6 test runs by 6.1–21.1 % time, 4.9–12.1 % energy" in body
    # no range is quoted over fewer machines than the sentence names: the priors are left out
    assert "datasheet priors" not in body


def test_the_host_speed_sentence_says_what_the_correction_did_or_that_there_was_none():
    from companion.report.sentences import host_speed_sentence

    runs = pd.DataFrame({"host_speed_factor": [0.91, 1.0, 1.27, None]})
    noise = {
        "metrics": {"time_per_step": {"mape": 0.061}},
        "as_measured": {"corrected_runs": 3, "mape": {"time_per_step": 0.083}},
    }
    text = host_speed_sentence(runs, noise)
    assert "(0.91 to 1.27, 3 of 4 runs; runs of several ranks keep their measured times)" in text
    assert "8.3 % from their configuration's mean as measured, 6.1 % at the typical speed" in text
    none = "Every time here is as measured: no run timed the host-speed reference."
    assert host_speed_sentence(runs.assign(host_speed_factor=None), {**noise, "as_measured": None}) == none
    assert host_speed_sentence(pd.DataFrame({"step_s": [1.0]}), None) == none


def test_replicates_are_counted_per_configuration_where_groups_differ():
    replicates_words = sentences.replicates_words
    runs = pd.DataFrame({"config_id": ["a", "a", "b", "b", "c"], "replicate": [0, 1, 0, 1, 0]})
    assert replicates_words(runs) == "twice (2 configurations) or once (1)"
    assert replicates_words(runs[runs.config_id != "c"]) == "twice"
    assert replicates_words(runs.drop(columns="config_id")) == "twice"  # a frame from before config ids
