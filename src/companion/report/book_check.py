"""Check the built book as a reader's browser sees it (headless Chromium, no network, 1400 px wide).

    python -m companion.report.book_check _build/html [--screenshots build/screenshots]

For every page:

* each interactive chart drew (an ``svg.marks`` per chart container), and every chart that draws several
  series (two or more distinct colours among its data marks) also draws a legend that keys every colour,
  with one colour per entry (a legend that gives two entries one colour cannot tell them apart);
* nothing is wider than the text column: no element scrolls or is clipped horizontally, none sticks out
  on the right (tables, charts, code, math);
* no output shows plumbing: no stderr, no "Traceback", no "Warning", no progress bar, no absolute path
  (and no absolute path of a checkout, home or temporary folder anywhere on the page);
* math was typeset where the page has math, the console shows no error, and nothing is fetched from outside
  the book: no script, stylesheet, image or frame has a remote address, and Chromium runs with every host
  name unresolvable, so any attempt would fail loudly in the console.

With ``--screenshots DIR`` it also writes a full-page PNG of every page at the same width.
"""

from __future__ import annotations

import argparse
import html as htmllib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

WIDTH_PX = 1400  # a desktop reader's window
BASE_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
              "--virtual-time-budget=20000"]
FLAGS = [*BASE_FLAGS, f"--window-size={WIDTH_PX},1000", "--dump-dom"]
REMOTE_ASSET = re.compile(r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]+"', re.I)
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] \"(?P<msg>.*)\", source: (?P<src>\S+)")
PROBE_TRIES = 2  # runs of the browser before "the page probe did not run" is reported
ERROR_WORDS = ("uncaught", "error", "failed to load", "net::err", "chart unavailable", "refused")

# What an output must never show. Absolute paths: a slash-rooted path of two or more parts that is not part
# of a URL or a unit ("FLOP/s"), a Windows drive path, or a home-relative path.
ABS_PATH = re.compile(r"(?<![\w.:/~<>-])/(?:[\w.@+-]+/)+[\w.@+-]+|\b[A-Za-z]:\\[\w.\\ -]+|~/[\w.-]+")
# Anywhere on a page (prose included): paths into a checkout, a home, a temporary folder or an environment.
LEAK_PATH = re.compile(r"/(?:home|Users|root|tmp|work|var/folders|private)/[\w.-]+|site-packages|\.venv/")
PROGRESS = re.compile(r"\d{1,3}%\|.*?\||[█▉▊▋▌▍▎▏]{2,}|\d+/\d+ \[\d+:\d+<|\d+(?:\.\d+)?\s?it/s\]")
OUTPUT_RULES = (("Traceback", re.compile(r"Traceback")),
                ("Warning", re.compile(r"Warning\b")),
                ("progress bar", PROGRESS),
                ("absolute path", ABS_PATH))

