"""Where the book's numbers came from: the hardware of each data source and the build (commit, versions, date).

Run records carry their own provenance (``companion.runs.provenance``); this module only tabulates it, and
describes the build that turned records into the book. Missing fields read "not recorded".
"""

from __future__ import annotations

import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd

BOOK_PACKAGES = (
    "torch",
    "transformers",
    "codecarbon",
    "nvidia-ml-py",
    "numpy",
    "pandas",
    "scipy",
    "altair",
    "vl-convert-python",
    "papermill",
    "jupytext",
    "jupyter-book",
    "myst-nb",
    "sphinx",
)
UNKNOWN = "not recorded"


def _gib(n) -> str:
    return f"{n / 2**30:.0f} GiB" if isinstance(n, (int, float)) and n else UNKNOWN


# How a run record's meter ``source`` reads on a page: no code names (``codecarbon[cpu=cpu_load,ram=ram_model]``).
METER_WORDS = {"nvml": "NVML counter", "codecarbon": "CodeCarbon"}
METHOD_WORDS = {
    "cpu_load": "CPU load model",
    "ram_model": "RAM model",
    "intel_rapl": "RAPL counter",
    "intel_power_gadget": "Power Gadget counter",
    "windows_emi": "EMI counter",
    "nvml": "NVML counter",
}


def meter_words(source: str) -> str:
    """A meter source in plain words: ``codecarbon[cpu=cpu_load,ram=ram_model]`` reads "CodeCarbon: CPU load
    model, RAM model"; ``replay:nvml`` reads "replayed NVML counter"; an unknown name loses its underscores."""
    source = str(source)
    for prefix, words in (("replay:", "replayed "), ("injected:", "injected ")):
        if source.startswith(prefix):
            return words + meter_words(source[len(prefix) :])
    name, _, rest = source.partition("[")
    text = METER_WORDS.get(name, name.replace("_", " "))
    if rest:
        methods = [m.partition("=")[2] or m for m in rest.rstrip("]").split(",") if m]
        text += ": " + ", ".join(METHOD_WORDS.get(m, m.replace("_", " ")) for m in methods)
    return text


def data_sources(records: list[dict]) -> pd.DataFrame:
    """One row per data source (profile × hardware): runs, CPU model, cores, memory, GPU, driver, energy, code."""
    rows: dict[tuple, dict] = {}
    for r in records:
        if r.get("status") != "ok":
            continue
        prov = r.get("provenance") or {}
        hw = prov.get("hardware") or {}
        meters = [
            m for m in r.get("meters") or [] if m.get("source") not in (None, "none")
        ]  # ranks without a meter
        energy = (
            ", ".join(
                sorted(
                    {
                        ("measured" if m.get("measured") else "estimated") + f" ({meter_words(m['source'])})"
                        for m in meters
                    }
                )
            )
            or UNKNOWN
        )
        gpu = hw.get("gpu")
        key = (r.get("profile", UNKNOWN), hw.get("cpu"), hw.get("cpu_count"), gpu, hw.get("driver"), energy)
        row = rows.setdefault(
            key,
            {
                "profile": r.get("profile", UNKNOWN),
                "runs": 0,
                "CPU model": hw.get("cpu") or UNKNOWN,
                "CPU cores": hw.get("cpu_count") or UNKNOWN,
                "memory": _gib(hw.get("memory_bytes")),
                "GPU": f"{hw.get('gpu_count', 1)} × {gpu}" if gpu else "none",
                "GPU driver / CUDA": f"{hw.get('driver') or UNKNOWN} / {hw.get('cuda') or UNKNOWN}"
                if gpu
                else "—",
                "energy": energy,
                "commits": set(),
                "first": None,
                "last": None,
            },
        )
        row["runs"] += 1
        sha = (prov.get("git") or {}).get("sha")
        if sha:
            row["commits"].add(sha[:10] + ("+dirty" if (prov.get("git") or {}).get("dirty") else ""))
        when = prov.get("finished_at")
        if when:
            row["first"] = min(row["first"] or when, when)
            row["last"] = max(row["last"] or when, when)
    out = []
    for row in rows.values():
        row["code commit"] = ", ".join(sorted(row.pop("commits"))) or UNKNOWN
        first, last = row.pop("first"), row.pop("last")
        row["measured"] = f"{first[:10]} – {last[:10]}" if first else UNKNOWN
        out.append(row)
    return pd.DataFrame(out)


# the profiles a page names, in the book's words (the glossary's sets; the names stay on the Reproduce page)
PROFILE_WORDS = {
    "cpu": "sweep",
    "holdout": "validation set",
    "testset": "test set",
    "gpu-check": "reference",
    "gpu-test": "test set",
    "gpu-repeat": "repeats",
    "gpu-engines-repeat": "engine repeats",
    "gpu-modes": "modes",
}


def merged_sources(table: pd.DataFrame, hardware_only: bool = False) -> pd.DataFrame:
    """``data_sources`` with the sources that differ only in profile and run count in one row ("sweep,
    validation set"; runs "106 + 28"), so a table names each machine and code commit once; profiles in the
    book's words (``PROFILE_WORDS``); ``hardware_only``: also those that differ in code commit and dates (the
    commits listed, the dates spanned)."""
    if table.empty:
        return table
    table = table.assign(profile=table.profile.map(lambda p: PROFILE_WORDS.get(p, p)))
    free = ("profile", "runs") + (("code commit", "measured") if hardware_only else ())
    same = [c for c in table.columns if c not in free]
    out = []
    for _, g in table.groupby(same, sort=False):
        row = g.iloc[0].to_dict()
        row["profile"] = ", ".join(dict.fromkeys(g.profile.astype(str)))
        row["runs"] = " + ".join(g.runs.astype(str)) if len(g) > 1 else row["runs"]
        if hardware_only:
            commits = [c.strip() for v in g["code commit"] for c in str(v).split(",")]
            row["code commit"] = ", ".join(sorted(set(commits)))
            spans = [str(v).split(" – ") for v in g["measured"] if " – " in str(v)]
            if spans:
                row["measured"] = f"{min(a for a, _ in spans)} – {max(b for _, b in spans)}"
        out.append(row)
    return pd.DataFrame(out, columns=table.columns)


def git_commit(source_root: Path) -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes), or "not recorded" outside git."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(source_root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(source_root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return UNKNOWN
    return sha[:12] + ("+dirty" if dirty else "")


def versions() -> pd.DataFrame:
    """The versions of Python and the packages that computed and rendered the book."""
    rows = [{"package": "python", "version": platform.python_version()}]
    for name in BOOK_PACKAGES:
        try:
            rows.append({"package": name, "version": metadata.version(name)})
        except metadata.PackageNotFoundError:
            rows.append({"package": name, "version": "not installed"})
    return pd.DataFrame(rows)


def build_date() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
