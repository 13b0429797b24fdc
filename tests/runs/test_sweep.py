"""Sweeps through the real launcher: torchrun with gloo and several ranks, resume, kill, emit."""

import json
import shutil
import tempfile
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from companion.runs.profiles import load_profile
from companion.runs.records import load_records
from companion.runs.sweep import emit_launch
from companion.runs.train import PROBE_STEPS
from conftest import companion_cmd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ci_sweep(ci_root):
    root, res = ci_root
    return root / "data" / "runs" / "ci", res


def test_ci_sweep_every_record_ok(ci_sweep):
    out, res = ci_sweep
    records = load_records(out)
    assert len(records) == len(load_profile("ci").runs) == 5
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    assert "5 ok, 0 failed" in res.stdout
    modes = {r["config"]["mode"]: r for r in records if r["config"]["model"]["layers"] == 2}
    assert set(modes) == {"single", "tp", "fsdp", "2d"}
    for r in records:  # every record says where its energy came from, and that it is an estimate here
        assert r["energy"]["measured"] is False and r["energy"]["source"].startswith("codecarbon[")
        assert r["provenance"]["launch"]["world_size"] == r["config"]["world_size"]
        # several ranks: torchrun's agent forks them after the imports (companion.runs.launch)
        assert r["provenance"]["launch"]["launcher"] == (
            "python (one process)"
            if r["config"]["world_size"] == 1
            else "torchrun, ranks forked (companion.runs.launch)"
        )


def test_parallel_layouts_match_the_single_process_loss_curve(ci_sweep):
    out, _ = ci_sweep
    by_mode = {
        r["config"]["mode"]: r["loss"]["curve"]
        for r in load_records(out)
        if r["config"]["model"]["layers"] == 2
    }
    reference = by_mode.pop("single")
    assert (
        len(reference) == 2 + PROBE_STEPS + 8 and max(reference) - min(reference) > 0.01
    )  # 2 warm-up + the probe + 8 measured steps
    for mode, curve in by_mode.items():
        assert curve == pytest.approx(reference, abs=2e-5, rel=0), mode


def test_tokens_are_counted_on_every_layout(ci_sweep):
    out, _ = ci_sweep
    for r in load_records(out):
        assert r["tokens"]["padded_per_step"] == 8 * 32  # global batch x padded length, whatever the layout


def test_rerunning_a_finished_sweep_skips_every_run(ci_sweep):
    out, _ = ci_sweep
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}
    res = companion_cmd("sweep", "--profile", "ci", "--out", str(out), "--quiet", timeout=120)
    assert res.returncode == 0 and "0 ok, 0 failed, 5 already done" in res.stdout
    assert before == {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}


PROFILE = """
description: a few one-rank runs for resume tests
device: cpu
base: {{layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, seq_len: 16, batch_size: 4, meter: none,
        warmup_steps: 1, window_steps: 2, min_windows: 2, max_steps: 4, target_rel_ci: 0.0, {extra}}}
groups:
  - vary: {{seed: [0, 1, 2, 3, 4, 5]}}
"""


def test_killing_a_sweep_loses_only_the_run_in_flight(tmp_path):
    profile = tmp_path / "resume.yaml"
    # max_time_s is not reached: the sleep-free runs are short, the kill lands between or inside them
    profile.write_text(PROFILE.format(extra="max_time_s: 30.0"))
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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, as a dead terminal or a scheduler would
    proc.wait()
    done = sorted(out.glob("*.json"))
    assert 2 <= len(done) < 6, "the kill should land mid-sweep"
    for p in done:  # everything on disk is a complete, valid record
        assert json.loads(p.read_text())["status"] == "ok"
    first = {p.name: p.read_bytes() for p in done}
    res = companion_cmd("sweep", "--profile", str(profile), "--out", str(out), "--quiet", timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"{6 - len(done)} ok, 0 failed, {len(done)} already done" in res.stdout
    assert all(out.joinpath(name).read_bytes() == data for name, data in first.items())  # never rewritten
    assert len(load_records(out, status="ok")) == 6


def test_a_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, fixtures, minilm_path):
    profile = tmp_path / "fail.yaml"
    profile.write_text(f"""
device: cpu
base: {{layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, seq_len: 16, batch_size: 4, meter: none,
        warmup_steps: 1, window_steps: 2, min_windows: 2, max_steps: 4, target_rel_ci: 0.0}}
groups:
  - vary: {{seed: [0, 1]}}
  - set: {{source: "{fixtures / "reviews.csv"}", tokenizer: "{minilm_path}"}}
""")
    out = tmp_path / "runs"
    res = companion_cmd("sweep", "--profile", str(profile), "--out", str(out), "--quiet", timeout=300)
    assert res.returncode == 1 and "2 ok, 1 failed" in res.stdout
    failed = load_records(out, status="failed")
    assert len(failed) == 1 and "vocab >= 30522" in failed[0]["error"]["message"]
    # a plain re-run keeps the failure and says so, rather than counting it among the runs done
    res = companion_cmd("sweep", "--profile", str(profile), "--out", str(out), "--quiet", timeout=300)
    assert (
        "3 already done (1 of them failed earlier and kept as failed: --retry-failed runs them again)"
        in res.stdout
    )
    # --retry-failed runs it again and keeps the first failure beside it
    res = companion_cmd(
        "sweep", "--profile", str(profile), "--out", str(out), "--quiet", "--retry-failed", timeout=300
    )
    assert res.returncode == 1 and len(list((out / "failed").glob("*.json"))) == 1


