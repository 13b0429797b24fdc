"""Run the book's stages and build the book: the one code path the Makefile and the tests share.

    python -m companion.report.stages run 03_fit --profile cpu --out book/generated
    python -m companion.report.stages book --src book --out _build

A stage is a jupytext percent notebook in ``notebooks/``, converted to .ipynb and executed by papermill
(the only executor) with ``params/<stage>.yaml`` and the profile; the executed copy goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from companion import paths
from companion.errors import ConfigError
from companion.paths import PACKAGE_DIR, derived_dir
from companion.report import presentation

# the stages in the order they run, the artifact each writes (offered for download on its page) and what each
# reads: stated once, in the stage table, from which the Makefile's rules are written too
from companion.report.stage_table import ARTIFACTS, INPUTS, PRODUCER, STAGES

SOURCE_ROOT = PACKAGE_DIR.parent.parent  # the checkout: notebooks/, params/, book/, _config.yml


class StageFailed(RuntimeError):
    """A stage notebook raised; the message is its exception's last line, and the log's path."""


def profile_name(profile: str) -> str:
    """The name a profile's records and artifacts are filed under: a .yaml path's stem, else the name itself."""
    return Path(profile).stem if profile.endswith((".yaml", ".yml")) else profile


def check_inputs(stage: str, profile: str, params: Path) -> None:
    """Before a stage starts: its parameters are sane and the artifacts it reads exist (one-line errors)."""
    try:
        values = yaml.safe_load(Path(params).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"parameters {params} cannot be read ({exc}); fix the file") from None
    if not isinstance(values, dict):
        raise ConfigError(f"parameters {params} must be a mapping of name: value")
    if "n_boot" in values:
        n = values["n_boot"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"n_boot={n!r} in {params} must be a positive integer; set it to e.g. 200")
    if "workers" in values:
        n = values["workers"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(
                f"workers={n!r} in {params} must be a positive integer (processes at once); set it to "
                "the cores to use, e.g. 2"
            )
    for name in INPUTS.get(stage, ()):
        path = derived_dir(profile_name(profile)) / name
        if not path.is_file() or path.stat().st_size == 0:
            raise ConfigError(
                f"stage {stage} needs {path}, which is missing or empty; run stage "
                f"{PRODUCER[name]} first (make analysis PROFILE={profile})"
            )


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def run_stage(
    stage: str, profile: str, out_dir: Path, params: Path | None = None, cwd: Path | None = None
) -> Path:
    if stage not in STAGES:
        raise SystemExit(f"error: unknown stage {stage!r}; use one of {', '.join(STAGES)}")
    out_dir = Path(out_dir)
    build = SOURCE_ROOT / "build" / "notebooks"
    build.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    ipynb = build / f"{stage}.ipynb"
    import jupytext  # in this process: the jupytext command would start an interpreter per stage

    log = build / f"{stage}.log"
    log.write_text("")
    source = jupytext.read(SOURCE_ROOT / "notebooks" / f"{stage}.py")
    nb = presentation.prepare(json.loads(jupytext.writes(source, fmt="ipynb")), log)
    ipynb.write_text(json.dumps(nb, indent=1))
    params = params or SOURCE_ROOT / "params" / f"{stage}.yaml"
    check_inputs(stage, profile, params)
    # Stage 01 loads the profile itself (a .yaml path works); later stages read data/derived/<profile name>/.
    name = profile if stage == "01_runs" else profile_name(profile)
    out = out_dir / f"{stage}.ipynb"
    run_log = build / f"{stage}.papermill.log"  # papermill's own output; `log` holds what the page kept out
    with run_log.open("w") as f:
        res = subprocess.run(
            [
                _bin("papermill"),
                "--cwd",
                str(cwd or SOURCE_ROOT),
                "-k",
                "python3",
                "--no-progress-bar",
                str(ipynb),
                str(out),
                "-f",
                str(params),
                "-p",
                "profile",
                name,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TQDM_DISABLE": "1"},
        )
    if res.returncode:
        raise StageFailed(
            f"stage {stage} failed: {_last_error(run_log.read_text())} (full log: {run_log}; "
            f"executed notebook: {out})"
        )
    present(stage, out, profile_name(profile), log)
    return out


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt|Failed)\w*): (.+)$")


def _last_error(text: str) -> str:
    """The notebook's exception as one line ('ConfigError: ...'), from papermill's output."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # colour codes of the traceback
    found = [m for m in (_ERROR_LINE.match(line.strip()) for line in text.splitlines()) if m]
    found = [m for m in found if m.group(1) != "PapermillExecutionError"] or found
    if not found:
        return text.strip().splitlines()[-1] if text.strip() else "papermill exited with an error"
    return f"{found[-1].group(1)}: {found[-1].group(2)}"


