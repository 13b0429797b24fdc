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


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_notebooks_are_thin_stage_shells():
    assert [p.stem for p in NOTEBOOKS] == ["01_runs", "02_proxies", "03_fit", "04_validation", "05_predict",
                                            "06_headline"]
    for nb in NOTEBOOKS:
        text = nb.read_text()
        assert text.count('tags=["parameters"]') == 1, nb.name
        assert not re.search(r"^\s*(def|class) ", text, re.M), f"{nb.name} defines functions; move them to companion"
        assert "to_csv(out" in text or "write_json(" in text, f"{nb.name} writes no artifact"
        assert (ROOT / "params" / f"{nb.stem}.yaml").is_file()


def test_table_of_contents_matches_sources():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    assert [f for f in files if f.startswith("generated/")] == [f"generated/{p.stem}" for p in NOTEBOOKS]
    for f in files:
        if not f.startswith("generated/"):
            assert (ROOT / "book" / f"{f}.md").is_file(), f
