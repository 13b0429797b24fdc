"""The book's stages, stated once: what each notebook writes, what it reads, and so the order they run in.

``companion.report.stages`` runs them from this table, and the Makefile's stage rules are written from it:

    python -m companion.report.stage_table make      # the rules, as the Makefile includes them

A stage re-runs when its notebook, its parameters, an artifact it reads, a module of the package it imports
(directly or not, found by reading the imports) or a data file such a module reads changes. Standard library
only: the Makefile writes the rules with the system's Python, before any set-up.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout: notebooks/, params/, src/
SRC = ROOT / "src"


@dataclass(frozen=True)
class Stage:
    """One stage: ``notebooks/<name>.py`` run with ``params/<name>.yaml``, writing ``artifact`` under
    data/derived/<profile>/."""

    name: str
    artifact: str
    about: str  # what the artifact holds, for its download box
    reads: tuple[str, ...] = ()  # artifacts of other stages it needs
    uses: tuple[
        str, ...
    ] = ()  # artifacts of other stages it quotes where they exist (made first all the same)
    params: tuple[str, ...] = ()  # other stages' parameter files it reads
    needs: tuple[str, ...] = ()  # inputs outside the stages (``NEEDS``)
    also_writes: tuple[str, ...] = ()  # further files beside the artifact


# Inputs outside the stages, as make names them (the Makefile defines the variables)
NEEDS = {
    "setup": "$(STAMP)",  # the environment itself
    "profile": "$(PROFILE_FILE) $(HOLDOUT_FILE)",  # the profile's file and its off-grid profiles' files
    "calibration": "$(CALIBRATION)",  # this device's calibration
    "offgrid": "$(HOLDOUT)",  # the off-grid runs, measured
    "stored builds": "$(wildcard data/reference/$(PROFILE_NAME) data/reference/$(PROFILE_NAME)/*.tar.gz)",
    "gpu reference": "$(shell find data/reference -path '*/H[0-9]*/*' \\( -name '*.json' -o -name '*.yaml' \\))",
}

TABLE = (
    Stage(
        "01_runs",
        "runs.csv",
        "one row per finished run: its configuration, step time, energy and where the energy came from",
        needs=("setup", "profile"),
    ),
    Stage(
        "02_proxies",
        "proxies.csv",
        "the runs with their proxies: FLOPs, bytes, intensity, MFU and the measured η(p)",
        reads=("runs.csv",),
        needs=("calibration",),
        also_writes=("noise.json",),  # the replicate noise floor
    ),
    Stage(
        "03_fit",
        "fit.json",
        "the fitted models (operator roofline, the paper's law, baselines) with intervals, per device",
        reads=("proxies.csv",),
        needs=("calibration", "offgrid"),  # the validation set sets the intervals' off-grid width
    ),
    Stage(
        "04_validation",
        "validation.json",
        "held-out metrics per split and model, every held-out prediction, the verdict",
        reads=("proxies.csv",),
        params=("03_fit",),
        needs=("calibration", "offgrid"),
    ),
    Stage(
        "05_predict",
        "explore.csv",
        "the predictions of the table above",
        reads=("fit.json", "runs.csv"),
    ),
    Stage(
        "06_headline",
        "headline.json",
        "the values of this page: per-split metrics, the law's coefficients, the comparison",
        reads=("validation.json", "explore.csv"),
        uses=("builds.csv", "gpu.json"),  # the verdict reads every stored build's scores and quotes the GPU's
        params=("05_predict",),
    ),
    Stage(
        "07_builds",
        "builds.csv",
        "the held-out scores of every stored sweep: one row per sweep, group and target",
        reads=("validation.json", "runs.csv"),
        needs=("stored builds",),
    ),
    Stage(
        "08_gpu",
        "gpu.json",
        "the GPU's reference runs as each tier predicts them, and the board's measured figures",
        needs=("setup", "gpu reference"),
    ),
)

# Modules whose change need not re-run a stage that imports them, nor what only they import: the stage runner,
# the run records' JSON I/O, and the sweep of stage 01 with its profiles (a run with a record is skipped, so new
# sweep code changes no record; the profile file is an input of its own)
NOT_INPUTS = frozenset(
    {"companion.report.stages", "companion.runs.records", "companion.runs.sweep", "companion.runs.profiles"}
)
# Modules the runner shapes every executed page with (before and after papermill): an input of every stage,
# though no notebook imports them
PAGE_MODULES = ("companion.report.presentation",)
# data files a module reads (a change to them is a change to the module)
MODULE_DATA = {"companion/energy/hardware.py": ("companion/energy/resources/hardware.yaml",)}


def _ordered(table: tuple[Stage, ...]) -> tuple[str, ...]:
    """The stages in an order that runs every producer before its readers (the table's order where free)."""
    producer = {s.artifact: s.name for s in table}
    done: list[str] = []
    pending = list(table)
    while pending:
        ready = next(
            (s for s in pending if all(producer[a] in done for a in (*s.reads, *s.uses) if a in producer)),
            None,
        )
        if ready is None:
            raise ValueError(f"stage table has a cycle among {[s.name for s in pending]}")
        done.append(ready.name)
        pending.remove(ready)
    return tuple(done)


BY_NAME = {s.name: s for s in TABLE}
STAGES = _ordered(TABLE)
ARTIFACTS = {s.name: (s.artifact, s.about) for s in TABLE}
INPUTS = {s.name: s.reads for s in TABLE if s.reads}
PRODUCER = {s.artifact: s.name for s in TABLE}


# ---------------------------------------------------------------------------------------------- imports
def _module_file(module: str) -> Path | None:
    base = SRC.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=None)  # each stage's closure reads the same modules again
