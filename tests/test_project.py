"""The project's own files stay in step with each other."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins(specs):
    return {re.split(r"[=<>]", s)[0].lower(): s for s in specs if "==" in s}


def test_environment_yml_pins_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    py = _pins(project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = _pins(p for p in pip if not p.startswith("-e"))
    assert conda == py


def test_ci_calls_the_readme_test_command():
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()
