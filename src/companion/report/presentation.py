"""What a stage notebook looks like in the book: conventions applied to every notebook, before and after papermill.

Before execution (``prepare``):

* a hidden first cell keeps warnings and progress bars out of outputs (warnings go to the stage's log);
* every code cell is collapsed behind "Show code" (``hide-input``); a cell whose first line is ``# hide``,
  or that only glues values or writes the stage's artifact, is removed from the page (``remove-input`` or
  ``remove-cell``), except that a cell writing the artifact and then showing a value (its last line is an
  expression) keeps that output (``remove-input``); a cell whose first line is ``# show`` keeps its code
  visible.

After execution (``finish``):

* the parameters are shown once, collapsed: papermill's injected values merged into the notebook's defaults;
* table headers wrap after underscores, not inside words;
* stderr outputs leave the page for the stage's log, and so do printed outputs longer than
  ``LONG_STREAM_LINES`` lines (a sweep's run-by-run log), leaving one line that says where they went;
  absolute paths in outputs become paths relative to the data root (the virtual environment reads ``<venv>``);
* every chart output becomes a numbered figure captioned by the chart's ``description``, with its static SVG
  linked under it and used as the no-JavaScript fallback;
* the page ends with a download link to the artifact the stage wrote.
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import shutil
import sys
from pathlib import Path

CHART_DIV = re.compile(
    r'<div id="(?P<id>vis-[0-9a-f]+)" class="companion-chart" data-caption="(?P<caption>[^"]*)"></div>'
)
SPEC = r'<script type="application/json" id="{id}-spec">(?P<spec>.*?)</script>'
GLUE_ONLY = {"glue", "print"}
ARTIFACT_WRITERS = ("write_json(", ".to_csv(")
LONG_STREAM_LINES = 20  # printed output longer than this is a log, not a result: it goes to the stage's log

SETUP_CELL = """# Set by companion.report.stages: warnings go to the stage's log, progress bars are off.
import logging as _logging, os as _os, warnings as _warnings
_os.environ["TQDM_DISABLE"] = "1"
_logging.captureWarnings(True)
_wlog = _logging.getLogger("py.warnings")
_wlog.handlers[:] = [_logging.FileHandler({log!r})]
_wlog.propagate = False
_warnings.simplefilter("default")
"""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell: dict) -> list[str]:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def _add_tag(cell: dict, tag: str) -> None:
    if tag not in _tags(cell):
        _tags(cell).append(tag)


def _is_plumbing(source: str) -> bool:
    """True for a cell that only glues/prints values, or that writes the stage's artifact."""
    if any(w in source for w in ARTIFACT_WRITERS):
        return True
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False

    def only_glue(stmts) -> bool:
        for s in stmts:
            if (
                isinstance(s, ast.Expr)
                and isinstance(s.value, ast.Call)
                and isinstance(s.value.func, ast.Name)
                and s.value.func.id in GLUE_ONLY
            ):
                continue
            if isinstance(s, ast.For) and only_glue(s.body):
                continue
            return False
        return True

    return bool(body) and only_glue(body) and "glue(" in source


def _shows_a_value(source: str) -> bool:
    """True when the cell's last statement is an expression other than a glue/print call (Jupyter shows it)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    if not body or not isinstance(body[-1], ast.Expr):
        return False
    call = body[-1].value
    return not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in GLUE_ONLY)


def prepare(nb: dict, log: Path) -> dict:
    """Tag the cells of a converted notebook and add the hidden set-up cell (see the module docstring)."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = _source(cell)
        first = src.lstrip().splitlines()[0].strip().lower() if src.strip() else ""
        tags = _tags(cell)
        if "parameters" in tags:
            continue
        if first.startswith("# hide"):
            _add_tag(cell, "remove-input")
        elif first.startswith("# show"):
            continue
        elif _is_plumbing(src):
            writes = any(w in src for w in ARTIFACT_WRITERS)
            _add_tag(cell, "remove-input" if writes and _shows_a_value(src) else "remove-cell")
        elif not {"remove-input", "remove-cell", "hide-cell", "show-input"} & set(tags):
            _add_tag(cell, "hide-input")
    setup = {
        "id": "companion-setup",
        "cell_type": "code",
        "execution_count": None,
        "outputs": [],
        "source": SETUP_CELL.format(log=str(log)),
        "metadata": {"tags": ["remove-cell"]},
    }
    nb["cells"].insert(0, setup)
    return nb


