"""Page sentences built from the runs: they state what is true of the runs given, and nothing where a case
does not arise."""

import pandas as pd

from companion.report import prose


def _runs(**cols):
    base = {
        "energy_measured": [False, False],
        "energy_source": ["codecarbon[cpu=cpu_load,ram=ram_model]"] * 2,
        "ram_energy_share": [0.7, 0.8],
        "data_source": ["synthetic"] * 2,
        "checkpoint": [None, None],
        "oversubscribed": [False, True],
        "host_cpus": [2, 2],
        "world_size": [1, 4],
    }
    return pd.DataFrame({**base, **cols})


def test_estimated_energy_names_both_models_and_the_ram_share():
    text = prose.energy_method_text(_runs())
    assert text.startswith("2 of 2 runs have estimated joules")
    assert prose.CPU_LOAD_MODEL in text and prose.RAM_MODEL in text
    assert all(pct in text for pct in ("75 %", "70 %", "80 %"))  # the RAM share: median, lowest, highest


def test_measured_energy_says_no_model_is_involved():
    runs = _runs(energy_measured=[True, True], energy_source=["nvml"] * 2, ram_energy_share=[None, None])
    assert "no power model" in prose.energy_method_text(runs)


def test_data_text_says_synthetic_text_or_names_the_file():
    assert "generated text" in prose.data_text(_runs()) and "random weights" in prose.data_text(_runs())
    text = prose.data_text(_runs(data_source=["reviews.csv"] * 2, checkpoint=["/m/minilm"] * 2))
    assert "reviews.csv" in text and "/m/minilm" in text and "generated" not in text


def test_oversubscription_is_said_only_where_a_run_was_oversubscribed():
    assert (
        "1 of the 1 parallel runs started more ranks than the machine has cores (up to 4 ranks on 2 cores)"
        in prose.oversubscription_text(_runs())
    )
    assert prose.oversubscription_text(_runs(oversubscribed=[False, False])) == ""


def test_static_power_text_compares_p0_with_idle_only_when_it_is_below():
    low = prose.static_power_text(0.4, 10.0, 20.0, 0.7)
    assert "below" in low and "20.0 W" in low and "10.0 W" in low and "40 %" in low and "70 %" in low
    assert "below" not in prose.static_power_text(0.4, 19.0, 20.0, None)


def test_ram_shares_are_the_runs_that_have_one():
    assert prose.ram_shares(_runs(ram_energy_share=[0.7, None])).tolist() == [0.7]
    assert prose.ram_shares(
        _runs().drop(columns="ram_energy_share")
    ).empty  # a runs.csv from before the column


def test_a_page_using_a_partly_replaced_calibration_says_so():
    from companion.report.prose import calibration_banner

    assert calibration_banner("cpu", {}, gpu=False) is None
    cpu = calibration_banner("cpu", {"gemm": ["stuck"], "power": ["nan"]}, gpu=False)
    assert (
        "matrix-multiply roof, power" in cpu
        and "for the matrix-multiply roof, a roof measured when the" in cpu
    )
    assert "for the power, the value as measured" in cpu  # a CPU's power has no replacement
    threads = calibration_banner("cpu", {"thread_scaling": ["busy"]}, gpu=False)
    assert "for the thread scaling, every core adding its share" in threads
    assert "datasheet" in calibration_banner("H200", {"attention": ["small"]}, gpu=True)


def test_a_page_says_a_calibration_warning_without_the_machine_s_path(tmp_path):
    from types import SimpleNamespace

    from companion.report.prose import calibration_notes

    path = tmp_path / "devices" / "cpu.json"
    found = SimpleNamespace(
        path=path, warnings=[f"calibration {path}: gemm failed its check (stuck); using x"]
    )
    (recorded, note) = calibration_notes(found, ["op_counts failed its check twice (uneven layers): flagged"])
    assert str(tmp_path) not in note and note.startswith(
        "the calibration: the matrix-multiply roof failed its check"
    )
    assert recorded.startswith("the operator counts failed its check twice")
