"""The conventions every stage notebook gets in the book, on small notebooks (no kernel, no browser)."""

from companion.report import presentation
from companion.report.figures import render_html


def _code(src, tags=(), outputs=()):
    return {"cell_type": "code", "source": src, "metadata": {"tags": list(tags)}, "outputs": list(outputs)}


def test_prepare_hides_plumbing_and_collapses_code(tmp_path):
    nb = {
        "cells": [
            _code("profile = 'cpu'", ["parameters"]),
            _code("# hide\nimport pandas"),
            _code("glue('a', 1, display=False)\nglue('b', 2, display=False)"),
            _code("out = write_json(p, x)\nprint(out)"),
            _code("# show\nx = 1"),
            _code("chart(df)"),
        ]
    }
    cells = presentation.prepare(nb, tmp_path / "log")["cells"]
    assert "remove-cell" in cells[0]["metadata"]["tags"]  # the set-up cell
    tags = [c["metadata"]["tags"] for c in cells[1:]]
    assert tags == [["parameters"], ["remove-input"], ["remove-cell"], ["remove-cell"], [], ["hide-input"]]


def test_parameters_are_shown_once_with_the_injected_values():
    merged = presentation.merge_parameters(
        'profile = "cpu"  # a profile\nn_boot = 200\nseed = 0\n',
        '# Parameters\nprofile = "ci"\nn_boot = 50\n',
    )
    assert merged.splitlines() == ['profile = "ci"  # a profile', "n_boot = 50", "seed = 0"]


def test_finish_moves_stderr_relativises_paths_and_captions_charts(tmp_path):
    chart = render_html(
        {
            "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
            "description": "What to see.",
            "data": {"values": [{"x": 1}]},
            "mark": "point",
            "encoding": {"x": {"field": "x", "type": "quantitative"}},
        }
    )
    root = tmp_path / "root"
    nb = {
        "cells": [
            _code("p = 1", ["parameters"]),
            _code("# Parameters\np = 2\n", ["injected-parameters"]),
            _code(
                "x",
                outputs=[
                    {"output_type": "stream", "name": "stderr", "text": "UserWarning: x"},
                    {
                        "output_type": "stream",
                        "name": "stdout",
                        "text": f"wrote {root}/data/derived/ci/fit.json\n",
                    },
                ],
            ),
            _code(
                "c", outputs=[{"output_type": "display_data", "metadata": {}, "data": {"text/html": chart}}]
            ),
        ]
    }
    artifact_src = tmp_path / "fit.json"
    artifact_src.write_text("{}")
    moved = presentation.finish(
        nb,
        "03_fit",
        tmp_path / "figs",
        "../_static/figures/03_fit",
        presentation.path_roots(root, tmp_path / "src"),
        (artifact_src, tmp_path / "gen" / "data" / "fit.json", "data/fit.json", "the fit"),
    )
    cells = nb["cells"]
    assert moved == ["UserWarning: x"]
    assert "remove-cell" in cells[0]["metadata"]["tags"] and "hide-input" in cells[1]["metadata"]["tags"]
    assert cells[2]["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": "wrote data/derived/ci/fit.json\n"}
    ]
    html = cells[3]["outputs"][0]["data"]["text/html"]
    assert '<noscript><img src="../_static/figures/03_fit/fig-1.svg"' in html and "download>SVG</a>" in html
    assert (tmp_path / "figs" / "fig-1.svg").read_text().startswith("<svg")
    assert cells[3]["metadata"]["mystnb"]["figure"] == {"caption": "What to see.", "name": "fig-03-fit-1"}
    assert "{download}`fit.json <data/fit.json>`" in cells[-1]["source"]


def test_a_chart_beside_another_output_is_not_labelled_as_a_figure(tmp_path):
    """myst-nb would give the cell's label to each output: two outputs, two equal labels."""
    chart = render_html(
        {
            "description": "What to see.",
            "data": {"values": [{"x": 1}]},
            "mark": "point",
            "encoding": {"x": {"field": "x", "type": "quantitative"}},
        }
    )
    table = {"output_type": "execute_result", "metadata": {}, "data": {"text/html": "<table></table>"}}
    nb = {
        "cells": [
            _code(
                "c",
                outputs=[
                    {"output_type": "display_data", "metadata": {}, "data": {"text/html": chart}},
                    table,
                ],
            ),
            _code(
                "d", outputs=[{"output_type": "display_data", "metadata": {}, "data": {"text/html": chart}}]
            ),
        ]
    }
    presentation.finish(nb, "03_fit", tmp_path / "figs", "figs", [])
    first, second = nb["cells"]
    assert "mystnb" not in first["metadata"]
    assert "download>SVG</a>" in first["outputs"][0]["data"]["text/html"]  # still exported with its SVG
    assert second["metadata"]["mystnb"]["figure"] == {"caption": "What to see.", "name": "fig-03-fit-2"}


