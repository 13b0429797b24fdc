"""Check the built book as a reader's browser sees it (headless Chromium, no network).

    python -m companion.report.book_check _build/html

For every page: each interactive chart drew (an ``svg.marks`` per chart container), math was typeset where
the page has math, the console shows no error, and nothing is fetched from outside the book: no script,
stylesheet, image or frame has a remote address, and Chromium runs with every host name unresolvable, so
any attempt would fail loudly in the console.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=20000", "--dump-dom"]
REMOTE_ASSET = re.compile(r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]+"', re.I)
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] \"(?P<msg>.*)\", source: (?P<src>\S+)")
ERROR_WORDS = ("uncaught", "error", "failed to load", "net::err", "chart unavailable", "refused")


@dataclass
class PageReport:
    page: str
    charts_expected: int
    charts_drawn: int
    math_expected: bool
    math_typeset: bool
    console_errors: list[str] = field(default_factory=list)
    remote_assets: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.charts_drawn >= self.charts_expected and (self.math_typeset or not self.math_expected)
                and not self.console_errors and not self.remote_assets)


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("error: Chromium is not installed; `make setup-browser` installs Debian's chromium")
    return exe


def check_page(html: Path, exe: str | None = None) -> PageReport:
    source = html.read_text()
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([exe or chromium(), *FLAGS, f"--user-data-dir={profile}", html.resolve().as_uri()],
                              capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    errors = [m.group("msg") for m in CONSOLE.finditer(proc.stderr)
              if any(w in m.group("msg").lower() for w in ERROR_WORDS)]
    return PageReport(
        page=html.name,
        charts_expected=source.count('class="companion-chart"'),
        charts_drawn=len(re.findall(r'<svg[^>]*class="marks"', dom)),
        math_expected=("math notranslate" in source),
        math_typeset=("<mjx-container" in dom),
        console_errors=errors,
        remote_assets=REMOTE_ASSET.findall(source),
    )


def check_book(html_dir: Path) -> list[PageReport]:
    pages = sorted(p for p in Path(html_dir).rglob("*.html")
                   if p.name not in ("genindex.html", "search.html") and "_static" not in p.parts)
    exe = chromium()
    return [check_page(p, exe) for p in pages]


def main(argv: list[str]) -> int:
    reports = check_book(Path(argv[0] if argv else "_build/html"))
    for r in reports:
        status = "ok " if r.ok else "BAD"
        print(f"{status} {r.page:24s} charts {r.charts_drawn}/{r.charts_expected}  math "
              f"{'yes' if r.math_typeset else 'no '}{'' if r.math_expected else ' (none)'}  "
              f"console errors {len(r.console_errors)}  remote assets {len(r.remote_assets)}")
        for e in r.console_errors + r.remote_assets:
            print(f"      {e}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