# Runs in the page after it loaded (virtual time): measures layout, inspects every chart, collects output text.
PROBE_JS = r"""
(function() {
  function chromatic(c) {
    var m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})/i.exec(c || "");
    var v = m ? [parseInt(m[1], 16), parseInt(m[2], 16), parseInt(m[3], 16)] : null;
    if (!v) { m = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(c || ""); if (m) v = [+m[1], +m[2], +m[3]]; }
    if (!v) return null;
    return (Math.max.apply(null, v) - Math.min.apply(null, v) > 24) ? v.join(",") : null;
  }
  function describe(el) {
    var s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    if (el.className && typeof el.className === "string") s += "." + el.className.trim().split(/\s+/).slice(0, 3).join(".");
    var t = (el.innerText || el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
    return s + (t ? " '" + t + "'" : "");
  }
  function probe() {
    var col = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
    var cr = col.getBoundingClientRect();
    var overflow = [];
    var all = col.querySelectorAll("*");
    for (var i = 0; i < all.length; i++) {
      var el = all[i];
      if (el.parentElement && el.parentElement.closest("[data-probe-overflow]")) continue;  // reported above
      var r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      var cs = getComputedStyle(el);
      if (cs.visibility === "hidden" || cs.position === "fixed") continue;
      var clips = ["auto", "scroll", "hidden", "clip"].indexOf(cs.overflowX) >= 0;
      if (clips && el.scrollWidth > el.clientWidth + 2) {
        overflow.push(describe(el) + ": content " + el.scrollWidth + " px in a box of " + el.clientWidth + " px");
        el.setAttribute("data-probe-overflow", "1");
      } else if (r.right > cr.right + 2) {
        overflow.push(describe(el) + ": right edge " + Math.round(r.right - cr.left) + " px in a column of " + Math.round(cr.width) + " px");
        el.setAttribute("data-probe-overflow", "1");
      }
    }
    var charts = [];
    var divs = document.querySelectorAll(".companion-chart");
    for (var j = 0; j < divs.length; j++) {
      var d = divs[j], colours = {};
      var marks = d.querySelectorAll("svg .role-mark path, svg .role-mark line, svg .role-mark rect, svg .role-mark circle");
      for (var k = 0; k < marks.length; k++) {
        var a = chromatic(marks[k].getAttribute("fill")), b = chromatic(marks[k].getAttribute("stroke"));
        if (a) colours[a] = 1; if (b) colours[b] = 1;
      }
      var keyed = {}, syms = d.querySelectorAll(".role-legend-symbol path, .role-legend-symbol rect");
      for (var q = 0; q < syms.length; q++) {
        var f = chromatic(syms[q].getAttribute("fill")), g = chromatic(syms[q].getAttribute("stroke"));
        if (f) keyed[f] = 1; if (g) keyed[g] = 1;
      }
      var unkeyed = Object.keys(colours).filter(function(c) { return !keyed[c]; }).length;
      // within one legend, the entries (labels) each colour keys: two labels on one colour are ambiguous
      var shared = [], legends = d.querySelectorAll(".role-legend");
      for (var l = 0; l < legends.length; l++) {
        var byColour = {}, entries = legends[l].querySelectorAll(".role-legend-symbol");
        for (var e = 0; e < entries.length; e++) {
          var shape = entries[e].querySelector("path, rect") || entries[e];
          var c = chromatic(shape.getAttribute("fill")) || chromatic(shape.getAttribute("stroke"));
          var label = entries[e].parentNode.querySelector(".role-legend-label text");
          if (c) { byColour[c] = byColour[c] || {}; byColour[c][label ? label.textContent : "?"] = 1; }
        }
        Object.keys(byColour).forEach(function(c) {
          var names = Object.keys(byColour[c]);
          if (names.length > 1) shared.push(names.join(" / "));
        });
      }
      var title = d.querySelector(".role-title-text");
      charts.push({id: d.id, title: title ? title.textContent : "", drawn: !!d.querySelector("svg.marks"),
                   colours: Object.keys(colours).length, legend: !!d.querySelector(".role-legend"),
                   unkeyed: unkeyed, shared: shared});
    }
    var outputs = [];
    // cell outputs, and outputs pasted into pages by glue
    var outs = document.querySelectorAll(".cell_output, .output:not(.cell_output .output)");
    for (var o = 0; o < outs.length; o++) {
      var err = outs[o].querySelectorAll(".stderr, .output.stderr, .traceback, .output.error").length;
      var copy = outs[o].cloneNode(true);
      copy.querySelectorAll("script, style").forEach(function(n) { n.remove(); });
      outputs.push({text: copy.textContent, stderr: err});
    }
    var result = {column_px: Math.round(cr.width), height_px: document.documentElement.scrollHeight,
                  overflow: overflow, charts: charts, outputs: outputs, text: col.innerText};
    var pre = document.createElement("pre");
    pre.id = "companion-probe";
    pre.textContent = JSON.stringify(result);
    document.body.appendChild(pre);
  }
  window.addEventListener("load", function() { setTimeout(probe, 4000); });
})();
"""
PROBE_OUT = re.compile(r'<pre id="companion-probe">(.*?)</pre>', re.S)


@dataclass
class PageReport:
    page: str
    charts_expected: int
    charts_drawn: int
    math_expected: bool
    math_typeset: bool
    console_errors: list[str] = field(default_factory=list)
    remote_assets: list[str] = field(default_factory=list)
    charts_without_legend: list[str] = field(default_factory=list)
    shared_colours: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)
    output_leaks: list[str] = field(default_factory=list)
    height_px: int = 0

    @property
    def problems(self) -> list[str]:
        out = []
        if self.charts_drawn < self.charts_expected:
            out.append(f"{self.charts_expected - self.charts_drawn} chart(s) did not draw")
        if self.math_expected and not self.math_typeset:
            out.append("math was not typeset")
        out += [f"console: {e}" for e in self.console_errors]
        out += [f"remote asset: {e}" for e in self.remote_assets]
        out += [f"several series and no legend: {c}" for c in self.charts_without_legend]
        out += [f"one colour for several legend entries: {c}" for c in self.shared_colours]
        out += [f"wider than the column: {o}" for o in self.overflow]
        out += [f"output shows {o}" for o in self.output_leaks]
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("error: Chromium is not installed; `make setup-browser` installs Debian's chromium")
    return exe


def output_leaks(outputs: list[dict], page_text: str) -> list[str]:
    """What the page's outputs (``{"text", "stderr"}`` each) and its text show that a reader must not see."""
    found = []
    for i, out in enumerate(outputs):
        if out.get("stderr"):
            found.append(f"stderr or an error (output {i + 1})")
        for name, rule in OUTPUT_RULES:
            m = rule.search(out.get("text", ""))
            if m:
                found.append(f"{name} (output {i + 1}): {m.group(0)[:80]!r}")
    m = LEAK_PATH.search(page_text)
    if m:
        found.append(f"a local path in the page: {m.group(0)!r}")
    return found


