"""Optional packages, imported only where they are used, with one message that names the fix.

A run with ``meter='none'`` needs neither CodeCarbon nor NVML bindings; a GPU image without CodeCarbon can
still measure with NVML. When a package is missing, the caller gets a :class:`MissingPackage` (a
ConfigError: one line, no traceback) naming the package, what needs it, and the pip command.
"""

from __future__ import annotations

import importlib

from companion.errors import ConfigError

# import name -> pip distribution name
PIP_NAMES = {"codecarbon": "codecarbon", "pynvml": "nvidia-ml-py", "scipy": "scipy"}


class MissingPackage(ConfigError):
    """An optional package is not installed."""


def require(module: str, purpose: str, instead: str = ""):
    """``importlib.import_module(module)``, or a MissingPackage that says ``pip install <dist>``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pip_name = PIP_NAMES.get(module.split(".")[0], module.split(".")[0])
        alt = f", or {instead}" if instead else ""
        raise MissingPackage(
            f"{purpose} needs the package {pip_name!r}, which is not importable here ({exc}); "
            f"install it with `pip install {pip_name}`{alt}"
        ) from None