THREE_PASSES = """
device: cpu
base: {layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, seq_len: 16, batch_size: 4, meter: none,
       dropout: 0.0, warmup_steps: 1, window_steps: 2, min_windows: 2, max_steps: 4, target_rel_ci: 0.0}
replicates: 3
groups:
  - layouts: [tp1-dp1, tp2-dp1]
"""


def test_a_cpu_sweep_s_later_passes_run_in_the_first_pass_s_launch(tmp_path, monkeypatch):
    """One launch per world size serves every pass: the 2-rank runs of the later passes say they followed plans
    in the same launch, their loss curves are the first pass's (nothing a run leaves behind changes the next one's
    training), and the launch has exited when the sweep returns. The one-rank launch dies while it waits between
    passes, twice: before the next plan is handed to it (a new launch takes the plan), and with the plan written
    but not yet read (stopped, then killed: the sweep starts a new launch for it). No run is recorded failed: none
    was in flight."""
    from companion.runs import sweep

    path = tmp_path / "three.yaml"
    path.write_text(THREE_PASSES)
    submit, handed = sweep.Launches.submit, []

    def dying(self, ws, *a, **k):
        live = self.live.get(ws)
        if ws != 1 or live is None:
            return submit(self, ws, *a, **k)
        handed.append(ws)
        if len(handed) == 1:  # dead before the sweep hands it the plan
            live.proc.kill()
            live.proc.wait()
            return submit(self, ws, *a, **k)
        live.proc.send_signal(signal.SIGSTOP)  # it cannot read the plan written now ...
        try:
            return submit(self, ws, *a, **k)
        finally:
            live.proc.kill()  # ... and dies with it unread

    monkeypatch.setattr(sweep.Launches, "submit", dying)
    # a folder of its own for the launches' temporary files (tmp_path is too deep for a Unix socket's path)
    temp = Path(tempfile.mkdtemp(prefix="sweep-tmp-"))
    monkeypatch.setenv("TMPDIR", str(temp))
    out = tmp_path / "runs"
    try:
        result = sweep.run_sweep(load_profile(str(path)), out, progress=False)
        # no launch left its log folder behind: torchrun's own (a torchelastic_* folder a launch, without a log
        # folder of its own) or the launcher's (the launches killed here are one-rank ones, without torchrun)
        left = sorted(
            p.name for p in temp.iterdir() if p.name.startswith(("torchelastic_", "companion-launch-"))
        )
    finally:
        shutil.rmtree(temp)
    assert not left, left
    assert len(result.ok) == 6 and not result.failed and handed == [1, 1]
    by = {(r["config"]["world_size"], r["config"]["replicate"]): r for r in load_records(out)}
    plans_before = {k: r["provenance"]["launch"]["plans_before"] for k, r in by.items()}
    assert plans_before == {(1, 0): 0, (1, 1): 0, (1, 2): 0, (2, 0): 0, (2, 1): 1, (2, 2): 2}
    assert by[(2, 2)]["loss"]["curve"] == by[(2, 1)]["loss"]["curve"] == by[(2, 0)]["loss"]["curve"]
    for r in by.values():  # each run's peak memory counts from its start, not from the launch's
        assert r["memory"]["source"].startswith("process peak RSS from the run's start")
    log = (out / "logs" / "ws2.log").read_text()
    assert log.count("=== ") == 3 and log.count("--serve") == 1 and "plan 2 of the launch above" in log
    pid = int(re.search(r"plan 2 of the launch above \(pid (\d+)\)", log).group(1))
    assert not os.path.exists(f"/proc/{pid}")  # it exited, and the sweep reaped it
    ws1 = (out / "logs" / "ws1.log").read_text()
    # three launches; the second was handed plan 1 and died with it unread
    assert ws1.count("-m companion.runs.train") == 3 and ws1.count("plan 1 of the launch above") == 1


