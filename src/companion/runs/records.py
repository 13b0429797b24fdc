"""Run records: one JSON file per run, written atomically and never overwritten.

A record is written to a temporary file in the target folder, flushed to disk, then *hard-linked* to its
final name (``<run_id>.json``), which fails if that name exists. A crash at any moment leaves either no
record or a complete one; a finished record can be replaced by no later run. The schema is documented in
``data/README.md``.
"""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from companion.errors import ConfigError
from companion.runs.provenance import meter_environment, static_provenance, utc_now

if TYPE_CHECKING:
    from companion.runs.config import RunConfig

SCHEMA_VERSION = 1
# calibration files (``companion calibrate``); files without a ``format`` key are format 1 and load
CALIBRATION_FORMAT = 2
# the precision a calibration file's dtype (``companion calibrate`` writes torch's name) stands for
CALIBRATION_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def dtype_precision(dtype) -> str | None:
    """The precision a calibration's dtype stands for ("bfloat16" or "torch.bfloat16" -> "bf16"); None for a
    missing or unknown one."""
    return CALIBRATION_PRECISION.get(str(dtype).removeprefix("torch.")) if dtype else None


LOCK_NAME = ".lock"


class RecordExists(FileExistsError):
    """A record with this run_id is already on disk; records are never overwritten."""


def record_path(out_dir: Path, run_id: str) -> Path:
    return Path(out_dir) / f"{run_id}.json"


