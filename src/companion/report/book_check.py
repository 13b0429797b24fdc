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

One Chromium serves every page (``Browser``: the DevTools protocol over a pipe, each page in a fresh tab):
a page is read after 20 s of virtual time, so timers and animations have run without waiting for them in
real time. A page that never lets that budget run out (a script that never ends) fails after
``PAGE_TIMEOUT_S`` real seconds; a browser that dies is started again and the page read a second time.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

WIDTH_PX = 1400  # a desktop reader's window
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]
VIRTUAL_TIME_MS = 20_000  # what a page gets to load, draw its charts and typeset its math (virtual time)
PAGE_TIMEOUT_S = 120.0  # real time for that budget to run out
REMOTE_ASSET = re.compile(
    r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]+"', re.I
)
ERROR_WORDS = ("uncaught", "error", "failed to load", "net::err", "chart unavailable", "refused")

# What an output must never show. Absolute paths: a slash-rooted path of two or more parts that is not part
# of a URL or a unit ("FLOP/s"), a Windows drive path, or a home-relative path.
ABS_PATH = re.compile(r"(?<![\w.:/~<>-])/(?:[\w.@+-]+/)+[\w.@+-]+|\b[A-Za-z]:\\[\w.\\ -]+|~/[\w.-]+")
# Anywhere on a page (prose included): paths into a checkout, a home, a temporary folder or an environment.
LEAK_PATH = re.compile(r"/(?:home|Users|root|tmp|work|var/folders|private)/[\w.-]+|site-packages|\.venv/")
PROGRESS = re.compile(r"\d{1,3}%\|.*?\||[█▉▊▋▌▍▎▏]{2,}|\d+/\d+ \[\d+:\d+<|\d+(?:\.\d+)?\s?it/s\]")
OUTPUT_RULES = (
    ("Traceback", re.compile(r"Traceback")),
    ("Warning", re.compile(r"Warning\b")),
    ("progress bar", PROGRESS),
    ("absolute path", ABS_PATH),
)

# Evaluated in the page once its virtual time ran out: measures layout, inspects every chart, collects output
# text, and says what drew (chart SVGs, typeset math); a JSON string.
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
    return {column_px: Math.round(cr.width), height_px: document.documentElement.scrollHeight,
            overflow: overflow, charts: charts, outputs: outputs, text: col.innerText,
            charts_drawn: document.querySelectorAll("svg.marks").length,
            math_typeset: !!document.querySelector("mjx-container")};
  }
  return JSON.stringify(probe());
})()
"""


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
    return [
        c.get("title") or c.get("id", "?")
        for c in charts
        if c.get("colours", 0) >= 2 and (not c.get("legend") or c.get("unkeyed", 0) > 0)
    ]


def shared_colours(charts: list[dict]) -> list[str]:
    """'title: a / b' for every legend colour that keys two or more entries of one chart's legend."""
    return [
        f"{c.get('title') or c.get('id', '?')}: {names}" for c in charts for names in c.get("shared") or []
    ]


class BrowserError(RuntimeError):
    """Chromium exited, or did not answer in time."""


class PageTimeout(BrowserError):
    """A page's virtual time never ran out (a script that never ends)."""


def _read_messages(fd: int, replies: dict, events: queue.Queue) -> None:
    """Answers to their command's queue, events to ``events``; at EOF (the browser exited) every command
    still waiting gets None, and so does the event queue."""
    buf = b""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    reply = replies.pop(msg["id"], None)
                    if reply is not None:
                        reply.put(msg)
                else:
                    events.put(msg)
    for reply in list(replies.values()):
        reply.put(None)
    events.put(None)


def _read_lines(stream, lines: deque) -> None:
    for line in stream:
        lines.append(line.decode(errors="replace").rstrip())


