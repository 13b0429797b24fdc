"""What each stored build is: its host, the commit that measured it, how many runs of each profile it holds and
the measurement protocol it ran, so that a build is kept for the question it answers (a new host, a protocol
change, a new set of runs), not for every change of the code.

    python benchmarks/stored_builds.py                 # every data/reference/cpu/*.tar.gz
    python benchmarks/stored_builds.py A.tar.gz data/  # archives, or folders holding runs/ and devices/

Prints one row per build, then the builds grouped by host and protocol. Reads the archives; scores nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.energy import stored  # noqa: E402
from companion.runs.provenance import host_slug  # noqa: E402

REFERENCE = ROOT / "data" / "reference" / stored.PROFILE
PROTOCOL = ("warmup_steps", "min_window_s", "min_windows", "target_rel_ci", "max_time_s")


def _records(source: Path):
    """(profile, record) of every run record in an archive or a data/ folder."""
    if source.is_file():
        with tarfile.open(source) as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if len(parts) == 3 and parts[0] == "runs" and m.name.endswith(".json"):
                    yield parts[1], json.loads(tar.extractfile(m).read())
    else:
        for path in sorted((source / "runs").glob("*/*.json")):
            yield path.parent.name, json.loads(path.read_text())


def describe(source: Path) -> dict:
    counts, hosts, commits, protocols, replicates = Counter(), Counter(), Counter(), Counter(), Counter()
    for profile, rec in _records(source):
        counts[profile] += 1
        if profile != stored.PROFILE:
            continue
        prov = rec.get("provenance") or {}
        hosts[host_slug((prov.get("hardware") or {}).get("cpu"))] += 1
        git = prov.get("git") or {}
        commits[(git.get("sha") or "unknown")[:7] + ("+" if git.get("dirty") else "")] += 1
        proto = (rec.get("config") or {}).get("protocol") or {}
        # the AdamW kernel the runs stepped with: part of what a CPU run measures (foreach until 2026-11-26, fused
        # since; docs/decisions.md)
        kernel = "+".join((rec.get("optimizer") or {}).get("kernel") or ["unrecorded"])
        protocols[(*(proto.get(k) for k in PROTOCOL), kernel)] += 1
        replicates[(rec.get("config") or {}).get("replicate", 0)] += 1
    return {
        "build": stored.sweep_name(source),
        "host": "/".join(h for h, _ in hosts.most_common()),
        "commit": commits.most_common(1)[0][0] if commits else "",
        "grid": counts.get(stored.PROFILE, 0),
        "holdout": counts.get(stored.HOLDOUT, 0),
        "testset": counts.get(stored.TEST, 0),
        "passes": len(replicates),
        "protocol": ", ".join(
            f"{k} {v}" for k, v in zip((*PROTOCOL, "AdamW"), protocols.most_common(1)[0][0])
        )
        if protocols
        else "",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sources", nargs="*", type=Path, help="archives or data/ folders (default: the stored builds)"
    )
    args = parser.parse_args(argv)
    sources = args.sources or stored.stored_sweeps(REFERENCE)
    if not sources:
        raise SystemExit(f"error: no stored builds in {REFERENCE}; pass archives or data/ folders")
    rows = [describe(s) for s in sources]
    cols = ("build", "host", "commit", "grid", "holdout", "testset", "passes")
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(width[c]) for c in cols))
    print("\nbuilds per host and protocol:")
    for (host, protocol, test), n in Counter(
        (r["host"], r["protocol"], r["testset"] > 0) for r in rows
    ).items():
        print(f"  {n:3d}  {host}: {protocol}{'; with the test set' if test else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