def merge_parameters(defaults: str, injected: str) -> str:
    """The notebook's parameter defaults with papermill's injected values in their place (comments kept)."""
    inj = {}
    try:
        for node in ast.parse(injected).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                inj[node.targets[0].id] = ast.get_source_segment(injected, node)
        tree = ast.parse(defaults)
    except SyntaxError:
        return injected
    lines = defaults.splitlines()
    out, i, seen = [], 0, set()
    for node in tree.body:
        while i < node.lineno - 1:
            out.append(lines[i])
            i += 1
        name = (
            node.targets[0].id
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            else None
        )
        end = lines[node.end_lineno - 1]
        comment = end[node.end_col_offset :].strip()
        if name in inj:
            seen.add(name)
            out.append(inj[name] + (f"  {comment}" if comment.startswith("#") else ""))
        else:
            out.extend(lines[node.lineno - 1 : node.end_lineno])
        i = node.end_lineno
    out.extend(lines[i:])
    out.extend(seg for name, seg in inj.items() if name not in seen)
    return "\n".join(out)


TABLE_HEADER = re.compile(r"(<th\b[^>]*>)([^<]*)(</th>)")


def _breakable_headers(html_text: str) -> str:
    """Let table headers such as ``energy_kwh_lo`` wrap after their underscores, never inside a word."""
    return TABLE_HEADER.sub(lambda m: m.group(1) + m.group(2).replace("_", "_<wbr>") + m.group(3), html_text)


def _relativise(text: str, roots: list[tuple[str, str]]) -> str:
    for root, repl in roots:
        text = text.replace(root + os.sep, repl).replace(root, repl.rstrip("/") or ".")
    return "\n".join(
        line.rsplit("\r", 1)[-1] for line in text.split("\n")
    )  # a progress bar's last state only


def path_roots(data_root: Path, source_root: Path) -> list[tuple[str, str]]:
    """Absolute prefixes to rewrite in outputs, longest first: environment, data root, checkout, home."""
    roots = {
        str(Path(sys.prefix).resolve()): "<venv>/",
        sys.prefix: "<venv>/",
        str(Path(data_root).resolve()): "",
        str(Path(source_root).resolve()): "",
        str(Path.home()): "~/",
    }
    return sorted(roots.items(), key=lambda kv: -len(kv[0]))


def root_glues(book_src: Path, stage: str) -> set[str]:
    """The names of ``stage``'s glued outputs that the pages at the book's root paste (``{glue:} name`` with
    ``:doc: generated/<stage>.ipynb``)."""
    pasted = re.compile(r"```\{glue:\}\s+(\S+)\s*\n:doc:\s*generated/" + re.escape(stage) + r"\.ipynb")
    return {
        m.group(1) for page in sorted(Path(book_src).glob("*.md")) for m in pasted.finditer(page.read_text())
    }


def _export_chart(html_text: str, m: re.Match, svg_path: Path, svg_href: str, links: bool) -> str:
    """Write the chart ``m`` found in ``html_text`` as a static SVG at ``svg_path``, and return the HTML with it
    inside (``_chart_figure``; ``svg_href``: that SVG from the page the chart is shown on)."""
    from companion.report.static import to_svg

    html_text = _source({"source": html_text})
    spec = json.loads(re.search(SPEC.format(id=m.group("id")), html_text, re.S).group("spec"))
    svg_path.parent.mkdir(parents=True, exist_ok=True)
    svg_path.write_text(to_svg(spec))
    return _chart_figure(html_text, m.group(0), svg_href, m.group("caption"), links)


def _chart_figure(text: str, div: str, svg_href: str, alt_text: str, links: bool = True) -> str:
    """The chart with its static SVG inside (shown without JavaScript) and, with ``links``, a link to it
    underneath."""
    noscript = f'<noscript><img src="{svg_href}" alt="{alt_text}" style="max-width:100%"></noscript>'
    link = f'<p class="companion-chart-links"><a href="{svg_href}" title="the static figure" download>SVG</a></p>'
    return text.replace(div, div.replace("></div>", f">{noscript}</div>"), 1) + (link if links else "")


