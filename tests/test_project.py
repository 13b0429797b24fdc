"""The project's own files stay in step with each other."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[=<>!~\[; ]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_ranges_in_pyproject_exact_versions_in_constraints():
    """pyproject.toml declares compatible ranges; constraints.txt pins every requirement exactly, and both
    `make setup` and environment.yml install through it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [
        d for extra in project["optional-dependencies"].values() for d in extra
    ]
    assert not [d for d in declared if "==" in d], "exact pins belong in constraints.txt"
    lines = [
        x for x in (ROOT / "constraints.txt").read_text().splitlines() if x.strip() and not x.startswith("#")
    ]
    pins = {_name(x): x for x in lines}
    assert all("==" in x for x in lines)
    assert {_name(d) for d in declared} <= set(pins), "a declared requirement has no exact version"
    assert pins["torch"] == "torch==2.13.0"  # a CPU or CUDA build of 2.13.0 satisfies it; pip never picks one
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-c constraints.txt" in pip and "-e .[test,book]" in pip
    # every command of the Makefile that installs the project (uv's and pip's fallback) goes through the pins
    commands = [
        c for c in (ROOT / "Makefile").read_text().replace("\\\n", " ").splitlines() if " install " in c
    ]
    installs = [part for c in commands for part in c.split("||") if '-e ".[test,book]"' in part]
    assert len(installs) >= 2 and all("-c constraints.txt" in part for part in installs), installs


def test_ci_calls_the_readme_test_command():
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_notebooks_are_thin_stage_shells():
    assert [p.stem for p in NOTEBOOKS] == [
        "01_runs",
        "02_proxies",
        "03_fit",
        "04_validation",
        "05_predict",
        "06_headline",
        "07_builds",
        "08_gpu",
    ]
    for nb in NOTEBOOKS:
        text = nb.read_text()
        assert text.count('tags=["parameters"]') == 1, nb.name
        assert not re.search(r"^\s*(def|class) ", text, re.M), (
            f"{nb.name} defines functions; move them to companion"
        )
        assert "to_csv(out" in text or "write_json(" in text, f"{nb.name} writes no artifact"
        assert (ROOT / "params" / f"{nb.stem}.yaml").is_file()


def test_table_of_contents_matches_sources():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    # every stage's page once (their order is the reader's, not the stages')
    assert sorted(f for f in files if f.startswith("generated/")) == [
        f"generated/{p.stem}" for p in NOTEBOOKS
    ]
    for f in files:
        if not f.startswith("generated/"):
            assert (ROOT / "book" / f"{f}.md").is_file(), f


def test_the_sources_pass_the_linter_and_the_formatter():
    """`make lint`: ruff's checks and its formatter (pyproject.toml), over sources, tests, benchmarks and notebooks."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is missing: `make setup` installs it (the test extra)"
    check = subprocess.run(
        [ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout[-3000:]
    fmt = subprocess.run([ruff, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, f"run `make format`: {fmt.stdout[-2000:]}"
