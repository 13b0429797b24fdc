"""The package on a preinstalled stack: `PYTHONPATH=src python -m companion.cli ...`, optional packages absent.

A GPU image or cluster module brings its own torch and often no CodeCarbon: the documented path (README,
"On GPUs") must run a sweep there, and a meter that cannot work must stop the sweep with one message.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import companion
from companion.runs.profiles import load_profile
from companion.runs.records import load_records

pytestmark = pytest.mark.slow

SRC = Path(companion.__file__).resolve().parents[1]
# Imported at start-up by every Python process (torchrun's ranks included): codecarbon and pynvml unimportable.
BLOCKER = """
import sys
class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("codecarbon", "pynvml"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)", name=name)
        return None
sys.meta_path.insert(0, _Blocked())
"""


def _bare_env(tmp_path: Path) -> dict:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_ROOT"}
    return {
        **env,
        "PYTHONPATH": f"{site}{os.pathsep}{SRC}",
        "COMPANION_ROOT": str(tmp_path / "root"),
        "HF_HUB_OFFLINE": "1",
    }


def _cli(env, *args, timeout=400):
    return subprocess.run(
        [sys.executable, "-m", "companion.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=env["COMPANION_ROOT"].rsplit("/", 1)[0],
    )


def test_ci_sweep_on_a_stack_without_codecarbon_or_nvml(tmp_path):
    env = _bare_env(tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", "import codecarbon"], capture_output=True, text=True, env=env
    )
    assert probe.returncode != 0 and "blocked" in probe.stderr
    # the ci profile's single and TP=2 runs: one plain launch and one torchrun launch (the 4-rank launch adds
    # nothing to this path that the ci sweep of tests/runs/test_sweep.py does not cover)
    profile = tmp_path / "ci-nometer.yaml"
    profile.write_text(
        load_profile("ci").path.read_text().split("groups:")[0]
        + """meter: none
groups:
  - layouts: [tp1-dp1, tp2-dp1]
"""
    )
    out = tmp_path / "runs"
    res = _cli(env, "sweep", "--profile", str(profile), "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stdout + res.stderr
    records = load_records(out)
    assert len(records) == 2 and all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    assert {r["energy"]["source"] for r in records} == {"none"}
    assert {r["config"]["world_size"] for r in records} == {1, 2}


def test_a_launch_that_writes_no_record_stops_the_sweep_with_one_message(tmp_path):
    env = _bare_env(tmp_path)
    profile = tmp_path / "needs-codecarbon.yaml"
    profile.write_text("""
device: cpu
meter: codecarbon
base: {layers: 1, hidden: 32, heads: 2, vocab: 256, max_positions: 64, seq_len: 16, batch_size: 4,
       warmup_steps: 1, window_steps: 2, min_windows: 2, max_steps: 4, target_rel_ci: 0.0}
groups:
  - vary: {seed: [0, 1, 2]}
""")
    out = tmp_path / "runs"
    res = _cli(env, "sweep", "--profile", str(profile), "--out", str(out), "--quiet", timeout=200)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:") and "pip install codecarbon" in errors[0], (
        res.stderr
    )
    assert "Traceback" not in res.stderr
    assert not list(out.glob("*.json"))  # no failed record per run ...
    assert (out / "logs" / "ws1.log").read_text().count("\n=== ") == 1  # ... and no relaunch per run
