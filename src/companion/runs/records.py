"""Run records: one JSON file per run, written atomically and never overwritten.

A record is written to a temporary file in the target folder, flushed to disk, then *hard-linked* to its
final name (``<run_id>.json``), which fails if that name exists. A crash at any moment leaves either no
record or a complete one; a finished record can be replaced by no later run. The schema is documented in
``data/README.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA_VERSION = 1


class RecordExists(FileExistsError):
    """A record with this run_id is already on disk; records are never overwritten."""


def record_path(out_dir: Path, run_id: str) -> Path:
    return Path(out_dir) / f"{run_id}.json"


def write_record(out_dir: Path, record: dict) -> Path:
    """Atomically create ``<out_dir>/<run_id>.json``; raise RecordExists if it is already there."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = record_path(out_dir, record["run_id"])
    tmp = out_dir / f".{record['run_id']}.{os.getpid()}.tmp"
    with tmp.open("w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise RecordExists(f"{final} exists; records are never overwritten") from None
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def write_json(path: Path, obj: dict) -> Path:
    """Atomically write (or replace) a JSON file that is *not* a run record: a plan or an artifact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_jsonable))
    os.replace(tmp, path)
    return path


def _jsonable(x):
    """numpy scalars and arrays, as JSON."""
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def read_record(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def load_records(out_dir: Path, status: str | None = None) -> list[dict]:
    """Every record in a folder (optionally only those with ``status``), sorted by run_id."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    records = [read_record(p) for p in sorted(out_dir.glob("*.json"))]
    return [r for r in records if status is None or r.get("status") == status]


def existing_status(out_dir: Path, run_id: str) -> str | None:
    """'ok', 'failed', or None when no record exists."""
    path = record_path(out_dir, run_id)
    if not path.exists():
        return None
    return read_record(path).get("status")


def set_aside_failed(out_dir: Path, run_id: str, stamp: str) -> Path:
    """Rename a failed record to ``<run_id>.failed-<stamp>.json.bak`` so that the run can be retried.

    Nothing is deleted or overwritten: the earlier failure stays on disk beside the new attempt.
    """
    src = record_path(out_dir, run_id)
    dst = Path(out_dir) / "failed" / f"{run_id}.failed-{stamp}.json"
    dst.parent.mkdir(exist_ok=True)
    os.link(src, dst)
    src.unlink()
    return dst