def legendless(charts: list[dict]) -> list[str]:
    """Charts that draw two or more colours and have no legend, or whose legends do not key every colour."""
    return [c.get("title") or c.get("id", "?") for c in charts
            if c.get("colours", 0) >= 2 and (not c.get("legend") or c.get("unkeyed", 0) > 0)]


def shared_colours(charts: list[dict]) -> list[str]:
    """'title: a / b' for every legend colour that keys two or more entries of one chart's legend."""
    return [f"{c.get('title') or c.get('id', '?')}: {names}" for c in charts for names in c.get("shared") or []]


def _chromium(exe: str, flags: list[str], url: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([exe, *flags, f"--user-data-dir={profile}", url], capture_output=True, text=True,
                              timeout=180)


def check_page(html: Path, exe: str | None = None, screenshot: Path | None = None) -> PageReport:
    exe = exe or chromium()
    source = html.read_text()
    # The probe runs in a copy of the page next to it (same relative assets), removed afterwards.
    probe_page = html.with_name(f".{html.stem}.probe.html")
    probe_page.write_text(source.replace("</body>", f"<script>{PROBE_JS}</script></body>", 1))
    try:
        # A second try where the probe's output is missing: a headless browser on a loaded machine now and
        # then dumps the page (or dies) before the probe ran, which says nothing about the page. A page whose
        # probe never runs fails.
        for _ in range(PROBE_TRIES):
            proc = _chromium(exe, FLAGS, probe_page.resolve().as_uri())
            dom = proc.stdout
            m = PROBE_OUT.search(dom)
            if m:
                break
    finally:
        probe_page.unlink(missing_ok=True)
    probe = json.loads(htmllib.unescape(m.group(1))) if m else {}
    errors = [m.group("msg") for m in CONSOLE.finditer(proc.stderr)
              if any(w in m.group("msg").lower() for w in ERROR_WORDS)]
    report = PageReport(
        page=html.name,
        charts_expected=source.count('class="companion-chart"'),
        charts_drawn=len(re.findall(r'<svg[^>]*class="marks"', dom)),
        math_expected=("math notranslate" in source),
        math_typeset=("<mjx-container" in dom),
        console_errors=errors if m else errors + ["the page probe did not run"],
        remote_assets=REMOTE_ASSET.findall(source),
        charts_without_legend=legendless(probe.get("charts", [])),
        shared_colours=shared_colours(probe.get("charts", [])),
        overflow=probe.get("overflow", []),
        output_leaks=output_leaks(probe.get("outputs", []), probe.get("text", "")),
        height_px=int(probe.get("height_px", 0)),
    )
    if screenshot is not None:
        take_screenshot(html, screenshot, report.height_px or 1000, exe)
    return report


def take_screenshot(html: Path, png: Path, height_px: int, exe: str | None = None) -> Path:
    """A full-page PNG of ``html`` at the reader's width (height capped at 16,000 px)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    flags = [*BASE_FLAGS, f"--window-size={WIDTH_PX},{min(max(height_px, 600), 16000)}",
             f"--screenshot={png.resolve()}"]
    _chromium(exe or chromium(), flags, html.resolve().as_uri())
    return png


def book_pages(html_dir: Path) -> list[Path]:
    """Every page a reader can open (not the index and search pages, nor the root's redirect)."""
    return sorted(p for p in Path(html_dir).rglob("*.html")
                  if p.name not in ("genindex.html", "search.html") and not p.name.startswith(".")
                  and "_static" not in p.parts and 'http-equiv="Refresh"' not in p.read_text()[:2000])


def check_book(html_dir: Path, screenshots: Path | None = None) -> list[PageReport]:
    exe = chromium()
    return [check_page(p, exe, screenshots / f"{p.stem}.png" if screenshots else None) for p in book_pages(html_dir)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m companion.report.book_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("html_dir", nargs="?", type=Path, default=Path("_build/html"))
    ap.add_argument("--screenshots", type=Path, help=f"write a full-page PNG of every page ({WIDTH_PX} px wide)")
    args = ap.parse_args(argv)
    reports = check_book(args.html_dir, args.screenshots)
    for r in reports:
        status = "ok " if r.ok else "BAD"
        print(f"{status} {r.page:24s} charts {r.charts_drawn}/{r.charts_expected}  math "
              f"{'yes' if r.math_typeset else 'no '}{'' if r.math_expected else ' (none)'}  problems {len(r.problems)}")
        for p in r.problems:
            print(f"      {p}")
    if args.screenshots:
        print(f"screenshots ({WIDTH_PX} px wide): {args.screenshots}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