def test_a_glued_chart_gets_its_static_figure_referred_to_from_the_book_s_root(tmp_path):
    """A chart glued without display (the introduction's first figure, pasted into a page at the book's root)
    carries its static SVG for a reader without JavaScript, at a path from the root, and is not numbered as a
    figure of the stage's own page."""
    chart = render_html(
        {
            "description": "What to see.",
            "data": {"values": [{"x": 1}]},
            "mark": "point",
            "encoding": {"x": {"field": "x", "type": "quantitative"}},
        }
    )
    prefix = "application/papermill.record/"
    glued = {
        "output_type": "display_data",
        "metadata": {"scrapbook": {"name": "fig_hero", "mime_prefix": prefix}},
        "data": {prefix + "text/html": chart},
    }
    other = {**glued, "metadata": {"scrapbook": {"name": "fig_other", "mime_prefix": prefix}}}
    other["data"] = dict(glued["data"])
    nb = {"cells": [_code("g", outputs=[glued]), _code("h", outputs=[other])]}
    book = tmp_path / "book"
    book.mkdir()
    (book / "intro.md").write_text("# Intro\n\n```{glue:} fig_hero\n:doc: generated/06_headline.ipynb\n```\n")
    assert presentation.root_glues(book, "06_headline") == {"fig_hero"} and not presentation.root_glues(
        book, "04_x"
    )
    presentation.finish(
        nb,
        "06_headline",
        tmp_path / "figs",
        "../_static/figures/06_headline",
        [],
        glued_at_root=("_static/figures/06_headline", presentation.root_glues(book, "06_headline")),
    )
    html = nb["cells"][0]["outputs"][0]["data"][prefix + "text/html"]
    assert '<noscript><img src="_static/figures/06_headline/glue-fig_hero.svg" alt="What to see."' in html
    assert "download>SVG</a>" not in html and "mystnb" not in nb["cells"][0]["metadata"]
    assert (tmp_path / "figs" / "glue-fig_hero.svg").read_text().startswith("<svg")
    # a glued chart no root page pastes is left as it is: no SVG written for it
    assert "<noscript>" not in nb["cells"][1]["outputs"][0]["data"][prefix + "text/html"]
    assert not (tmp_path / "figs" / "glue-fig_other.svg").exists()


def test_table_headers_wrap_after_underscores_only():
    assert (
        presentation._breakable_headers('<tr><th class="c">energy_kwh_lo</th><td>run_id_1</td></tr>')
        == '<tr><th class="c">energy_<wbr>kwh_<wbr>lo</th><td>run_id_1</td></tr>'
    )


def test_a_cell_writing_the_artifact_keeps_the_value_it_shows(tmp_path):
    nb = {
        "cells": [
            _code("noise = f(df)\nwrite_json(p, noise)\npd.DataFrame(noise)"),
            _code("out = write_json(p, x)\nprint(f'wrote {out}')"),
        ]
    }
    cells = presentation.prepare(nb, tmp_path / "log")["cells"]
    assert [c["metadata"]["tags"] for c in cells[1:]] == [["remove-input"], ["remove-cell"]]


def test_a_long_printed_log_leaves_the_page(tmp_path):
    log = "".join(f"[{i}/40] run {i} ok\n" for i in range(40))
    nb = {
        "cells": [
            _code("sweep()", outputs=[{"output_type": "stream", "name": "stdout", "text": log}]),
            _code("x", outputs=[{"output_type": "stream", "name": "stdout", "text": "wrote runs.csv\n"}]),
        ]
    }
    moved = presentation.finish(nb, "01_runs", tmp_path / "figs", "figs", [])
    assert moved == [log]
    assert (
        nb["cells"][0]["outputs"][0]["text"]
        == f"({40} lines of progress log kept out of the page: the stage's log, Reproduce and explore)\n"
    )
    assert nb["cells"][1]["outputs"][0]["text"] == "wrote runs.csv\n"  # a short output stays
    # a loop that prints one output per line, around a table the cell shows: the lines go, the table stays
    table = {"output_type": "execute_result", "metadata": {}, "data": {"text/html": "<table></table>"}}
    lines = [{"output_type": "stream", "name": "stdout", "text": f"[{i}/30] ok\n"} for i in range(30)]
    nb = {"cells": [_code("sweep()", outputs=[*lines, table])]}
    moved = presentation.finish(nb, "01_runs", tmp_path / "figs", "figs", [])
    assert moved == ["".join(o["text"] for o in lines)]
    assert [o["output_type"] for o in nb["cells"][0]["outputs"]] == ["stream", "execute_result"]
    assert nb["cells"][0]["outputs"][0]["text"].startswith("(30 lines of progress log kept out of the page")
