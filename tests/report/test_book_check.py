"""The book check fails on each defect a reader would see: one small page per defect, read in headless Chromium."""

import shutil
from pathlib import Path

import altair as alt
import pandas as pd
import pytest

from companion.report import book_check, figures

BUNDLE = Path(__file__).resolve().parents[2] / "book" / "_static" / "vega-bundle.js"
CLEAN_OUTPUT = (
    '<div class="cell_output docutils container"><div class="output stream"><pre>{}</pre></div></div>'
)
STDERR_OUTPUT = (
    '<div class="cell_output docutils container"><div class="output stderr"><pre>{}</pre></div></div>'
)


# ------------------------------------------------------------------------------- rules, without a browser
@pytest.mark.parametrize(
    "text, what",
    [
        ('Traceback (most recent call last):\n  File "x.py"', "Traceback"),
        (
            "/opt/venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found",
            "Warning",
        ),
        ("UserWarning: the fit did not converge", "Warning"),
        ("fitting: 100%|██████████| 50/50 [00:03<00:00, 14.2it/s]", "progress bar"),
        (" 45%|####5     | 9/20 [00:01<00:01,  8.1it/s]", "progress bar"),
        ("wrote /home/alice/companion/data/derived/cpu/fit.json", "absolute path"),
        ("wrote C:\\Users\\alice\\fit.json", "absolute path"),
    ],
)
def test_output_rules_catch_each_leak(text, what):
    found = book_check.output_leaks([{"text": text, "stderr": 0}], "")
    assert any(f.startswith(what) for f in found), found


@pytest.mark.parametrize(
    "text",
    [
        "wrote data/derived/cpu/fit.json (5 runs)",
        "peak 1.2e+11 FLOP/s, 2.0e+10 B/s; energy per step (J); TP / FSDP",
        "see https://arxiv.org/abs/2606.23546 and <venv>/lib",
        "runs 43, warnings 0, 45 % of energy static",
    ],
)
def test_output_rules_pass_clean_text(text):
    assert book_check.output_leaks([{"text": text, "stderr": 0}], text) == []


def test_stderr_and_local_paths_in_prose_are_caught():
    assert book_check.output_leaks([{"text": "fine", "stderr": 1}], "")
    assert book_check.output_leaks([], "the records are in /tmp/root/data/runs/cpu")


def test_legend_rule():
    assert book_check.legendless([{"title": "a", "colours": 3, "legend": False}]) == ["a"]
    assert (
        book_check.legendless(
            [
                {"title": "b", "colours": 3, "legend": True, "unkeyed": 0},
                {"title": "c", "colours": 1, "legend": False},
            ]
        )
        == []
    )
    assert book_check.legendless([{"title": "d", "colours": 3, "legend": True, "unkeyed": 2}]) == ["d"]


def test_shared_colour_rule():
    assert book_check.shared_colours([{"title": "a", "shared": ["x / y"]}, {"title": "b", "shared": []}]) == [
        "a: x / y"
    ]
    assert book_check.shared_colours([{"title": "c"}]) == []


# ------------------------------------------------------------------------------- in Chromium, page by page
def _chart_html(legend: bool, width: int | str = "container") -> str:
    df = pd.DataFrame({"x": [1, 2, 3, 1, 2, 3], "y": [1, 2, 3, 2, 3, 5], "series": list("aaabbb")})
    color = alt.Color("series:N", legend=alt.Legend() if legend else None)
    chart = (
        alt.Chart(df, width=width, height=200, title="two series")
        .mark_line()
        .encode(x="x:Q", y="y:Q", color=color)
    )
    return figures.render_html(chart.to_dict())


def _page(tmp_path: Path, body: str) -> Path:
    shutil.copy(BUNDLE, tmp_path / "vega-bundle.js")
    page = tmp_path / "page.html"
    page.write_text(f"""<!DOCTYPE html><html><head><meta charset="utf-8"><script src="vega-bundle.js"></script></head>
<body><div style="display:flex"><article class="bd-article" style="width:784px; flex: none">
<h1>A page</h1><p>Prose.</p>{body}</article></div></body></html>""")
    return page


@pytest.fixture(scope="module")
def browser():
    """One Chromium for every page of this module, as the book check reads a book."""
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is missing: `make setup-browser` installs it (make test does)")
    if not BUNDLE.exists():
        pytest.fail("book/_static/vega-bundle.js is missing: `make book` (or make test) creates it")
    with book_check.Browser() as b:
        yield b


def test_a_closed_browser_leaves_nothing_in_the_temporary_folder(monkeypatch):
    """Its profile and the folder of Chromium's singleton socket (which a terminated Chromium leaves in TMPDIR)
    go when it closes."""
    import tempfile

    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is missing: `make setup-browser` installs it (make test does)")
    # a short path: the socket's must fit a Unix socket address (108 bytes), which pytest's tmp_path may not
    tmp = Path(tempfile.mkdtemp(prefix="bc-"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        monkeypatch.setenv("TMPDIR", str(tmp))
        with book_check.Browser() as b:
            b.start()
            assert "product" in b.send("Browser.getVersion")
            assert list(tmp.iterdir())  # the profile
        assert list(tmp.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_clean_page_passes(tmp_path, browser):
    body = _chart_html(legend=True) + CLEAN_OUTPUT.format("wrote data/derived/ci/runs.csv (5 runs)")
    r = book_check.check_page(_page(tmp_path, body), browser, screenshot=tmp_path / "shot.png")
    assert r.charts_drawn == r.charts_expected == 1
    assert r.ok, r.problems
    assert (tmp_path / "shot.png").stat().st_size > 1000


def test_a_multi_series_chart_without_a_legend_fails(tmp_path, browser):
    r = book_check.check_page(_page(tmp_path, _chart_html(legend=False)), browser)
    assert r.charts_without_legend == ["two series"], r.problems
    assert not r.ok


def test_a_legend_that_does_not_key_the_colours_fails(tmp_path, browser):
    df = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1, 2, 2, 3], "series": list("aabb"), "kind": list("pqpq")})
    chart = (
        alt.Chart(df, width="container", height=200, title="dashes keyed, colours not")
        .mark_line()
        .encode(
            x="x:Q", y="y:Q", color=alt.Color("series:N", legend=None), strokeDash="kind:N", detail="series:N"
        )
    )
    r = book_check.check_page(_page(tmp_path, figures.render_html(chart.to_dict())), browser)
    assert r.charts_without_legend == ["dashes keyed, colours not"], r.problems