class Browser:
    """One headless Chromium for many pages, driven over the DevTools protocol on a pipe (fd 3 in, fd 4 out;
    messages are JSON ended by a NUL byte). ``with Browser() as b: tab = b.open(page)``."""

    def __init__(self, exe: str | None = None, page_timeout_s: float = PAGE_TIMEOUT_S):
        self.exe = exe or chromium()
        self.page_timeout_s = page_timeout_s
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.close()
        self._profile = tempfile.TemporaryDirectory()
        to_browser, to_browser_w = os.pipe()
        self._out, from_browser = os.pipe()

        def pipes_at_3_and_4():  # in the child, before it closes every other descriptor
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [self.exe, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            # Chromium puts its singleton socket's folder in TMPDIR and leaves it behind when terminated: inside
            # the profile, it goes with it
            env={**os.environ, "TMPDIR": self._profile.name},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(3, 4),
            preexec_fn=pipes_at_3_and_4,
            start_new_session=True,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._writer = os.fdopen(to_browser_w, "wb")  # flush() writes a long message whole
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.events: queue.Queue = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        # each reader holds its own browser's descriptor and queues: a restart never mixes two browsers
        threading.Thread(
            target=_read_messages, args=(self._out, self._replies, self.events), daemon=True
        ).start()
        threading.Thread(target=_read_lines, args=(self._proc.stderr, self._stderr), daemon=True).start()

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:
            self._writer.close()  # the browser reads the end of its input; its reader closes the other pipe at EOF
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # its helpers (zygote, renderers) are in its session: none outlives it to write into the profile
        # while it is removed (a browser killed from outside leaves them running)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._profile.cleanup()

    def _why(self) -> str:
        code = self._proc.poll() if self._proc else None
        tail = " | ".join(x for x in self._stderr if x.strip())[-300:]
        return f"Chromium {'exited with code ' + str(code) if code is not None else 'did not answer'}" + (
            f" ({tail})" if tail else ""
        )

    def send(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60.0
    ) -> dict:
        if self._proc is None:
            self.start()
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
            reply: queue.Queue = queue.Queue()
            self._replies[msg_id] = reply
            msg = {"id": msg_id, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            try:
                self._writer.write(json.dumps(msg).encode() + b"\0")
                self._writer.flush()
            except OSError as e:
                raise BrowserError(f"{self._why()}: {e}") from None
        try:
            answer = reply.get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"{method}: no answer in {timeout:.0f} s; {self._why()}") from None
        if answer is None:
            raise BrowserError(f"{method}: {self._why()}")
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message', answer['error'])}")
        return answer["result"]

    def open(self, html: Path, height_px: int = 1000) -> Tab:
        """``html`` in a fresh tab ``WIDTH_PX`` wide, read once ``VIRTUAL_TIME_MS`` of virtual time ran out
        (timers, chart rendering and typesetting included), with every console message it printed."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, target, session)
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable", session=session)
            tab.resize(height_px)
            self.send("Emulation.setVirtualTimePolicy", {"policy": "pause"}, session=session)
            self.send("Page.navigate", {"url": Path(html).resolve().as_uri()}, session=session)
            self.send(
                "Emulation.setVirtualTimePolicy",
                {"policy": "pauseIfNetworkFetchesPending", "budget": VIRTUAL_TIME_MS},
                session=session,
            )
            tab.wait_for_budget(self.page_timeout_s)
        except BaseException:
            tab.close()
            raise
        return tab


class Tab:
    """One page of a ``Browser``: its console messages, expressions evaluated in it, screenshots."""

    def __init__(self, browser: Browser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session
        self.console: list[str] = []

    def wait_for_budget(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                event = self.browser.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise PageTimeout(
                    f"the page did not finish within {timeout_s:.0f} s of real time "
                    "(a script that never ends?)"
                ) from None
            if event is None:
                raise BrowserError(self.browser._why())
            if event.get("sessionId") != self.session:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Emulation.virtualTimeBudgetExpired":
                return
            if method == "Runtime.consoleAPICalled":
                self.console.append(
                    " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
                )
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                self.console.append(
                    details.get("exception", {}).get("description") or details.get("text", "")
                )
            elif method == "Log.entryAdded":
                self.console.append(params["entry"].get("text", ""))

    def evaluate(self, expression: str):
        result = self.browser.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"the page probe failed: {result['exceptionDetails'].get('text', '')}")
        return result["result"].get("value")

    def resize(self, height_px: int) -> None:
        self.browser.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH_PX, "height": int(height_px), "deviceScaleFactor": 1, "mobile": False},
            session=self.session,
        )

    def screenshot(self, png: Path, height_px: int) -> Path:
        """A PNG of the page's top ``height_px`` (``shot_height_px``) at the reader's width."""
        self.resize(shot_height_px(height_px))
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        png.parent.mkdir(parents=True, exist_ok=True)
        png.write_bytes(base64.b64decode(data))
        return png

    def close(self) -> None:
        try:
            self.browser.send("Target.closeTarget", {"targetId": self.target}, timeout=10)
        except BrowserError:
            pass


def _read_page(html: Path, browser: Browser, screenshot: Path | None) -> tuple[dict, list[str], str | None]:
    """The probe's result, the console messages of one page, and what kept the probe from running (None
    when it ran). A browser that died or hung is started again for a second try (that says nothing about
    the page); a page whose script never ends is not tried again."""
    for attempt in (1, 2):
        try:
            tab = browser.open(html)
            try:
                probe = json.loads(tab.evaluate(PROBE_JS))
                if screenshot is not None:
                    tab.screenshot(screenshot, int(probe.get("height_px") or 1000))
                return probe, tab.console, None
            finally:
                tab.close()
        except PageTimeout as e:
            browser.start()  # a renderer stuck in a script is not reused
            return {}, [], str(e)
        except BrowserError as e:
            browser.start()
            if attempt == 2:
                return {}, [], f"the page probe did not run: {e}"
    raise AssertionError("unreachable")


def check_page(html: Path, browser: Browser | None = None, screenshot: Path | None = None) -> PageReport:
    """Read one page in ``browser`` (a new Chromium for this page alone when None)."""
    if browser is None:
        with Browser() as own:
            return check_page(html, own, screenshot)
    html = Path(html)
    source = html.read_text()
    probe, console, failure = _read_page(html, browser, screenshot)
    errors = [msg for msg in console if any(w in msg.lower() for w in ERROR_WORDS)]
    return PageReport(
        page=html.name,
        charts_expected=source.count('class="companion-chart"'),
        charts_drawn=int(probe.get("charts_drawn", 0)),
        math_expected=("math notranslate" in source),
        math_typeset=bool(probe.get("math_typeset")),
        console_errors=errors + ([failure] if failure else []),
        remote_assets=REMOTE_ASSET.findall(source),
        charts_without_legend=legendless(probe.get("charts", [])),
        shared_colours=shared_colours(probe.get("charts", [])),
        overflow=probe.get("overflow", []),
        output_leaks=output_leaks(probe.get("outputs", []), probe.get("text", "")),
        height_px=int(probe.get("height_px", 0)),
    )


def shot_height_px(height_px: int) -> int:
    """A screenshot's height: the page's, at least 600 px and at most 16,000 px."""
    return min(max(int(height_px), 600), 16000)


def take_screenshot(html: Path, png: Path, height_px: int, browser: Browser | None = None) -> Path:
    """A PNG of ``html`` at the reader's width, ``height_px`` tall (``shot_height_px``)."""
    if browser is None:
        with Browser() as own:
            return take_screenshot(html, png, height_px, own)
    tab = browser.open(html, height_px=shot_height_px(height_px))
    try:
        return tab.screenshot(png, height_px)
    finally:
        tab.close()


