"""The device table: peak FLOP/s per precision, bandwidth, power. Peak numbers come from here only."""

from __future__ import annotations

import time
from functools import lru_cache

import yaml

from companion.errors import ConfigError
from companion.paths import RESOURCES_DIR


@lru_cache(maxsize=1)
def device_table() -> dict:
    return yaml.safe_load((RESOURCES_DIR / "hardware.yaml").read_text())["devices"]


@lru_cache(maxsize=1)
def priors() -> dict:
    """The prior tier's efficiency and power priors (``priors`` in hardware.yaml), with their sources."""
    return yaml.safe_load((RESOURCES_DIR / "hardware.yaml").read_text()).get("priors", {})


def gpu_priors(device: str) -> dict:
    """The GPU priors (``priors.gpu``) with ``device``'s own (its table entry's ``priors``) over them; the generic
    ones alone for a board the table does not hold."""
    try:
        board = device_spec(device).get("priors") or {}
    except ConfigError:
        board = {}
    return {**priors().get("gpu", {}), **board}


def device_spec(device: str) -> dict:
    """The table entry of a device tag ('cpu', 'H100', ...); a clear error for unknown devices."""
    from companion.runs.provenance import canonical_device_name

    table = device_table()
    device = canonical_device_name(device)
    if device not in table:
        raise ConfigError(f"device {device!r} is not in the hardware table; use one of {', '.join(table)}")
    return table[device]


def peak_flops_per_s(device: str, precision: str, measured: dict | None = None) -> float:
    """Dense peak FLOP/s of a device at a precision. bf16 falls back to fp16 tensor cores where a device
    has no bf16 (V100, RTX 8000). For 'measure' entries the caller passes the measured roofs."""
    spec = device_spec(device)
    value = spec.get(f"{precision}_tflops")
    if value is None and precision == "bf16":
        value = spec.get("fp16_tflops")
    if value == "measure":
        if not measured:
            raise ConfigError(f"device {device!r} has measured roofs; pass the measurement")
        return measured["peak_flops_per_s"]
    if value is None:
        raise ConfigError(f"device {device!r} has no {precision} peak in the hardware table")
    return float(value) * 1e12


def bandwidth_bytes_per_s(device: str, measured: dict | None = None) -> float:
    value = device_spec(device)["bandwidth_tbs"]
    if value == "measure":
        if not measured:
            raise ConfigError(f"device {device!r} has measured roofs; pass the measurement")
        return measured["bandwidth_bytes_per_s"]
    return float(value) * 1e12


def measure_cpu_roofs(seconds: float = 1.0) -> dict:
    """This CPU's attainable fp32 matmul FLOP/s and copy bandwidth, measured (best of several tries)."""
    import torch

    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    best_flops = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        a @ b
        best_flops = max(best_flops, 2 * n**3 / (time.perf_counter() - t0))
    src = torch.empty(64 * 2**20 // 4)  # 64 MiB, far beyond the caches
    dst = torch.empty_like(src)
    best_bw = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        dst.copy_(src)
        best_bw = max(best_bw, 2 * src.numel() * 4 / (time.perf_counter() - t0))
    return {
        "peak_flops_per_s": best_flops,
        "bandwidth_bytes_per_s": best_bw,
        "method": "best of repeated 1024^3 fp32 matmuls and 64 MiB copies",
        "threads": torch.get_num_threads(),
    }


def memory_bytes(device: str) -> float:
    """Memory of one device in bytes: the table's size for a GPU (its datasheet GB as 10^9 bytes), this node's
    physical memory for 'cpu' (its ranks share it), or the memory limit of the control group the process runs in
    (a container's, a SLURM job's --mem) where that is lower. A GPU with no size in the table raises ConfigError."""
    value = device_spec(device).get("memory_gb")
    if value == "measure":
        import os

        physical = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        return min(physical, _cgroup_limit_bytes() or physical)
    if value is None:
        raise ConfigError(
            f"device {device!r} has no memory_gb in the hardware table; add its size to "
            "energy/resources/hardware.yaml"
        )
    return float(value) * 1e9


def _cgroup_limit_bytes() -> float | None:
    """The lowest memory limit of this process's control group and the groups above it (cgroup v2 ``memory.max``,
    v1 ``memory.limit_in_bytes``), read from where ``/proc/self/cgroup`` places it; None where none is set."""
    from pathlib import Path

    root = Path("/sys/fs/cgroup")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    folders = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one unified hierarchy
            folders.append((root, path, "memory.max"))
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            folders.append((root / "memory", path, "memory.limit_in_bytes"))
    limits = []
    for base, path, name in folders:
        parts = [p for p in path.strip("/").split("/") if p]
        for depth in range(len(parts), -1, -1):  # the process's group, then each one above it
            try:
                text = (base.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 2**60:  # 'max', or v1's 'unlimited' (a number near 2**63)
                limits.append(float(text))
    return min(limits) if limits else None