def test_a_legend_giving_two_entries_one_colour_fails(tmp_path, browser):
    """Five series on a four-colour scale: the legend keys every colour, but two entries share one."""
    df = pd.DataFrame({"x": [1, 2] * 5, "y": range(10), "series": [s for s in "abcde" for _ in range(2)]})
    scale = alt.Scale(range=["#4c78a8", "#f58518", "#54a24b", "#b279a2"])
    chart = (
        alt.Chart(df, width="container", height=200, title="colours reused")
        .mark_line()
        .encode(x="x:Q", y="y:Q", color=alt.Color("series:N", scale=scale))
    )
    r = book_check.check_page(_page(tmp_path, figures.render_html(chart.to_dict())), browser)
    assert r.shared_colours == ["colours reused: a / e"], r.problems
    assert not r.ok
    clean = chart.encode(color=alt.Color("series:N"))  # the default scheme has ten colours
    assert book_check.check_page(_page(tmp_path, figures.render_html(clean.to_dict())), browser).ok


def test_a_chart_wider_than_the_column_fails(tmp_path, browser):
    body = f'<div class="output" style="overflow-x:auto">{_chart_html(legend=True, width=1000)}</div>'
    r = book_check.check_page(_page(tmp_path, body), browser)
    assert r.overflow and not r.ok, r.problems


def test_a_table_sticking_out_of_the_column_fails(tmp_path, browser):
    cells = "".join(f"<td>column_number_{i}</td>" for i in range(14))
    r = book_check.check_page(_page(tmp_path, f"<table><tr>{cells}</tr></table>"), browser)
    assert any("table" in o for o in r.overflow), r.problems


@pytest.mark.parametrize(
    "output, what",
    [
        (CLEAN_OUTPUT.format("wrote /home/alice/companion/data/derived/ci/fit.json"), "absolute path"),
        (CLEAN_OUTPUT.format("Traceback (most recent call last):"), "Traceback"),
        (CLEAN_OUTPUT.format("tqdm/auto.py:21: TqdmWarning: IProgress not found"), "Warning"),
        (CLEAN_OUTPUT.format("100%|██████████| 50/50 [00:03&lt;00:00, 14.2it/s]"), "progress bar"),
        (STDERR_OUTPUT.format("something went to stderr"), "stderr"),
        (
            '<div class="output text_html"><p>see /home/alice/run.log</p></div>',
            "absolute path",
        ),  # pasted by glue
    ],
)
def test_plumbing_in_an_output_fails(tmp_path, browser, output, what):
    r = book_check.check_page(_page(tmp_path, output), browser)
    assert any(leak.startswith(what) for leak in r.output_leaks), r.problems
    assert not r.ok


def test_a_script_error_and_a_missing_asset_reach_the_console_errors(tmp_path, browser):
    body = '<script>undefinedFunction();</script><img src="missing.png">'
    r = book_check.check_page(_page(tmp_path, body), browser)
    assert any("undefinedFunction" in e for e in r.console_errors), r.console_errors
    assert any("failed to load" in e.lower() for e in r.console_errors), r.console_errors
    assert not r.ok


def test_a_page_that_never_stops_is_reported_and_the_next_page_is_read(tmp_path):
    """A script that never ends holds the virtual time forever: the page fails after the real-time limit,
    and the browser is started again for the next page."""
    stuck = _page(tmp_path, "<script>while (true) {}</script>")
    with book_check.Browser(page_timeout_s=2) as b:
        r = book_check.check_page(stuck, b)
        assert any("did not finish within 2 s" in e for e in r.console_errors), r.console_errors
        assert not r.ok
        b.page_timeout_s = book_check.PAGE_TIMEOUT_S
        (tmp_path / "next").mkdir()
        assert book_check.check_page(_page(tmp_path / "next", "<p>fine</p>"), b).ok


def test_a_browser_that_dies_is_started_again_and_the_page_read(tmp_path, browser):
    page = _page(tmp_path, "<p>fine</p>")
    assert book_check.check_page(page, browser).ok
    browser._proc.kill()  # between two pages, as an out-of-memory kill would
    r = book_check.check_page(page, browser)
    assert r.ok, r.problems


def test_the_budget_rule_counts_every_page_and_spares_the_reproduce_page():
    from companion.report.book_check import budget_problems

    ok = {
        "intro.html": {"words": 500, "leaks": []},
        "reproduce.html": {"words": 400, "leaks": ["make_setup"]},
    }
    assert budget_problems(ok, budget=1000) == []
    over = {**ok, "limitations.html": {"words": 200, "leaks": ["layout_scale"]}}
    problems = budget_problems(over, budget=1000)
    assert len(problems) == 2 and "1100 words" in problems[0] and "layout_scale" in problems[1]