def _shorten_printed_log(outputs: list[dict], moved: list[str]) -> list[dict]:
    """A cell's printed output (all its stdout outputs: a loop prints one per line) longer than
    ``LONG_STREAM_LINES`` lines goes to ``moved``; one line in its place says where it went."""
    printed = [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]
    text = "".join(_source({"source": o.get("text", "")}) for o in printed)
    n_lines = len(text.rstrip("\n").splitlines())
    if n_lines <= LONG_STREAM_LINES:
        return outputs
    moved.append(text)
    note = {
        "output_type": "stream",
        "name": "stdout",
        "text": f"({n_lines} lines of progress log kept out of the page: the stage's log, Reproduce and explore)\n",
    }
    gone = {id(o) for o in printed}
    out = []
    for o in outputs:
        if id(o) not in gone:
            out.append(o)
        elif o is printed[0]:
            out.append(note)
    return out


def finish(
    nb: dict,
    stage: str,
    figure_dir: Path,
    figure_href: str,
    roots: list[tuple[str, str]],
    artifact: tuple[Path, Path, str, str] | None = None,
    glued_at_root: tuple[str, set[str]] | None = None,
) -> list[str]:
    """Post-process an executed notebook in place; returns the stderr texts moved out of the page.

    ``artifact``: (the file the stage wrote, where the book keeps a copy, that copy's path relative to the
    page, one line on what it holds).
    """
    moved: list[str] = []
    cells = nb["cells"]
    params = next((c for c in cells if "parameters" in _tags(c)), None)
    injected = next((c for c in cells if "injected-parameters" in _tags(c)), None)
    if params is not None and injected is not None:
        merged = merge_parameters(_source(params), _source(injected))
        injected["source"] = f"# Parameters of this build (defaults in notebooks/{stage}.py)\n" + merged
        _add_tag(params, "remove-cell")
        _add_tag(injected, "hide-input")
    elif params is not None:
        _add_tag(params, "hide-input")
    n_fig = 0
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        kept = []
        charts_here, label = 0, ("", "")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                if out.get("name") == "stderr":
                    moved.append(_source({"source": out.get("text", "")}))
                    continue
                out["text"] = _relativise(_source({"source": out["text"]}), roots)
            elif out.get("output_type") in ("display_data", "execute_result"):
                data = out.get("data", {})
                for mime in ("text/plain", "text/html"):
                    if mime in data:
                        data[mime] = _relativise(_source({"source": data[mime]}), roots)
                if "<table" in data.get("text/html", ""):
                    data["text/html"] = _breakable_headers(data["text/html"])
                glue = out.get("metadata", {}).get("scrapbook")
                # a glued output keeps its data under its own prefix (display=False: papermill's record)
                key = (glue.get("mime_prefix", "") if glue else "") + "text/html"
                m = CHART_DIV.search(_source({"source": data.get(key, "")}))
                if m and glue and glued_at_root and glue.get("name") in glued_at_root[1]:
                    # a glued chart a page at the book's root pastes (the introduction's first figure): its static
                    # SVG, referred to from there (``glued_at_root``'s folder), for a reader without JavaScript or
                    # on paper; no numbered figure of this page
                    svg = f"glue-{glue['name']}.svg"
                    data[key] = _export_chart(
                        data[key], m, figure_dir / svg, f"{glued_at_root[0]}/{svg}", False
                    )
                if m and not glue:
                    n_fig += 1
                    charts_here += 1
                    svg = f"fig-{n_fig}.svg"
                    data[key] = _export_chart(data[key], m, figure_dir / svg, f"{figure_href}/{svg}", True)
                    if charts_here == 1:
                        label = (html.unescape(m.group("caption")), f"fig-{stage.replace('_', '-')}-{n_fig}")
            kept.append(out)
        cell["outputs"] = _shorten_printed_log(kept, moved)
        kept = cell["outputs"]
        # myst-nb gives a cell's figure caption and label to each of its display outputs, so only a cell that
        # shows its chart alone can be a numbered figure (a chart beside a table would repeat the label)
        shown = [
            o
            for o in kept
            if o.get("output_type") in ("display_data", "execute_result")
            and "scrapbook" not in o.get("metadata", {})
        ]
        if charts_here == 1 and len(shown) == 1 and label[0]:
            cell["metadata"].setdefault("mystnb", {}).setdefault(
                "figure", {"caption": label[0], "name": label[1]}
            )
    if artifact is not None:
        src, dest, rel, what = artifact
        if src.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            cells.append(
                {
                    "id": "companion-download",
                    "cell_type": "markdown",
                    "metadata": {},
                    "source": f"```{{admonition}} Data of this page\n:class: seealso companion-download\n{{download}}`{src.name} <{rel}>` "
                    f"({src.stat().st_size / 1024:.1f} kB): {what}. It is the artifact this stage wrote.\n```\n",
                }
            )
    return moved
