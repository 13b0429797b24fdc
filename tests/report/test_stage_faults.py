"""Stages under faults: a profile given as a .yaml path works for every stage; missing inputs, n_boot <= 0,
no finished runs and a failing notebook each end with one line."""

import subprocess
from pathlib import Path

import pytest

from companion.energy.tables import runs_frame
from companion.errors import ConfigError
from companion.report import stages


def test_a_profile_path_files_artifacts_under_its_name(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_ROOT", str(tmp_path))
    assert stages.profile_name("some/where/mine.yaml") == "mine" and stages.profile_name("cpu") == "cpu"
    derived = tmp_path / "data" / "derived" / "mine"
    derived.mkdir(parents=True)
    for name in ("runs.csv", "proxies.csv", "fit.json", "validation.json", "explore.csv"):
        (derived / name).write_text("x\n")
    calls = []
    empty = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'

    def fake_run(cmd, **kw):  # jupytext and papermill write their notebook, nothing runs
        calls.append(cmd)
        if "jupytext" in cmd[0]:
            Path(cmd[cmd.index("-o") + 1]).write_text(empty)
        elif "papermill" in cmd[0]:
            Path(cmd[cmd.index("-k") + 4]).write_text(empty)  # the executed copy
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(stages.subprocess, "run", fake_run)
    for stage in stages.STAGES:
        stages.run_stage(stage, "some/where/mine.yaml", tmp_path / "gen")
    papermill = [c for c in calls if "papermill" in c[0]]
    profiles = [c[c.index("profile") + 1] for c in papermill]
    # stage 01 loads the profile file itself; the later stages read data/derived/mine/
    assert profiles == ["some/where/mine.yaml"] + ["mine"] * (len(stages.STAGES) - 1)


def test_a_missing_input_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPANION_ROOT", str(tmp_path))
    assert stages.main(["run", "03_fit", "--profile", "my.yaml", "--out", str(tmp_path / "gen")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        "stage 03_fit needs" in line
        and "derived/my/proxies.csv" in line
        and "run stage 02_proxies first" in line
    )


@pytest.mark.parametrize("n_boot", ["0", "-5", "2.5"])
def test_n_boot_not_positive_is_refused_before_the_stage(tmp_path, monkeypatch, capsys, n_boot):
    monkeypatch.setenv("COMPANION_ROOT", str(tmp_path))
    params = tmp_path / "p.yaml"
    params.write_text(f"n_boot: {n_boot}\n")
    assert (
        stages.main(["run", "03_fit", "--profile", "ci", "--params", str(params), "--out", str(tmp_path)])
        == 2
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"n_boot={n_boot}" in line.replace("'", "") and "positive integer" in line


def test_no_runs_or_only_failed_runs_is_one_error():
    with pytest.raises(ConfigError, match="no finished runs to analyse among 0 record"):
        runs_frame([])
    failed = [{"run_id": "r", "status": "failed", "error": {"type": "Diverged", "message": "diverged: nan"}}]
    with pytest.raises(ConfigError, match=r"1 failed; e.g. r: Diverged: diverged: nan.*--retry-failed"):
        runs_frame(failed)


def test_a_failing_notebook_is_reported_as_its_exception(tmp_path, monkeypatch, capsys):
    """Stage 01 on a folder without finished runs: the notebook raises, the user reads one line."""
    monkeypatch.setenv("COMPANION_ROOT", str(tmp_path))
    (tmp_path / "data" / "runs" / "ci").mkdir(parents=True)
    params = tmp_path / "p.yaml"
    params.write_text("run_sweep: false\n")
    assert (
        stages.main(["run", "01_runs", "--profile", "ci", "--params", str(params), "--out", str(tmp_path)])
        == 1
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        line.startswith("error: stage 01_runs failed: ConfigError: no finished runs to analyse")
        and "full log" in line
    )


def test_last_error_is_the_notebook_exception():
    text = (
        "Executing: 100%\n\x1b[0;31mConfigError\x1b[0m: wrong thing; fix it\n"
        'papermill.exceptions.PapermillExecutionError: \n---\nException encountered at "In [3]":\n'
        "companion.errors.ConfigError: wrong thing; fix it\n"
    )
    assert stages._last_error(text) == "ConfigError: wrong thing; fix it"
