"""The signed error of a split's held-out predictions: the direction MAPE hides."""

import pandas as pd
import pytest

from companion.energy import validation as val
from companion.report.figures import degree_bias_text


def _pred(rows):
    return pd.DataFrame([{"model": "operator_roofline", "split": "leave_one_degree_out", **r} for r in rows])


def test_signed_errors_say_which_way_each_degree_is_off():
    pred = _pred(
        [
            {"world_size": 2, "mode": "tp", "target": "time", "measured": 1.0, "predicted": 0.9},
            {"world_size": 2, "mode": "fsdp", "target": "time", "measured": 2.0, "predicted": 1.6},
            {"world_size": 4, "mode": "tp", "target": "time", "measured": 1.0, "predicted": 1.1},
            {"world_size": 4, "mode": "tp", "target": "energy", "measured": 1.0, "predicted": 1.0},
        ]
    )
    pred = pd.concat([pred, pred.assign(split="leave_one_size_out", predicted=5.0)], ignore_index=True)
    bias = val.signed_errors(pred)
    got = {(r.world_size, r.mode, r.target): r.mean_error_pct for r in bias.itertuples()}
    assert got == pytest.approx(
        {
            (2, "fsdp", "time"): -20.0,
            (2, "tp", "time"): -10.0,
            (4, "tp", "time"): 10.0,
            (4, "tp", "energy"): 0.0,
        }
    )  # the other split's predictions are not counted
    text = degree_bias_text(bias)
    assert text == (
        "Held out, the mean signed error of each layout's runs, time: FSDP of 2 ranks 20.0 % under, "
        "TP of 2 ranks 10.0 % under, TP of 4 ranks 10.0 % over; energy: TP of 4 ranks 0.0 % over"
    )


def test_no_held_out_degree_is_said_in_words():
    bias = val.signed_errors(
        _pred([{"world_size": 2, "mode": "tp", "target": "time", "measured": 1.0, "predicted": 1.0}]).assign(
            split="leave_one_size_out"
        )
    )
    assert bias.empty and "No parallel degree was held out" in degree_bias_text(bias)


def test_each_score_gives_the_same_predictions_mape_against_the_runs_as_measured():
    """Runs expressed at the sweep's typical host speed are scored there; the same predictions against the runs
    as measured (the host's speed left in) are scored beside them, never instead."""
    from companion.energy.validation import _scored, score

    rows = [
        dict(split="s", fold=0, model="m", target="time", run_id=f"r{i}", size="L1", mode="single",
             world_size=1, measured=1.0, predicted=1.0, lo=0.5, hi=2.0, as_measured=raw)
        for i, raw in enumerate([1.25, 0.8])
    ]  # fmt: skip
    out = score(_scored(rows))
    assert out.mape_pct[0] == 0.0
    assert out.as_measured_mape_pct[0] == pytest.approx((0.25 / 1.25 + 0.2 / 0.8) / 2 * 100)