def present(stage: str, executed: Path, profile: str, log: Path) -> None:
    """Apply the book's conventions to an executed notebook (``companion.report.presentation``)."""
    out_dir = executed.parent
    figure_dir = out_dir.parent / "_static" / "figures" / stage  # _static is copied whole into the site
    shutil.rmtree(figure_dir, ignore_errors=True)
    artifact = None
    if stage in ARTIFACTS:
        name, what = ARTIFACTS[stage]
        artifact = (paths.derived_dir(profile) / name, out_dir / "data" / name, f"data/{name}", what)
    nb = json.loads(executed.read_text())
    moved = presentation.finish(
        nb,
        stage,
        figure_dir,
        os.path.relpath(figure_dir, out_dir).replace(os.sep, "/"),
        presentation.path_roots(paths.repo_root(), SOURCE_ROOT),
        artifact,
        glued_at_root=(
            os.path.relpath(figure_dir, out_dir.parent).replace(os.sep, "/"),
            presentation.root_glues(out_dir.parent, stage),
        ),
    )
    # the notebook the book offers for download names no path of the machine that built it (papermill's
    # metadata, the hidden set-up cell's log): the checkout and the data root become relative
    text = json.dumps(nb, indent=1, ensure_ascii=False)
    book_src = executed.resolve().parent.parent  # <book>/generated/<stage>.ipynb
    for root in sorted({str(paths.repo_root()), str(SOURCE_ROOT), str(book_src)}, key=len, reverse=True):
        text = text.replace(root + "/", "").replace(root, ".")
    executed.write_text(text)
    if moved:
        with log.open("a") as f:
            f.write("\n".join(moved))
    kept = log.read_text().strip()
    if kept:
        print(f"{stage}: warnings and stderr kept out of the page: {len(kept.splitlines())} lines in {log}")


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


def repository_url() -> str | None:
    """The checkout's ``origin`` as a browsable https address, or None (then the book shows no repository link)."""
    try:
        url = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    if url.startswith("git@"):
        url = "https://" + url[4:].replace(":", "/", 1)
    url = url.removesuffix(".git")
    return url if url.startswith("https://") else None


def book_config(out: Path) -> Path:
    """``_config.yml`` plus what only the build knows: the provenance footer and the repository link."""
    import yaml

    from companion.report import provenance

    cfg = yaml.safe_load((SOURCE_ROOT / "_config.yml").read_text())
    html = cfg.setdefault("html", {})
    html["extra_footer"] = (
        f'<div class="companion-provenance">Built {provenance.build_date()} from commit '
        f"{provenance.git_commit(SOURCE_ROOT)}; hardware, versions and data sources: "
        f'appendix "Provenance".</div>'
    )
    url = repository_url()
    if url:
        cfg.setdefault("repository", {})["url"] = url
        html["use_repository_button"] = html["use_issues_button"] = True
    # what the pages quote of the build itself (the cite page's BibTeX): {{ commit }}, {{ repository }}
    cfg.setdefault("parse", {})["myst_substitutions"] = {
        "commit": provenance.git_commit(SOURCE_ROOT),
        "repository": url or "the source this book was built from",
    }
    path = (
        Path(out) / "_build" / "book-config.yml"
    )  # never the checkout's own _config.yml (make passes --out .)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path


