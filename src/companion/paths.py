"""Every path the project reads or writes, in one place."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROFILES_DIR = PACKAGE_DIR / "runs" / "profiles"
RESOURCES_DIR = PACKAGE_DIR / "energy" / "resources"


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the working directory.

    ``COMPANION_ROOT`` overrides it, e.g. to write run records outside the checkout.
    """
    env = os.environ.get("COMPANION_ROOT")
    if env:
        return Path(env).resolve()
    candidate = PACKAGE_DIR.parent.parent
    if (candidate / "pyproject.toml").is_file():
        return candidate
    return Path.cwd()


def data_dir() -> Path:
    return repo_root() / "data"


def runs_dir(profile: str) -> Path:
    """Where ``companion sweep --profile NAME`` writes its run records by default."""
    return data_dir() / "runs" / profile


def derived_dir(profile: str) -> Path:
    """Analysis artifacts of a profile: runs.csv, proxies.csv, fit.json, validation.json, explore.csv."""
    return data_dir() / "derived" / profile


def devices_dir() -> Path:
    """Calibration files of ``companion calibrate``: data/devices/<device-name>.json."""
    return data_dir() / "devices"


def reference_dir(device: str) -> Path:
    """Committed reference records measured on a named device (e.g. ``H100``)."""
    return data_dir() / "reference" / device


def build_dir() -> Path:
    return repo_root() / "build"


def check_output_folder(folder: Path, flag: str) -> None:
    """A folder a command is about to write into: one that is a folder (or can be made) and writable, else a
    ``ConfigError`` naming the flag and the fix (raised before any work, not as a traceback after it)."""
    from companion.errors import ConfigError

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{flag} {folder} is a file, not a folder; give a folder (it is created when missing)")
    parent = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ConfigError(f"{flag} {folder}: {parent or folder} is not a writable folder; choose another path")