def _imported(path: Path, package: str) -> frozenset[str]:
    """The package's modules ``path`` imports, anywhere in it (function bodies included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "companion")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "companion":
                continue
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if _module_file(f"{base}.{a.name}"))
    return frozenset(found)


def module_closure(path: Path) -> list[Path]:
    """Every module of the package that ``path`` imports, directly or through another, with their packages'
    ``__init__`` files, sorted; none of ``NOT_INPUTS``, nor what only they import."""
    seen: set[str] = set()
    todo = list(_imported(path, ""))
    while todo:
        module = todo.pop()
        if module in seen or module in NOT_INPUTS:
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        file = _module_file(module)
        if file is not None:
            todo.extend(_imported(file, module if file.name == "__init__.py" else ".".join(parts[:-1])))
    return sorted({f for m in seen if (f := _module_file(m)) is not None})


def stage_sources(stage: str) -> list[str]:
    """The files of the checkout whose change re-runs ``stage`` (paths relative to the checkout)."""
    s = BY_NAME[stage]
    notebook = ROOT / "notebooks" / f"{stage}.py"
    files = [notebook, ROOT / "params" / f"{stage}.yaml"]
    files += [ROOT / "params" / f"{p}.yaml" for p in s.params]
    pages = [_module_file(m) for m in PAGE_MODULES]
    for module in sorted({*module_closure(notebook), *pages, *(f for p in pages for f in module_closure(p))}):
        files.append(module)
        rel = module.relative_to(SRC).as_posix()
        files += [SRC / d for d in MODULE_DATA.get(rel, ())]
    return [f.relative_to(ROOT).as_posix() for f in files]


def make_rules() -> str:
    """The Makefile's stage rules: one per artifact, each re-made by ``$(call stage,<name>)``."""
    out = [
        "# written by `python -m companion.report.stage_table make` from companion/report/stage_table.py\n"
    ]
    for name in STAGES:
        s = BY_NAME[name]
        deps = [f"$(DERIVED)/{a}" for a in (*s.reads, *s.uses)] + [NEEDS[n] for n in s.needs]
        deps += stage_sources(name)
        out.append(f"$(DERIVED)/{s.artifact}: " + " \\\n\t\t".join(deps) + f"\n\t$(call stage,{name})\n")
        # what a stage writes beside its artifact is written in the same run, before the artifact (written
        # last): an order-only prerequisite, or a finished build would always look out of date by those
        # milliseconds and rebuild what reads it
        for extra in s.also_writes:
            out.append(
                f'$(DERIVED)/{extra}: | $(DERIVED)/{s.artifact}\n\t@test -f $@ || {{ echo "$@ is missing: '
                f'remove $(DERIVED)/{s.artifact} and re-run, stage {name} writes both"; exit 1; }}\n'
            )
    every = [f"$(DERIVED)/{f}" for n in STAGES for f in (BY_NAME[n].artifact, *BY_NAME[n].also_writes)]
    out.append("STAGE_ARTIFACTS := " + " ".join(every) + "\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["make"]:
        print("usage: python -m companion.report.stage_table make", file=sys.stderr)
        return 2
    sys.stdout.write(make_rules())
    return 0


if __name__ == "__main__":
    sys.exit(main())