def book_pages(html_dir: Path) -> list[Path]:
    """Every page a reader can open (not the index and search pages, nor the root's redirect)."""
    return sorted(
        p
        for p in Path(html_dir).rglob("*.html")
        if p.name not in ("genindex.html", "search.html")
        and not p.name.startswith(".")
        and "_static" not in p.parts
        and 'http-equiv="Refresh"' not in p.read_text()[:2000]
    )


def check_book(html_dir: Path, screenshots: Path | None = None) -> list[PageReport]:
    with Browser() as browser:
        return [
            check_page(p, browser, screenshots / f"{p.stem}.png" if screenshots else None)
            for p in book_pages(html_dir)
        ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m companion.report.book_check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("html_dir", nargs="?", type=Path, default=Path("_build/html"))
    ap.add_argument(
        "--screenshots", type=Path, help=f"write a full-page PNG of every page ({WIDTH_PX} px wide)"
    )
    args = ap.parse_args(argv)
    reports = check_book(args.html_dir, args.screenshots)
    for r in reports:
        status = "ok " if r.ok else "BAD"
        print(
            f"{status} {r.page:24s} charts {r.charts_drawn}/{r.charts_expected}  math "
            f"{'yes' if r.math_typeset else 'no '}{'' if r.math_expected else ' (none)'}  problems {len(r.problems)}"
        )
        for p in r.problems:
            print(f"      {p}")
    if args.screenshots:
        print(f"screenshots ({WIDTH_PX} px wide): {args.screenshots}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())


# ------------------------------------------------------------------------------------------ the reader's text
class _ReaderText(HTMLParser):
    """The text a reader sees in a page's main column: not the collapsed code cells, scripts or navigation."""

    SKIP = {"script", "style", "nav", "footer", "header", "svg"}

    def __init__(self):
        super().__init__()
        self.parts, self.skip, self.main = [], [], 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "main":
            self.main += 1
        skipped = {"cell_input", "headerlink", "companion-download"}  # code, anchors, the download box
        if tag in self.SKIP or skipped & set(classes):
            self.skip.append(tag)
        elif self.skip:
            self.skip.append(tag)

    def handle_endtag(self, tag):
        if tag == "main":
            self.main -= 1
        if self.skip:
            self.skip.pop()

    def handle_data(self, data):
        if self.main and not self.skip:
            self.parts.append(data)


def reader_text(page: Path) -> str:
    """The visible text of a page's main column, as one string."""
    parser = _ReaderText()
    parser.feed(Path(page).read_text(encoding="utf-8"))
    return " ".join(" ".join(parser.parts).split())


# what a reader should not meet outside the page on reproducing: code names, file paths, run ids
CODE_PATTERNS = (
    re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b"),  # snake_case names
    re.compile(r"\b[\w-]+\.(?:py|json|csv|yaml|ipynb|jsonl|tar\.gz)\b"),  # file names
    re.compile(r"\b(?:data|src|build|notebooks|params)/[\w./<>-]+"),  # paths
    re.compile(r"\bL\d+-h\d+-a\d+\S*"),  # run ids
)


def code_leaks(text: str) -> list[str]:
    """The code names, file names, paths and run ids in ``text``, each once, in order of appearance."""
    found = []
    for pattern in CODE_PATTERNS:
        found += [m.group(0) for m in pattern.finditer(text)]
    return list(dict.fromkeys(found))


BUDGET_WORDS = 9000  # the whole book, every page's visible text (dropdowns and tables included)
ANSWER_BOX_WORDS = 150  # the introduction's answer box: one screen


def answer_box_words(intro_html: str) -> list[str]:
    """The visible words of the introduction's answer box (its title included)."""
    start = intro_html.index("companion-answer")
    box = intro_html[intro_html.index(">", start) + 1 : intro_html.index("</div>", start)]
    return re.sub(r"<[^>]+>", " ", box).split()


PLUMBING_ALLOWED = ("reproduce.html",)  # the one page that names files and commands


def budget_problems(counts: dict[str, dict], budget: int = BUDGET_WORDS) -> list[str]:
    """What breaks the book's reading budget in ``word_counts``: more words than ``budget`` in all, and any code
    name, file name, path or run id on a page other than the one on reproducing. Empty when it keeps it."""
    out = []
    total = sum(c["words"] for c in counts.values())
    if total > budget:
        top = sorted(counts.items(), key=lambda kv: -kv[1]["words"])[:3]
        out.append(
            f"{total} words, over the budget of {budget} (longest: "
            + ", ".join(f"{p} {c['words']}" for p, c in top)
            + ")"
        )
    for page, c in counts.items():
        if c["leaks"] and not page.endswith(PLUMBING_ALLOWED):
            out.append(f"{page}: code-like text {', '.join(c['leaks'][:5])}")
    return out


def word_counts(html_dir: Path) -> dict[str, dict]:
    """Per page (its path under ``html_dir``): the words a reader sees and the code-like tokens among them."""
    out = {}
    for page in book_pages(html_dir):
        text = reader_text(page)
        out[str(page.relative_to(html_dir))] = {"words": len(text.split()), "leaks": code_leaks(text)}
    return out
