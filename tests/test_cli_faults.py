"""The command line under faults: Ctrl-C ends with one line and keeps every finished record; workers'
tracebacks are never echoed; a meter that cannot run is one line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from companion.cli import main
from companion.runs.records import load_records
from conftest import companion_cmd, processes_naming

PROFILE = """
device: cpu
base: {layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, seq_len: 16, batch_size: 4, meter: none,
       warmup_steps: 1, window_steps: 2, min_windows: 2, max_steps: 40, target_rel_ci: 0.0, max_time_s: 3.0}
groups:
  - vary: {seed: [0, 1, 2, 3, 4, 5]}
    layouts: [tp2-dp1]
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, rc, word",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_during_a_sweep_is_one_line_and_keeps_finished_records(tmp_path, sig, rc, word):
    """Ctrl-C, or SIGTERM (a scheduler cancelling the job, ``kill``), sent to the whole process group."""
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    out = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "companion.cli",
        "sweep",
        "--profile",
        str(profile),
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("*.json")):
        time.sleep(0.1)
    time.sleep(0.5)  # the next run is in flight
    os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the whole foreground group
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == rc, stderr
    assert "Traceback" not in stderr + stdout and "[rank" not in stderr + stdout
    lines = stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith(f"{word}: ") and "re-run the same command" in lines[0].lower()
    )
    done = load_records(out)
    assert done and all(r["status"] == "ok" for r in done)  # nothing measured is lost, nothing half-written
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="lists processes through /proc")
def test_a_killed_sweep_leaves_no_rank_running(tmp_path):
    """The sweep alone killed (SIGKILL, no chance to clean up) while a 2-rank launch trains: the launch and
    the ranks forked from it end too, instead of training on without a sweep to collect them."""
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    out = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "companion.cli",
        "sweep",
        "--profile",
        str(profile),
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("*.json")):
        time.sleep(0.1)
    assert len(processes_naming(str(out))) >= 3  # the launch and its two ranks, mid-sweep
    proc.kill()
    proc.wait()
    deadline = time.time() + 60
    while time.time() < deadline and processes_naming(str(out)):
        time.sleep(0.2)
    assert not processes_naming(str(out))
    assert all(r["status"] == "ok" for r in load_records(out))


def test_rank_tracebacks_are_not_echoed(tmp_path):
    from companion.runs.sweep import _echo_new_lines

    log = tmp_path / "ws2.log"
    log.write_text(
        "[1/2] run-a ok 1.0 ms/step\n[rank0]: Traceback (most recent call last):\n"
        '[rank1]:   File "x.py", line 1\n[codecarbon INFO] hello\nerror: plan broken\n'
    )

    class Bar:
        lines = []

        def write(self, line):
            self.lines.append(line)

    bar = Bar()
    _echo_new_lines(log, 0, bar)
    assert bar.lines == ["[1/2] run-a ok 1.0 ms/step", "error: plan broken"]