def test_cpu_launches_fork_their_ranks_and_cuda_launches_start_new_ones(tmp_path):
    from companion.runs.sweep import worker_command

    plan, out = tmp_path / "plan.json", tmp_path / "runs"
    assert worker_command(plan, out, 1, "cpu")[1:3] == ["-m", "companion.runs.train"]
    assert worker_command(plan, out, 2, "cpu")[1:4] == ["-m", "companion.runs.launch", "--nproc-per-node=2"]
    cuda = worker_command(plan, out, 2, "cuda")
    assert cuda[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cuda[5:7] == ["-m", "companion.runs.train"]


def test_emit_torchrun_and_slurm(tmp_path):
    profile = load_profile("gpu-node", device_name="H100")
    files = emit_launch(profile, "torchrun", tmp_path / "t", tmp_path / "records", gpus_per_node=4)
    script = (tmp_path / "t" / "launch-torchrun.sh").read_text()
    assert "--nnodes=2 --nproc-per-node=4" in script  # world size 8 over two 4-GPU nodes
    assert "--rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT" in script
    assert 'if [ "$NODE_RANK" = 0 ]; then torchrun --nnodes=1 --nproc-per-node=2' in script
    plans = [f for f in files if f.suffix == ".json"]
    assert sum(len(json.loads(p.read_text())["runs"]) for p in plans) == len(profile.runs)
    emit_launch(profile, "slurm", tmp_path / "s", tmp_path / "records", gpus_per_node=4)
    two_nodes = (tmp_path / "s" / "slurm-gpu-node-n2.sbatch").read_text()
    assert "#SBATCH --nodes=2" in two_nodes and "#SBATCH --array=0-0" in two_nodes
    assert "#SBATCH --gpus-per-node=4" in two_nodes
    assert "srun --kill-on-bad-exit=1 torchrun --nnodes=2" in two_nodes
    one_node = (tmp_path / "s" / "slurm-gpu-node-n1.sbatch").read_text()
    assert "#SBATCH --array=0-2" in one_node and "NPROCS=(1 2 4)" in one_node
    res = subprocess.run(["bash", "-n", str(tmp_path / "t" / "launch-torchrun.sh")], capture_output=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(
        ["bash", "-n", str(tmp_path / "s" / "slurm-gpu-node-n2.sbatch")], capture_output=True
    )
    assert res.returncode == 0, res.stderr


def test_a_cpu_profile_s_launch_files_ask_for_processes_not_gpus(tmp_path):
    import yaml

    from companion.errors import ConfigError

    ci = load_profile("ci", device_name="cpu")  # world sizes 1, 2 and 4 on CPU
    emit_launch(ci, "slurm", tmp_path / "s", tmp_path / "records", gpus_per_node=4)
    sbatch = (tmp_path / "s" / "slurm-ci-n1.sbatch").read_text()
    assert "#SBATCH --nodes=1" in sbatch and "gpus" not in sbatch and "NPROCS=(1 2 4)" in sbatch
    emit_launch(ci, "torchrun", tmp_path / "t", tmp_path / "records", gpus_per_node=4)
    assert "1 node(s) x 4 process(es)" in (tmp_path / "t" / "launch-torchrun.sh").read_text()
    # several CPU processes under Accelerate need MPI: refused before any file is written
    with pytest.raises(ConfigError, match=r"world sizes \[2, 4\].*--emit torchrun"):
        emit_launch(ci, "accelerate", tmp_path / "a", tmp_path / "records")
    assert not (tmp_path / "a").exists()
    one = tmp_path / "one.yaml"
    one.write_text(
        "description: one process\ndevice: cpu\nbase: {layers: 1, hidden: 32, heads: 2}\n"
        "groups:\n  - name: g\n    vary: {seq_len: [16, 32]}\n"
    )
    files = emit_launch(
        load_profile(str(one), device_name="cpu"), "accelerate", tmp_path / "b", tmp_path / "r"
    )
    (config,) = [yaml.safe_load(f.read_text()) for f in files if f.suffix == ".yaml"]
    assert (config["distributed_type"], config["use_cpu"], config["num_processes"]) == ("NO", True, 1)


def test_emit_accelerate_writes_one_config_per_world_size_and_a_launch_script(tmp_path):
    import yaml

    profile = load_profile("gpu-node", device_name="H100")
    files = emit_launch(profile, "accelerate", tmp_path / "a", tmp_path / "records", gpus_per_node=4)
    configs = {f.name: yaml.safe_load(f.read_text()) for f in files if f.suffix == ".yaml"}
    assert set(configs) == {
        "accelerate-ws1.yaml",
        "accelerate-ws2.yaml",
        "accelerate-ws4.yaml",
        "accelerate-ws8.yaml",
    }
    eight = configs["accelerate-ws8.yaml"]
    assert (eight["num_machines"], eight["num_processes"], eight["distributed_type"]) == (2, 8, "MULTI_GPU")
    assert configs["accelerate-ws1.yaml"]["distributed_type"] == "NO"
    assert not any(c["use_cpu"] for c in configs.values())
    script = (tmp_path / "a" / "launch-accelerate.sh").read_text()
    assert script.count("accelerate launch --config_file") == 4 and "-m companion.runs.train --plan" in script
    res = subprocess.run(["bash", "-n", str(tmp_path / "a" / "launch-accelerate.sh")], capture_output=True)
    assert res.returncode == 0, res.stderr
    plans = [f for f in files if f.suffix == ".json"]
    assert sum(len(json.loads(p.read_text())["runs"]) for p in plans) == len(profile.runs)