def companion_bibtex() -> str:
    """The BibTeX entry of this companion as built: its commit, and its repository where the checkout has one."""
    from companion.report import provenance

    url = repository_url()
    fields = [
        (
            "title",
            "{companion: the executable companion to The Energy Consumption of Transformer Fine-Tuning}",
        ),
        ("author", "{{the companion contributors}}"),
        ("year", "{2026}"),
        ("version", "{0.1.0}"),
        ("license", "{Apache-2.0}"),
        *([("url", "{" + url + "}")] if url else []),
        ("note", "{commit " + provenance.git_commit(SOURCE_ROOT) + "}"),
    ]
    return "@software{companion2026,\n" + ",\n".join(f"  {k:<7} = {v}" for k, v in fields) + "\n}\n"


def build_book(src: Path, out: Path) -> Path:
    """Jupyter Book 1 over executed notebooks; warnings and broken references are errors."""
    generated = Path(src) / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    (generated / "companion.bib").write_text(companion_bibtex())  # the cite page includes it
    subprocess.run(
        [
            _bin("jupyter-book"),
            "build",
            str(src),
            "--config",
            str(book_config(Path(out))),
            "--path-output",
            str(out),
            "-W",
            "-n",
            "--keep-going",
            "--quiet",
        ],
        check=True,
    )
    return Path(out) / "_build" / "html" / "index.html"


def reference_book(archive: Path | None, out: Path) -> Path:
    """The book of a stored build (an archive of ``data/reference/cpu/``; default the newest), with no sweep:
    its records and calibration unpacked into ``out/data`` (the data root, ``COMPANION_ROOT`` = ``out``), every
    stage run on them with the sweep off, and the book built into ``out/_build/html``. What the published book is
    built from; the stored builds' scores and the GPU's reference runs are the checkout's own."""
    import tempfile

    from companion.energy import stored

    archive = (
        Path(archive)
        if archive
        else (stored.stored_sweeps(SOURCE_ROOT / "data" / "reference" / stored.PROFILE) or [None])[-1]
    )
    if archive is None or not Path(archive).is_file():
        raise ConfigError(
            f"no stored build {archive or 'in data/reference/cpu/'}; pass an archive "
            "(data/reference/cpu/*.tar.gz)"
        )
    out = Path(out).resolve()
    shutil.rmtree(out / "data", ignore_errors=True)
    (out / "data").parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        shutil.move(str(stored.unpacked(Path(archive), Path(tmp))), str(out / "data"))
    params = out / "01_runs.yaml"
    params.write_text("run_sweep: false  # the stored build's records, as measured\n")
    before = os.environ.get("COMPANION_ROOT")
    os.environ["COMPANION_ROOT"] = str(out)
    try:
        src = assemble_book(out / "book")
        for stage in STAGES:
            run_stage(stage, stored.PROFILE, src / "generated", params=params if stage == "01_runs" else None)
        return build_book(src, out)
    finally:
        if before is None:
            del os.environ["COMPANION_ROOT"]
        else:
            os.environ["COMPANION_ROOT"] = before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m companion.report.stages", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute one stage notebook")
    r.add_argument("stage", choices=STAGES)
    r.add_argument("--profile", default="cpu")
    r.add_argument("--out", type=Path, default=SOURCE_ROOT / "book" / "generated")
    r.add_argument("--params", type=Path)
    b = sub.add_parser("book", help="build the book")
    b.add_argument("--src", type=Path, default=SOURCE_ROOT / "book")
    b.add_argument("--out", type=Path, default=SOURCE_ROOT)
    ref = sub.add_parser(
        "reference", help="the book of a stored build, no sweep (what the published book shows)"
    )
    ref.add_argument(
        "--archive", type=Path, help="a stored build (default: the newest of data/reference/cpu/)"
    )
    ref.add_argument("--out", type=Path, default=SOURCE_ROOT / "build" / "reference-book")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            print(run_stage(args.stage, args.profile, args.out, args.params))
        elif args.cmd == "reference":
            print(reference_book(args.archive, args.out))
        else:
            print(build_book(args.src, args.out))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StageFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: artifacts already written are kept; re-run to continue", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
