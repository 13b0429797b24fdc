"""The tree shows the pipeline: measure (runs) -> model (energy) -> publish (report), one-way, no cycles."""

import ast
from pathlib import Path

import companion

PKG = Path(companion.__file__).resolve().parent
TOP = {"errors", "paths"}  # shared by every stage; import nothing from the stages
RANK = {name: i for i, name in enumerate(companion.STAGES)}


def _imports(path: Path) -> set[str]:
    """Every ``companion.*`` module a file imports, at any depth (function-level imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("companion"):
            if node.module == "companion" or node.module in {f"companion.{s}" for s in RANK}:
                out |= {f"{node.module}.{a.name}" for a in node.names}
            else:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("companion")}
    return out


def _module(path: Path) -> str:
    return ".".join(("companion", *path.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in PKG.rglob("*.py")}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in RANK else None


def test_every_module_sits_in_a_stage_or_is_a_named_top_level_module():
    top = {m.split(".")[1] for m in _graph() if m.count(".") == 1}
    assert top <= TOP | {"cli"} | set(RANK), (
        f"modules outside a stage: {sorted(top - TOP - {'cli'} - set(RANK))}"
    )


def test_stages_import_only_from_earlier_stages():
    bad = []
    for mod, deps in _graph().items():
        here = _stage(mod)
        if mod.split(".")[-1] in TOP:
            bad += [(mod, d) for d in deps if d.split(".")[1] not in TOP]
        if here is None:
            continue
        for dep in deps:
            there = _stage(dep)
            if there is not None and RANK[there] > RANK[here]:
                bad.append((mod, dep))
            if dep.split(".")[1:2] == ["cli"]:
                bad.append((mod, dep))
    assert not bad, "imports against the pipeline's direction: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_no_import_cycles():
    graph = _graph()
    known = set(graph)
    edges = {m: {d for d in deps if d in known and d != m} for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node, stack):
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                cycle.extend(stack[stack.index(nxt) :] + [nxt])
                return True
            if nxt not in state and visit(nxt, stack + [nxt]):
                return True
        state[node] = 2
        return False

    for node in edges:
        if node not in state and visit(node, [node]):
            break
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_a_backward_import(tmp_path):
    """The layering check itself can fail: a runs module importing from energy is caught."""
    fake = tmp_path / "fake.py"
    fake.write_text("from companion.energy.laws import LAWS\nfrom companion.runs import config\n")
    deps = _imports(fake)
    assert "companion.energy.laws" in deps and "companion.runs.config" in deps
    assert RANK[_stage("companion.energy.laws")] > RANK[_stage("companion.runs.train")]
