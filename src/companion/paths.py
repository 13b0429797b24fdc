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
    """Committed reference measurements of a named device (e.g. ``H200``): the data root's, else (a data root set
    by ``COMPANION_ROOT`` that holds none) the ones shipped with this checkout."""
    own = data_dir() / "reference" / device
    shipped = PACKAGE_DIR.parent.parent / "data" / "reference" / device
    return own if own.exists() or not shipped.exists() else shipped


def build_dir() -> Path:
    return repo_root() / "build"
