"""Local copies of the book's JavaScript, so that no page fetches anything from the network.

    python -m companion.report.book_assets vega book/_static/vega-bundle.js
    python -m companion.report.book_assets mathjax book/_extra/mathjax/tex-svg-full.js

* Vega, Vega-Lite and Vega-Embed: one bundle from vl-convert-python, wrapped in a function scope (its
  globals would otherwise clash with Sphinx's ``_``); it defines ``window.vegaEmbed``. Jupyter Book adds
  every ``.js`` in ``_static`` to every page.
* MathJax 3: ``tex-svg-full.js`` from the npm package ``mathjax`` (``npm pack``; kept out of ``_static``,
  which would load it on every page twice).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MATHJAX_VERSION = "3.2.2"


def write_vega_bundle(dest: Path) -> Path:
    import vl_convert as vlc

    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(
        "/* vega + vega-lite + vega-embed, bundled by vl-convert-python */\n(function(){\n"
        + vlc.javascript_bundle()
        + "\n})();\n"
    )
    return dest


def write_mathjax(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["npm", "pack", f"mathjax@{MATHJAX_VERSION}", "--pack-destination", tmp, "--silent"],
            capture_output=True,
            text=True,
            check=True,
        )
        tgz = Path(tmp) / out.stdout.strip().splitlines()[-1]
        with tarfile.open(tgz) as tar:
            member = tar.extractfile("package/es5/tex-svg-full.js")
            dest.write_bytes(member.read())
    return dest


def main(argv: list[str]) -> int:
    what, dest = argv
    path = {"vega": write_vega_bundle, "mathjax": write_mathjax}[what](Path(dest))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
