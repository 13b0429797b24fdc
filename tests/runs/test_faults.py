"""Faults around runs: the meter's environment, the folder lock, run identity, corrupt records, divergence,
strict JSON, unwritable folders and full disks. Nothing measured is lost, nothing wrong is written."""

import json
import math
import os
import socket

import pytest

from companion.errors import ConfigError
from companion.runs import provenance
from companion.runs.config import build_run
from companion.runs.records import (
    FolderLock,
    check_writable,
    existing_status,
    load_records,
    make_record,
    read_record,
    resume_status,
    strict_dumps,
    write_json,
    write_record,
)
from companion.runs.train import run_plan
from conftest import companion_cmd

FIXED = {"warmup_steps": 1, "window_steps": 2, "min_windows": 2, "max_steps": 4, "target_rel_ci": 0.0}
TINY = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "vocab": 256,
    "max_positions": 64,
    "seq_len": 16,
    "batch_size": 4,
}
TINY_ARGS = [
    "--layers",
    "1",
    "--hidden",
    "32",
    "--heads",
    "2",
    "--vocab",
    "256",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
    "--warmup-steps",
    "1",
    "--window-steps",
    "2",
    "--min-windows",
    "2",
    "--max-steps",
    "4",
    "--target-rel-ci",
    "0",
]


# ---- 1. the meter's environment
def test_codecarbon_variables_are_neutralised_and_recorded(monkeypatch):
    monkeypatch.setattr(provenance, "_NEUTRALISED", {})
    monkeypatch.setenv("CODECARBON_PUE", "3")
    monkeypatch.setenv("CODECARBON_FORCE_CPU_POWER", "500")
    monkeypatch.setenv("CODECARBON_OUTPUT_DIR", "/no/such/folder")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    removed = provenance.neutralise_meter_environment()
    assert set(removed) == {"CODECARBON_PUE", "CODECARBON_FORCE_CPU_POWER", "CODECARBON_OUTPUT_DIR"}
    assert not [k for k in os.environ if k.startswith("CODECARBON_")]
    env = provenance.meter_environment()
    assert env["variables"]["CODECARBON_PUE"] == "3" and env["variables"]["CUDA_VISIBLE_DEVICES"] == "1,0"
    assert env["neutralised"] == ["CODECARBON_FORCE_CPU_POWER", "CODECARBON_OUTPUT_DIR", "CODECARBON_PUE"]
    # CodeCarbon, started now, sees none of them: PUE 1 and no forced CPU power
    from codecarbon import OfflineEmissionsTracker

    tracker = OfflineEmissionsTracker(
        country_iso_code="USA",
        output_methods=[],
        log_level="error",
        measure_power_secs=3600,
        allow_multiple_runs=True,
    )
    assert tracker._pue == 1 and tracker._force_cpu_power is None


