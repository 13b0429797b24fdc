"""The book end to end on the `ci` profile: papermill stages, Jupyter Book with -W, headless Chromium."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from companion.report import stages
from companion.report.book_check import WIDTH_PX, book_pages, check_book, take_screenshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built_book(ci_root, short_calibration, tmp_path_factory):
    root, _ = ci_root
    os.environ["COMPANION_ROOT"] = str(root)  # stages write data/derived/ci under the temporary root
    try:
        src = stages.assemble_book(tmp_path_factory.mktemp("book") / "book")
        for name in ("_static/vega-bundle.js", "_extra/mathjax/tex-svg-full.js"):
            if not (src / name).exists():
                pytest.fail(f"book/{name} is missing: `make book` (or make test) creates it")
        # the device calibrated first, as `make reproduce` does: every stage reads its roofs and layout overheads
        # from data/devices/cpu.json instead of measuring the roofs again in each notebook
        from companion.runs.calibrate import write_calibration

        write_calibration(short_calibration, root / "data" / "devices" / "cpu.json")
        # the byte proxy's op-level check on one tiny configuration (the cpu book checks three larger ones, 4 s)
        small = tmp_path_factory.mktemp("params") / "02_proxies.yaml"
        small.write_text("check_configs: [[1, 64, 2, 32, 4]]\n")
        for stage in stages.STAGES:
            stages.run_stage(stage, "ci", src / "generated", params=small if stage == "02_proxies" else None)
        index = stages.build_book(src, src.parent / "out")
    finally:
        del os.environ["COMPANION_ROOT"]
    return root, index


def test_every_stage_writes_its_artifact(built_book):
    root, _ = built_book
    derived = root / "data" / "derived" / "ci"
    for name in (
        "runs.csv",
        "proxies.csv",
        "fit.json",
        "validation.json",
        "explore.csv",
        "builds.csv",
        "headline.json",
    ):
        assert (derived / name).stat().st_size > 0, name


def test_book_pages_draw_offline_in_chromium(built_book):
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is missing: `make setup-browser` installs it (make test does)")
    _, index = built_book
    reports = check_book(index.parent)
    pages = {r.page: r for r in reports}
    assert {"intro.html", "02_proxies.html", "03_fit.html", "04_validation.html"} <= set(pages)
    assert sum(r.charts_expected for r in reports) >= 8  # every interactive figure of the book
    bad = [r for r in reports if not r.ok]
    assert not bad, bad
    assert pages["intro.html"].math_typeset  # local MathJax


def test_a_page_screenshot_is_a_png_at_the_reader_width(built_book, tmp_path):
    """`make figures` screenshots every page the same way; one page here."""
    _, index = built_book
    page = next(p for p in book_pages(index.parent) if p.name == "04_validation.html")
    png = take_screenshot(page, tmp_path / "04_validation.png", 1200)
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(head[16:20], "big") == WIDTH_PX


def _bash_commands(page: Path) -> list[list[str]]:
    """The `companion ...` commands of a page's ```bash blocks (continuation lines joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
    return [
        shlex.split(line.split("#")[0])
        for line in " ".join(blocks).replace("\\\n", " ").splitlines()
        if line.strip().startswith("companion ")
    ]


def test_the_predict_commands_of_the_book_run_on_its_artifacts(built_book):
    root, _ = built_book
    cmds = [c for c in _bash_commands(stages.SOURCE_ROOT / "book" / "reproduce.md") if c[1] == "predict"]
    assert cmds, "reproduce.md shows no runnable predict command"
    for cmd in cmds:
        # the book's commands name the cpu profile's fit; the test book was built from the ci profile
        args = [a.replace("data/derived/cpu/", f"{root}/data/derived/ci/") for a in cmd[1:]]
        res = subprocess.run(
            [sys.executable, "-m", "companion.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COMPANION_ROOT": str(root)},
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert "energy" in res.stdout


def test_every_chart_is_a_numbered_captioned_figure_with_its_svg(built_book):
    _, index = built_book
    html_dir = index.parent
    for page in sorted((html_dir / "generated").glob("*.html")):
        text = page.read_text()
        charts = text.count('class="companion-chart"')
        assert text.count("<figcaption") >= charts, page.name
        assert len(re.findall(r'<span class="caption-number">Fig\. [\d.]+ </span>', text)) >= charts, (
            page.name
        )
        for href in re.findall(r'<a href="([^"]+\.svg)" download>', text):
            assert (page.parent / href).resolve().is_file(), href
        if charts:
            assert "<noscript><img" in text, page.name


def test_the_downloadable_notebooks_name_no_path_of_the_build_machine(built_book):
    root, index = built_book
    sources = sorted((index.parent / "_sources").rglob("*.ipynb"))
    assert sources, "the book offers no notebook"
    for nb in sources:
        text = nb.read_text()
        assert str(root) not in text and str(stages.SOURCE_ROOT) not in text, nb.name
        assert str(index.parent.parent.parent) not in text, nb.name  # nor the folder the book was built in


def test_the_book_keeps_its_word_budget_and_shows_no_plumbing(built_book):
    from companion.report.book_check import budget_problems, word_counts

    _, index = built_book
    counts = word_counts(index.parent)
    assert len(counts) >= 14
    assert budget_problems(counts) == []


def test_the_answer_box_fits_one_screen(built_book):
    """The intro's answer box: at most ANSWER_BOX_WORDS words of visible text (the ci build's; the reference
    book's, fuller, is printed by benchmarks/book_words.py)."""
    from companion.report.book_check import ANSWER_BOX_WORDS, answer_box_words

    _, index = built_book
    words = answer_box_words((index.parent / "intro.html").read_text())
    assert 20 < len(words) <= ANSWER_BOX_WORDS, len(words)
    # its link to the verdict's criteria (where a build has a verdict) lands on a section of the summary page
    from companion.report.sentences import VERDICT_HREF

    page, anchor = VERDICT_HREF.split("#")
    assert f'id="{anchor}"' in (index.parent / page).read_text()