def write_record(out_dir: Path, record: dict) -> Path:
    """Atomically create ``<out_dir>/<run_id>.json``; raise RecordExists if it is already there."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = record_path(out_dir, record["run_id"])
    text = strict_dumps(record, indent=1, sort_keys=True) + "\n"
    # a temporary file of a new name, created exclusively: one a killed writer left behind is never opened again
    # (after its link it is the record itself, which opening it for writing would empty)
    fd, name = tempfile.mkstemp(dir=out_dir, prefix=f".{record['run_id']}.", suffix=".tmp")
    tmp = Path(name)
    try:  # the temporary file goes whatever happens (a full disk must not leave a 0-byte file behind)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
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


def keep_duplicate(out_dir: Path, record: dict) -> Path:
    """Keep a record whose run another writer recorded first, under ``<out_dir>/duplicates/<stamp>-<pid>/``:
    never in place of that record, never read as one (``load_records`` reads the folder's own files)."""
    return write_record(Path(out_dir) / "duplicates" / f"{utc_now().replace(':', '')}-{os.getpid()}", record)


def write_json(path: Path, obj: dict) -> Path:
    """Atomically write (or replace) a JSON file that is *not* a run record: a plan or an artifact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = strict_dumps(obj, indent=1)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _jsonable(x):
    """numpy scalars and arrays, as JSON."""
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def strict(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN/Infinity: they become null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # numpy scalars and arrays
        return strict(obj.tolist())
    return obj


def strict_dumps(obj, **kwargs) -> str:
    """Strict JSON text: non-finite numbers written as null, never as NaN or Infinity."""
    return json.dumps(strict(obj), allow_nan=False, default=_jsonable, **kwargs)


class CorruptFile(ConfigError):
    """A JSON file that is truncated, not JSON or not an object (a file that cannot be read is not one)."""


def read_json(path: Path, what: str = "JSON file", fix: str = "delete or regenerate it") -> dict:
    """A JSON object from ``path``; a ConfigError naming the file when it cannot be read, and a CorruptFile when
    it is truncated or not JSON."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptFile(f"{what} {path} is corrupt ({exc}); {fix}") from None
    except OSError as exc:  # a folder of that name, a file without read permission
        raise ConfigError(
            f"cannot read {what} {path} ({exc.strerror or exc}); fix its permissions or move it out of the way"
        ) from None
    if not isinstance(obj, dict):
        raise CorruptFile(f"{what} {path} is not a JSON object; {fix}")
    return obj


def read_record(path: Path) -> dict:
    return read_json(
        path,
        "run record",
        "re-run the sweep: it sets a corrupt record aside (corrupt/) and runs that configuration again",
    )


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


def resume_status(out_dir: Path, run_id: str, stamp: str) -> str | None:
    """Like :func:`existing_status`, but a corrupt record (truncated, not JSON) is set aside under
    ``corrupt/`` (renamed, never deleted) and reported as missing, so that the run is done again."""
    try:
        return existing_status(out_dir, run_id)
    except CorruptFile:
        src = record_path(out_dir, run_id)
        dst = _move_aside(src, Path(out_dir) / "corrupt", f"{run_id}.corrupt-{stamp}")
        print(f"warning: corrupt record {src} set aside as {dst}; the run is done again", flush=True)
        return None


def set_aside_failed(out_dir: Path, run_id: str, stamp: str) -> Path:
    """Rename a failed record to ``<run_id>.failed-<stamp>.json.bak`` so that the run can be retried.

    Nothing is deleted or overwritten: the earlier failure stays on disk beside the new attempt.
    """
    return _move_aside(record_path(out_dir, run_id), Path(out_dir) / "failed", f"{run_id}.failed-{stamp}")


def _move_aside(src: Path, folder: Path, stem: str) -> Path:
    """Move ``src`` to ``folder/<stem>.json`` by a hard link, never over a file there: a second move in the same
    second (stamps are to the second) takes ``<stem>-2.json``, and so on."""
    folder.mkdir(exist_ok=True)
    for k in range(1, 1000):
        dst = folder / (f"{stem}.json" if k == 1 else f"{stem}-{k}.json")
        try:
            os.link(src, dst)
        except FileExistsError:
            continue
        src.unlink()
        return dst
    raise ConfigError(f"{folder} holds 999 copies of {stem}.json; move some away")


# ------------------------------------------------------------------------------- the output folder
def check_writable(out_dir: Path, flag: str = "--out") -> Path:
    """Create ``out_dir`` if needed and prove a file can be written there, before anything is measured."""
    out_dir = Path(out_dir)
    probe = out_dir / f".write-test.{os.getpid()}"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(
            f"{flag} {out_dir} is a file, not a folder; give a folder's path (it is made if missing)"
        )
    linked = probe.with_name(probe.name + ".link")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with probe.open("w") as f:
            f.write("ok\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise ConfigError(
            f"{flag} {out_dir} is not writable ({exc.strerror or exc}); choose a folder you can "
            f"write to, or free space there"
        ) from None
    try:
        os.link(probe, linked)  # a record takes its name by a hard link (``write_record``)
    except OSError as exc:
        raise ConfigError(
            f"{flag} {out_dir} is on a file system without hard links ({exc.strerror or exc}), by which run "
            "records are written so that none is ever overwritten; choose a folder on a local file system"
        ) from None
    finally:
        for path in (probe, linked):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
    return out_dir


class FolderLock:
    """An exclusive lock on an output folder (``<out>/.lock``, ``fcntl.flock``), held while a sweep or a run
    writes there. The file says who holds it (host, pid, start time). The kernel drops the lock when the
    holder dies, so a lock left by a killed process is never stale."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        from companion.runs.provenance import utc_now

        check_writable(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(
                f"{self.path.parent} is in use by {holder}; wait for it to finish or write to another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"host {socket.gethostname()}, pid {os.getpid()}, since {utc_now()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(
                self._fd
            )  # closing drops the flock; the file stays (removing it would race a new holder)
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def make_record(
    cfg: RunConfig,
    profile: str,
    status: str,
    body: dict | None,
    error: dict | None,
    started: str,
    launch: dict,
) -> dict:
    """A run's record: its configuration, what the run measured (``body``) or its ``error``, and provenance
    (the launcher writes a failed run's with no body). Here, not in the training module, so a sweep's
    launcher writes one without importing torch."""
    config = cfg.to_dict()
    config.update(world_size=cfg.layout.world_size, mode=cfg.layout.mode)
    return {
        "schema": SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "config_id": cfg.config_id,  # shared by every replicate of the configuration
        "profile": profile,
        "status": status,
        "config": config,
        **(body or {}),
        "error": error,
        "provenance": {
            **static_provenance(cfg.device),
            "seed": cfg.seed,
            "config_digest": cfg.digest(),
            "started_at": started,
            "finished_at": utc_now(),
            "launch": launch,
            "meter_environment": meter_environment(),
        },
    }