@pytest.mark.slow
def test_a_run_under_codecarbon_variables_records_them_and_does_not_crash(tmp_path):
    env = {**os.environ, "CODECARBON_PUE": "3", "CODECARBON_OUTPUT_DIR": str(tmp_path / "missing")}
    out = tmp_path / "runs"
    res = companion_cmd("run", *TINY_ARGS, "--meter", "codecarbon", "--out", str(out), env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    (rec,) = load_records(out)
    assert rec["status"] == "ok" and rec["energy"]["total_j"] > 0
    menv = rec["provenance"]["meter_environment"]
    assert menv["variables"]["CODECARBON_PUE"] == "3" and "CODECARBON_PUE" in menv["neutralised"]


# ---- 2. one writer per output folder
@pytest.mark.slow
def test_a_second_writer_is_refused_with_the_holder(tmp_path):
    with FolderLock(tmp_path):
        with pytest.raises(ConfigError, match=f"in use by host {socket.gethostname()}, pid {os.getpid()}"):
            FolderLock(tmp_path).acquire()
        res = companion_cmd("sweep", "--profile", "ci", "--out", str(tmp_path), "--quiet", timeout=120)
        assert res.returncode == 2 and "traceback" not in res.stderr.lower()
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith("error: ") and f"pid {os.getpid()}" in line and "another --out" in line
        res = companion_cmd("run", *TINY_ARGS, "--meter", "none", "--out", str(tmp_path), timeout=120)
        assert res.returncode == 2 and "in use by" in res.stderr
    assert not list(tmp_path.glob("*.json"))
    FolderLock(tmp_path).acquire().release()  # released: the folder is free again (no stale lock)


# ---- 3. run identity follows the data file's content; failed runs can be retried
def test_editing_a_source_file_makes_a_new_run(tmp_path, minilm_path):
    src = tmp_path / "data.csv"
    src.write_text("text,label\ngood film,1\nbad film,0\n")
    before = build_run({**TINY, "source": str(src), "tokenizer": str(minilm_path)})
    src.write_text("text,label\ngood film,1\nawful film,0\n")
    after = build_run({**TINY, "source": str(src), "tokenizer": str(minilm_path)})
    assert before.run_id != after.run_id
    assert after.to_dict()["data"]["source_sha256"] != before.to_dict()["data"]["source_sha256"]
    # synthetic runs keep their identity (no hash of a file)
    assert "source_sha256" not in build_run(TINY).to_dict()["data"]
    assert (
        build_run(TINY).run_id == "L1-h32-a2-s16-b4_tp1-dp1@cpu-fp32.b286bc"
    )  # the id it had before content hashes


# ---- 7. diverged runs are failed, and every record is strict JSON
@pytest.mark.slow
def test_a_diverging_run_is_failed_and_retry_keeps_the_first_failure(tmp_path, capsys):
    from companion.cli import main

    out = tmp_path / "runs"
    args = ["run", *TINY_ARGS, "--meter", "none", "--lr", "1e30", "--out", str(out)]
    res = companion_cmd(*args, timeout=300)  # the command a user types, in its own process
    assert res.returncode == 1, res.stderr
    (rec,) = load_records(out)
    assert rec["status"] == "failed" and rec["error"]["reason"] == "diverged"
    assert "lower lr" in rec["error"]["message"]
    text = next(out.glob("*.json")).read_text()
    assert "NaN" not in text and "Infinity" not in text
    capsys.readouterr()
    main(args)  # the same command again, here (the process start is not what this checks)
    assert "already failed, skipped; --retry-failed runs it again" in capsys.readouterr().out
    assert main([*args, "--retry-failed"]) == 1 and "moved to" in capsys.readouterr().out
    assert len(list((out / "failed").glob("*.json"))) == 1 and len(load_records(out)) == 1


def test_non_finite_numbers_are_written_as_null(tmp_path):
    rec = {"run_id": "r", "status": "ok", "loss": {"curve": [1.0, math.nan, math.inf]}, "x": -math.inf}
    path = write_record(tmp_path, rec)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["loss"]["curve"] == [1.0, None, None] and json.loads(text)["x"] is None
    assert json.loads(write_json(tmp_path / "a.json", {"v": math.nan}).read_text()) == {"v": None}
    assert strict_dumps({"a": [math.inf]}) == '{"a": [null]}'


# ---- 6. a corrupt record names its file and is set aside on resume
def test_a_truncated_record_is_named_and_set_aside_on_resume(tmp_path):
    write_record(tmp_path, {"run_id": "good", "status": "ok"})
    (tmp_path / "bad.json").write_text('{"run_id": "bad", "stat')
    with pytest.raises(ConfigError, match="bad.json is corrupt"):
        load_records(tmp_path)
    with pytest.raises(ConfigError, match="bad.json is corrupt"):
        read_record(tmp_path / "bad.json")
    assert resume_status(tmp_path, "bad", "T0") is None  # so the run is done again
    assert not (tmp_path / "bad.json").exists()
    kept = tmp_path / "corrupt" / "bad.corrupt-T0.json"
    assert kept.read_text() == '{"run_id": "bad", "stat'  # renamed, never deleted
    assert [r["run_id"] for r in load_records(tmp_path)] == ["good"]


@pytest.mark.slow
def test_a_sweep_resumes_over_a_corrupt_record(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "device: cpu\nbase: {layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, "
        "seq_len: 16, batch_size: 4, meter: none, warmup_steps: 1, window_steps: 2, min_windows: 2, "
        "max_steps: 4, target_rel_ci: 0.0}\ngroups:\n  - vary: {seed: [0, 1]}\n"
    )
    out = tmp_path / "runs"
    from companion.runs.profiles import load_profile

    ids = [r.run_id for r in load_profile(str(profile)).runs]
    out.mkdir()
    (out / f"{ids[0]}.json").write_text("{")
    res = companion_cmd("sweep", "--profile", str(profile), "--out", str(out), "--quiet", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "2 ok, 0 failed" in res.stdout
    assert len(list((out / "corrupt").glob("*.json"))) == 1 and len(load_records(out, status="ok")) == 2


# ---- 10. the output folder
@pytest.mark.slow
def test_an_unwritable_folder_is_found_before_training(tmp_path):
    blocker = tmp_path / "a-file"  # a folder cannot be made under a file, whoever runs the test (root too)
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="is not writable"):
        check_writable(blocker / "runs")
    with pytest.raises(ConfigError, match="a-file is a file, not a folder"):  # not the OS's 'File exists'
        check_writable(blocker)
    res = companion_cmd("run", *TINY_ARGS, "--meter", "none", "--out", str(blocker / "runs"), timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "--out" in line and "not writable" in line and "[1/1]" not in res.stdout  # nothing was trained
    res = companion_cmd("sweep", "--profile", "ci", "--out", str(blocker / "runs"), "--quiet", timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not writable" in res.stderr


def test_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_record(tmp_path, {"run_id": "r", "status": "ok"})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert list(tmp_path.iterdir()) == []  # neither a record nor a 0-byte temporary file


def test_a_record_that_cannot_be_written_is_one_error_naming_it(tmp_path, monkeypatch):
    from companion.runs import train

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train, "write_record", full)
    cfg = build_run({**TINY, **FIXED, "meter": "none"})
    with pytest.raises(ConfigError, match=f"cannot write the record .*{cfg.run_id}.json .*No space left"):
        run_plan([cfg], tmp_path, "unit")


# ---- launch errors: a launch that refuses its plan is one error, not a failed record per run
def test_a_launch_that_refuses_its_plan_writes_no_records(tmp_path, monkeypatch):
    import sys

    from companion.runs import sweep
    from companion.runs.profiles import load_profile

    monkeypatch.setattr(
        sweep,
        "worker_command",
        lambda plan, out, ws, device, **k: [
            sys.executable,
            "-c",
            "import sys; print('error: NVML is not available; use meter=codecarbon'); sys.exit(2)",
        ],
    )
    profile = load_profile("ci")
    with pytest.raises(ConfigError, match="before finishing any run: NVML is not available"):
        sweep.run_sweep(profile, tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))
    FolderLock(tmp_path).acquire().release()  # the lock was released on the way out


def test_retry_failed_runs_a_plans_failed_runs_again(tmp_path, monkeypatch, capsys):
    """A plan run by hand or by an emitted cluster script: --retry-failed moves its failed records aside (kept in
    failed/) before the plan runs, and leaves its finished ones."""
    from companion.runs import train
    from companion.runs.sweep import write_plan

    out = tmp_path / "runs"
    ok, bad = (
        build_run({**TINY, **FIXED, "meter": "none"}),
        build_run({**TINY, **FIXED, "meter": "none", "lr": 1.0}),
    )
    for cfg, status in ((ok, "ok"), (bad, "failed")):
        write_record(out, make_record(cfg, "manual", status, None, None, "2026-01-01T00:00:00Z", {}))
    plan = write_plan(tmp_path / "plan.json", "manual", [ok, bad])
    seen = []
    monkeypatch.setattr(
        train,
        "run_plan",
        lambda configs, out_dir, *a, **k: seen.append(resume_status(out_dir, bad.run_id, "x")) or 0,
    )
    assert train.main(["--plan", str(plan), "--out", str(out)]) == 0 and seen == ["failed"]
    assert train.main(["--plan", str(plan), "--out", str(out), "--retry-failed"]) == 0 and seen[-1] is None
    assert "earlier failed record moved to" in capsys.readouterr().out
    assert existing_status(out, ok.run_id) == "ok" and len(list((out / "failed").glob("*.json"))) == 1


def test_a_run_another_launch_recorded_meanwhile_is_kept_aside_not_lost(tmp_path, monkeypatch, capsys):
    """Two launches over one folder (plans run by hand): the one that finishes second finds the record written.
    Its measurement is kept under duplicates/, the first record untouched, and the line says so."""
    from companion.runs import train

    out = tmp_path / "runs"
    cfg = build_run({**TINY, **FIXED, "meter": "none"})
    first = write_record(
        out, make_record(cfg, "manual", "ok", {"mark": "first"}, None, "2026-01-01T00:00:00Z", {})
    )
    monkeypatch.setattr(
        train, "resume_status", lambda *a, **k: None
    )  # it was not there when this launch looked
    assert run_plan([cfg], out, "manual") == 0
    assert json.loads(first.read_text())["mark"] == "first" and len(load_records(out)) == 1
    (kept,) = (out / "duplicates").glob("*/*.json")
    assert json.loads(kept.read_text())["status"] == "ok" and "mark" not in json.loads(kept.read_text())
    assert f"warning: duplicate run {cfg.run_id}" in capsys.readouterr().out
