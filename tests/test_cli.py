"""Bad input: one line naming the field and the fix, a non-zero exit, no record written."""

import json

import pytest

from companion.cli import main
from conftest import companion_cmd

SMALL = ["--layers", "1", "--hidden", "32", "--heads", "2", "--vocab", "256", "--seq-len", "16"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["run", "--hidden", "130", "--heads", "4"], "hidden=130 is not divisible by heads=4"),
        (["run", *SMALL, "--tp", "4"], "heads=2 is not divisible by tp=4"),
        (["run", *SMALL, "--tp", "2"], "world size 1 != tp*dp"),
        (
            ["run", *SMALL, "--seq-len", "1024", "--max-positions", "512"],
            "seq_len=1024 is above max_positions=512",
        ),
        (["run", "--checkpoint", "/no/such/checkpoint"], "checkpoint='/no/such/checkpoint' does not exist"),
        (["sweep", "--profile", "no-such-profile"], "unknown profile 'no-such-profile'"),
        (["run", "--plan", "/no/such/plan.json"], "does not exist"),
    ],
)
def test_bad_input(tmp_path, capsys, argv, expected):
    out = tmp_path / "records"
    argv = argv + (["--out", str(out)] if argv[0] in ("run", "sweep") else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and expected in err and "\n" not in err
    assert not out.exists() or not list(out.glob("*.json"))


def test_emitting_gpu_launch_scripts_without_a_gpu_needs_the_device_name(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: its name is detected")
    assert main(["sweep", "--profile", "gpu-node", "--emit", "slurm", "--emit-dir", str(tmp_path)]) == 2
    assert "pass --device-name" in capsys.readouterr().err
    assert (
        main(
            [
                "sweep",
                "--profile",
                "gpu-node",
                "--emit",
                "slurm",
                "--emit-dir",
                str(tmp_path),
                "--device-name",
                "H100",
                "--gpus-per-node",
                "8",
            ]
        )
        == 0
    )
    assert {
        r["device_name"] for r in json.loads((tmp_path / "plans" / "gpu-node-ws8.json").read_text())["runs"]
    } == {"H100"}


def test_malformed_profile_from_the_shell(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups:\n  - vary: {layers: [1, 2}\n")
    res = companion_cmd("sweep", "--profile", str(bad), "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml is malformed YAML at line 2" in lines[0]
    assert not (tmp_path / "out").exists()


def test_help_explains_each_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for sub in ("run", "sweep", "profiles"):
        assert sub in text


def test_profiles_listing(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "gpu-node" in out and "ws4" in out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--hidden", "130", "--heads", "4"], "hidden=130 is not divisible by heads=4"),
        (["--layers", "two"], "argument --layers: invalid int value: 'two'"),
        (["--plan", "/no/such/plan.json"], "does not exist"),
        (["--device-name", "H100"], "device_name='H100' names a GPU of the hardware table, but device='cpu'"),
        (["--seed", "-1"], "seed=-1 must lie in [0, 2**32)"),
    ],
)
def test_run_rejects_bad_input_before_importing_torch(argv, expected):
    """`companion run` says what is wrong in one line before the runner's seconds of imports."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom companion.cli import main\ntry:\n    rc = main(['run', *sys.argv[1:]])\n"
        "except SystemExit as exc:  # argparse\n    rc = exc.code\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported', rc)"
    )
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["torch", "not", "imported", "2"], res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], res.stderr
