"""Run the book's stages and build the book: the one code path the Makefile and the tests share.

    python -m companion.report.stages run 03_fit --profile cpu --out book/generated
    python -m companion.report.stages book --src book --out _build

A stage is a jupytext percent notebook in ``notebooks/``, converted to .ipynb and executed by papermill
(the only executor) with ``params/<stage>.yaml`` and the profile; the executed copy goes to ``--out``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from companion.paths import PACKAGE_DIR

SOURCE_ROOT = PACKAGE_DIR.parent.parent  # the checkout: notebooks/, params/, book/, _config.yml
STAGES = ("01_runs", "02_proxies", "03_fit", "04_validation", "05_predict")


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def run_stage(stage: str, profile: str, out_dir: Path, params: Path | None = None, cwd: Path | None = None) -> Path:
    if stage not in STAGES:
        raise SystemExit(f"error: unknown stage {stage!r}; use one of {', '.join(STAGES)}")
    out_dir = Path(out_dir)
    build = SOURCE_ROOT / "build" / "notebooks"
    build.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    ipynb = build / f"{stage}.ipynb"
    subprocess.run([_bin("jupytext"), "--quiet", "--to", "ipynb", str(SOURCE_ROOT / "notebooks" / f"{stage}.py"),
                    "-o", str(ipynb)], check=True)
    params = params or SOURCE_ROOT / "params" / f"{stage}.yaml"
    out = out_dir / f"{stage}.ipynb"
    subprocess.run([_bin("papermill"), "--cwd", str(cwd or SOURCE_ROOT), "-k", "python3", "--no-progress-bar",
                    str(ipynb), str(out), "-f", str(params), "-p", "profile", profile], check=True)
    return out


def assemble_book(dest: Path) -> Path:
    """Copy the book's hand-written sources (pages, toc, bibliography, local assets) to ``dest``."""
    src = SOURCE_ROOT / "book"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name == "generated":
            continue
        target = dest / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
    return dest


def build_book(src: Path, out: Path) -> Path:
    """Jupyter Book 1 over executed notebooks; warnings and broken references are errors."""
    subprocess.run([_bin("jupyter-book"), "build", str(src), "--config", str(SOURCE_ROOT / "_config.yml"),
                    "--path-output", str(out), "-W", "-n", "--keep-going", "--quiet"], check=True)
    return Path(out) / "_build" / "html" / "index.html"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m companion.report.stages", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute one stage notebook")
    r.add_argument("stage", choices=STAGES)
    r.add_argument("--profile", default="cpu")
    r.add_argument("--out", type=Path, default=SOURCE_ROOT / "book" / "generated")
    r.add_argument("--params", type=Path)
    b = sub.add_parser("book", help="build the book")
    b.add_argument("--src", type=Path, default=SOURCE_ROOT / "book")
    b.add_argument("--out", type=Path, default=SOURCE_ROOT)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        print(run_stage(args.stage, args.profile, args.out, args.params))
    else:
        print(build_book(args.src, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