def test_meter_that_cannot_run_is_one_line(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "--layers",
                "1",
                "--hidden",
                "32",
                "--heads",
                "2",
                "--meter",
                "nvml",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: meter='nvml'") and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_a_corrupt_plan_is_named(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"profile": "x", "runs": [')
    res = companion_cmd("run", "--plan", str(plan), "--out", str(tmp_path / "o"), timeout=120)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert f"plan {plan} is corrupt" in res.stderr
    plan.write_text(json.dumps({"profile": "x", "runs": [{"model": {"layers": "x"}}]}))
    res = companion_cmd("run", "--plan", str(plan), "--out", str(tmp_path / "o"), timeout=120)
    assert res.returncode == 2 and "layers='x'" in res.stderr and "Traceback" not in res.stderr


def _launch_printing(monkeypatch, lines: list[str], rc: int):
    """Every launch of the sweep replaced by one that prints ``lines`` to its log and exits with ``rc``."""
    from companion.runs import sweep

    code = f"import sys; print({chr(10).join(lines)!r}); sys.exit({rc})"
    monkeypatch.setattr(sweep, "worker_command", lambda *a, **k: [sys.executable, "-c", code])


def test_a_launch_stopped_by_ctrl_c_stops_the_sweep_without_a_failed_record(tmp_path, monkeypatch):
    """Ctrl-C that reaches the launch (torchrun's agent turns it into SignalException, exit code 1) but not the
    sweep itself: the run in flight was stopped, not failed, so the sweep stops as interrupted and writes no
    record; a launch that failed otherwise still records its run as failed."""
    from companion.runs.profiles import load_profile
    from companion.runs.sweep import run_sweep

    path = tmp_path / "p.yaml"
    path.write_text(PROFILE.replace("[0, 1, 2, 3, 4, 5]", "[0, 1]"))
    profile = load_profile(str(path), device_name="cpu")
    _launch_printing(
        monkeypatch,
        [
            "run-start: a",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 2",
        ],
        1,
    )
    with pytest.raises(KeyboardInterrupt):
        run_sweep(profile, tmp_path / "stopped", progress=False)
    assert not list((tmp_path / "stopped").glob("*.json"))
    # SIGTERM (a scheduler's cancel) likewise, as torchrun's agent reports it and as a lone rank dies of it
    for lines, rc in (
        (
            [
                "run-start: a",
                "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
            ],
            1,
        ),
        (["run-start: a"], 143),
    ):
        _launch_printing(monkeypatch, lines, rc)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(profile, tmp_path / "terminated", progress=False)
        assert not list((tmp_path / "terminated").glob("*.json"))
    _launch_printing(monkeypatch, ["run-start: a", "RuntimeError: a rank crashed"], 1)
    result = run_sweep(profile, tmp_path / "failed", progress=False)
    assert len(result.failed) == 2 and len(list((tmp_path / "failed").glob("*.json"))) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad", [["--hidden", "30", "--heads", "4"], ["--layers", "x"]], ids=["config", "flag"]
)
def test_bad_input_under_torchrun_is_said_once_not_once_per_rank(tmp_path, bad):
    import shutil

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    res = subprocess.run(
        [
            torchrun,
            "--standalone",  # a free port: torchrun's default one may be taken by another launch on the host
            "--nproc-per-node",
            "2",
            f"--log-dir={tmp_path / 'torchrun'}",  # not a torchelastic_* folder left in the temporary directory
            "-m",
            "companion.runs.train",
            "--tp",
            "2",
            "--layers",
            "1",
            *bad,
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    said = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("error")]
    assert len(said) == 1 and (bad[1] in said[0] or "hidden=30" in said[0]), said or res.stderr[-3000:]


@pytest.mark.slow
def test_sigterm_during_a_run_is_one_line_and_exit_code_143(tmp_path):
    out = tmp_path / "o"
    cmd = [
        sys.executable,
        "-m",
        "companion.cli",
        "run",
        "--layers",
        "1",
        "--hidden",
        "32",
        "--heads",
        "2",
        "--meter",
        "none",
        "--target-rel-ci",
        "0",
        "--max-steps",
        "1000000",
        "--max-time-s",
        "120",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / ".lock").exists():
        time.sleep(0.1)
    time.sleep(3)  # training
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, (stdout[-2000:], stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("terminated (SIGTERM): ") and "Traceback" not in stdout
    assert not list(out.glob("*.json"))  # the run in flight has no record


def test_a_rank_other_than_0_says_nothing_of_bad_input_and_waits_to_be_stopped(monkeypatch, capsys):
    """Under a launcher every rank finds the same bad input; rank 0 says it. A rank that exited at once would
    have the launcher stop rank 0 before it said why, so the others wait to be stopped (here: until the wait
    ends, as where nothing stops them) and exit with the same code."""
    import time

    from companion import errors
    from companion.runs import train

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(errors, "BAD_INPUT_WAIT_S", 0.3)
    for argv in (["--layers", "1", "--hidden", "30", "--heads", "4"], ["--layers", "x"]):  # a value, a flag
        start = time.monotonic()
        try:
            assert train.main(argv) == 2
        except SystemExit as exc:  # the parser's own exit
            assert exc.code == 2
        assert time.monotonic() - start >= 0.3
        assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    assert train.main(["--layers", "1", "--hidden", "30", "--heads", "4"]) == 2
    assert capsys.readouterr().err.startswith("error: hidden=30 is not divisible by heads=4")
