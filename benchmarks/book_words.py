"""How long the book is and where it shows plumbing: words per page and the code-like tokens a reader meets.

    python benchmarks/book_words.py [_build/html]      # a built book (default: the one `make book` writes)

Prints, per page, the words a reader sees (collapsed code cells, scripts and navigation left out) and how many
code names, file names, paths and run ids its text holds, with the first few; then the total against the
book's budget of 9,000 words. The page on reproducing is expected to name files and commands.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.report.book_check import (  # noqa: E402
    ANSWER_BOX_WORDS,
    BUDGET_WORDS,
    PLUMBING_ALLOWED,
    answer_box_words,
    word_counts,
)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    if not html.is_dir():
        raise SystemExit(f"error: no built book at {html}; run `make book` or `make book-reference` first")
    counts = word_counts(html)
    total = sum(c["words"] for c in counts.values())
    print(f"{'words':>6}  {'code':>4}  page (first code-like tokens)")
    for page, c in counts.items():
        allowed = page.endswith(PLUMBING_ALLOWED)
        shown = "" if allowed or not c["leaks"] else "  " + ", ".join(c["leaks"][:5])
        print(f"{c['words']:6d}  {'-' if allowed else len(c['leaks']):>4}  {page}{shown}")
    leaks = sum(len(c["leaks"]) for p, c in counts.items() if not p.endswith(PLUMBING_ALLOWED))
    print(
        f"\n{total} words in {len(counts)} pages (budget {BUDGET_WORDS}); {leaks} code-like tokens outside "
        "the page on reproducing"
    )
    intro = html / "intro.html"
    if intro.is_file() and "companion-answer" in (text := intro.read_text()):
        print(f"answer box: {len(answer_box_words(text))} words (budget {ANSWER_BOX_WORDS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
