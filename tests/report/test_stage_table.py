"""The stage table: one statement of the stages, from which the runner's order and the Makefile's rules come."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from companion.report import stage_table, stages

ROOT = Path(__file__).resolve().parents[2]


def test_every_producer_runs_before_its_readers_and_every_stage_has_its_files():
    order = {name: i for i, name in enumerate(stages.STAGES)}
    assert set(order) == {s.name for s in stage_table.TABLE}
    for s in stage_table.TABLE:
        for artifact in (*s.reads, *s.uses):
            assert order[stage_table.PRODUCER[artifact]] < order[s.name], (s.name, artifact)
        assert (ROOT / "notebooks" / f"{s.name}.py").is_file() and (
            ROOT / "params" / f"{s.name}.yaml"
        ).is_file()
        assert set(s.needs) <= set(stage_table.NEEDS)
    # the verdict (06) reads what 07 and 08 write: it runs last, though its number is lower
    assert stages.STAGES[-1] == "06_headline"


def test_a_stage_depends_on_every_module_it_imports_however_indirectly(tmp_path):
    sources = stage_table.stage_sources("04_validation")
    assert all((ROOT / f).is_file() for f in sources)
    # imported by the notebook directly, by a module it imports, and inside a function body
    for module in ("energy/validation.py", "energy/intervals.py", "energy/hardware.py"):
        assert f"src/companion/{module}" in sources
    assert "src/companion/energy/resources/hardware.yaml" in sources  # a module's data file
    assert "params/03_fit.yaml" in sources  # another stage's parameters it reads
    # a module no stage imports is no stage's input
    assert not any(
        f.endswith("report/book_check.py") for s in stages.STAGES for f in stage_table.stage_sources(s)
    )


def _generated_rules() -> str:
    """The stage rules as `make` reads them: ``python -m companion.report.stage_table make``, run as the Makefile
    runs it (the system's Python, the sources on the path)."""
    return subprocess.run(
        [sys.executable, "-m", "companion.report.stage_table", "make"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "src")},
        cwd=ROOT,
    ).stdout


def test_the_make_rules_name_one_rule_per_artifact_with_its_recipe():
    out = _generated_rules()
    targets = re.findall(r"^\$\(DERIVED\)/(\S+):", out, flags=re.M)
    expected = [
        f
        for n in stages.STAGES
        for f in (stage_table.BY_NAME[n].artifact, *stage_table.BY_NAME[n].also_writes)
    ]
    assert targets == expected
    for name in stages.STAGES:
        assert f"$(call stage,{name})" in out
    assert re.search(r"^STAGE_ARTIFACTS := .*\$\(DERIVED\)/gpu\.json", out, flags=re.M)


def test_a_finished_build_is_up_to_date_though_a_stage_writes_its_artifact_last(tmp_path):
    # stage 02 writes noise.json, then proxies.csv (its artifact, last): what reads noise.json must not look
    # out of date by those milliseconds once the build is done
    rules = _generated_rules()
    rule = re.search(r"^\$\(DERIVED\)/noise\.json:.*\n\t.*\n", rules, flags=re.M).group(0)
    (tmp_path / "Makefile").write_text(
        "DERIVED := d\n"
        "d/proxies.csv:\n\tmkdir -p d && echo n > d/noise.json && sleep 0.05 && echo p > d/proxies.csv\n"
        + rule
        + "book: d/noise.json d/proxies.csv\n\ttouch book\n"
    )
    make = lambda *a: subprocess.run(["make", "-s", *a], cwd=tmp_path, capture_output=True, text=True)  # noqa: E731
    assert make("book").returncode == 0
    assert make("-q", "book").returncode == 0  # nothing left to do
    (tmp_path / "d" / "noise.json").unlink()
    gone = make("book")
    assert gone.returncode != 0 and "noise.json is missing: remove d/proxies.csv and re-run" in gone.stdout


def test_a_cycle_in_the_table_is_refused():
    a = stage_table.Stage("a", "a.csv", "", reads=("b.csv",))
    b = stage_table.Stage("b", "b.csv", "", reads=("a.csv",))
    with pytest.raises(ValueError, match="cycle"):
        stage_table._ordered((a, b))


def test_the_module_that_shapes_every_page_re_runs_every_stage():
    # the runner imports it, not the notebooks: a change to a page's presentation must still re-make the page
    for name in stages.STAGES:
        assert "src/companion/report/presentation.py" in stage_table.stage_sources(name), name


def test_the_runner_the_records_and_the_sweep_re_run_no_stage():
    every = {f for s in stages.STAGES for f in stage_table.stage_sources(s)}
    for module in stage_table.NOT_INPUTS:
        assert "src/" + module.replace(".", "/") + ".py" not in every
