"""Where a record came from: code version, packages, hardware, time."""

from __future__ import annotations

import datetime
import os
import platform
import re
import socket
import subprocess
from functools import lru_cache
from importlib import metadata

from companion.paths import PACKAGE_DIR

PACKAGES = ("companion", "torch", "transformers", "codecarbon", "nvidia-ml-py", "numpy", "scipy", "pandas")


# Variables that steer what a meter reads. CODECARBON_* change CodeCarbon's estimate (PUE, a forced CPU or RAM
# power, the tracked GPUs, ...): the runner neutralises them (removes them before its meter starts), so a
# record's energy never depends on them; they are still recorded. The others select the devices metered.
METER_ENV_PREFIXES = ("CODECARBON_",)
METER_ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "NVML_LIBRARY_PATH",
    "OMP_NUM_THREADS",
    "TORCH_NUM_THREADS",
)
_NEUTRALISED: dict[str, str] = {}


def neutralise_meter_environment() -> dict[str, str]:
    """Remove every CODECARBON_* variable from this process's environment (before a meter starts); return them."""
    for name in [k for k in os.environ if k.upper().startswith(METER_ENV_PREFIXES)]:
        _NEUTRALISED[name] = os.environ.pop(name)
    return dict(_NEUTRALISED)


def meter_environment() -> dict:
    """The meter's environment for a record: every CODECARBON_* and device-selection variable, which of them
    were neutralised, and CodeCarbon config files that exist (``~/.codecarbon.config``, ``./.codecarbon.config``)."""
    from pathlib import Path

    variables = {
        k: v
        for k, v in os.environ.items()
        if k.upper().startswith(METER_ENV_PREFIXES) or k in METER_ENV_NAMES
    }
    variables.update(_NEUTRALISED)
    files = [
        str(p) for p in (Path.home() / ".codecarbon.config", Path.cwd() / ".codecarbon.config") if p.is_file()
    ]
    return {
        "variables": dict(sorted(variables.items())),
        "neutralised": sorted(k for k in variables if k.upper().startswith(METER_ENV_PREFIXES)),
        "codecarbon_config_files": files,
    }


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_state() -> dict:
    """Commit SHA and whether tracked code differs from it (None when not in a git checkout)."""
    root = PACKAGE_DIR.parent.parent  # the checkout the code runs from, wherever data is written

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)

    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "pyproject.toml")
        return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"sha": None, "dirty": None}


def package_versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hardware(device_type: str) -> dict:
    import torch

    info = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "torch_threads": torch.get_num_threads(),
    }
    if device_type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(
            gpu=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=props.total_memory,
            cuda=torch.version.cuda,
        )
        try:
            import pynvml  # optional: the driver version is provenance, not a requirement

            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        except Exception:
            info["driver"] = None
    return info


@lru_cache(maxsize=2)
def static_provenance(device_type: str) -> dict:
    """The parts that do not change between runs of one launch."""
    return {"git": git_state(), "packages": package_versions(), "hardware": hardware(device_type)}


def device_tag(device_type: str) -> str:
    """Short hardware name for run IDs: 'cpu', or the GPU's tag such as 'H100', 'H100-PCIe', 'A100', 'L4'.

    The tag comes from the NVML name string of the first visible GPU when NVML answers (the name the
    hardware table's variants are keyed by), else from torch's device name (the same driver string).
    """
    if device_type == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        return "cuda"
    name = torch.cuda.get_device_name(0)
    try:
        from companion.runs.meters import nvml_device_name

        name = nvml_device_name(0) or name
    except Exception:  # no NVML bindings or driver library: torch's name is the same driver string
        pass
    return short_gpu_name(name)


# NVML name strings of boards whose variants differ in clocks, memory and power (hardware.yaml keys).
# The H100 SXM5 reports 'NVIDIA H100 80GB HBM3'; the plain 'H200' is the SXM board.
_VARIANTS = (
    ("H100", "PCIE", "H100-PCIe"),
    ("H100", "NVL", "H100-NVL"),
    ("H200", "NVL", "H200-NVL"),
    ("H100", "", "H100"),
    ("H200", "", "H200"),
)


def short_gpu_name(full: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; 'NVIDIA H100 PCIe' -> 'H100-PCIe'; 'NVIDIA H100 NVL' -> 'H100-NVL';
    'NVIDIA H200' -> 'H200'; 'Tesla V100-SXM2-16GB' -> 'V100'; 'Quadro RTX 8000' -> 'RTX8000'."""
    words = full.replace("NVIDIA", "").replace("Tesla", "").replace("Quadro", "").split()
    if not words:
        return "cuda"
    upper = [w.upper() for w in words]
    for model, variant, tag in _VARIANTS:
        if upper[0].split("-")[0] == model and (
            not variant or variant in upper[1:] or any(variant in w for w in upper[0].split("-")[1:])
        ):
            return tag
    if words[0] in ("RTX", "GeForce") and len(words) > 1:
        return "".join(w for w in words[:3] if w != "GeForce").replace("-", "")
    return words[0].split("-")[0]


def canonical_device_name(name: str) -> str:
    """A device name as the hardware table spells it, whatever the case, spaces or underscores it came with
    ('h100' -> 'H100', 'h100 pcie' -> 'H100-PCIe', 'CPU' -> 'cpu'; a driver string such as 'NVIDIA H100 80GB HBM3'
    -> 'H100'). A name the table does not hold is returned stripped (a user's own tag, checked where it is used)."""
    if not isinstance(name, str):
        return name
    stripped = name.strip()
    by_key = {k.lower(): k for k in _table_names()}
    for candidate in (stripped, re.sub(r"[\s_]+", "-", stripped), short_gpu_name(stripped)):
        if candidate.lower() in by_key:
            return by_key[candidate.lower()]
    return stripped


@lru_cache(maxsize=1)
def _table_names() -> tuple[str, ...]:
    """The hardware table's device names (read here, not through ``energy.hardware``: runs sits below energy)."""
    import yaml

    from companion.paths import RESOURCES_DIR

    return tuple(yaml.safe_load((RESOURCES_DIR / "hardware.yaml").read_text())["devices"])


def host_slug(cpu: str | None) -> str:
    """A CPU model as a short name for grouping results by host: 'Intel(R) Xeon(R) Processor' -> 'intel-xeon',
    'AMD EPYC 7B13 64-Core Processor' -> 'amd-epyc-7b13'; 'unknown-cpu' where nothing was recorded."""
    if not isinstance(cpu, str) or not cpu.strip():
        return "unknown-cpu"
    text = re.sub(r"\((?:R|TM|r|tm)\)", " ", cpu)
    text = re.sub(r"@.*$", " ", text)  # the clock
    text = re.sub(r"\b(?:Processor|CPU|\d+-Core|with Radeon.*)\b", " ", text, flags=re.I)
    words = re.findall(r"[A-Za-z0-9]+", text)
    return "-".join(w.lower() for w in words[:3]) or "unknown-cpu"
