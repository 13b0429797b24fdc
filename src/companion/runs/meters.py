"""How energy is obtained: meters behind one small interface with named windows.

``meter.begin_window(name)`` ... ``meter.end_window(name) -> Measurement``. Every :class:`Measurement` says
which meter produced it (``source``) and whether its energy was read from a hardware counter
(``measured=True``: NVML, RAPL) or computed from a power model (``measured=False``: CodeCarbon's TDP x load
and RAM-size models). The two are never mixed silently: the record keeps both labels.

Implementations:

* :class:`NvmlMeter` -- the GPU's cumulative energy counter (mJ), one meter per rank on its own device.
* :class:`CodeCarbonMeter` -- CodeCarbon's offline tracker; node scope (owned by one rank per node), and it
  says per component (cpu/gpu/ram) whether it read a counter or estimated.
* :class:`NullMeter` -- time only, no energy (ranks that do not own a node meter; ``meter='none'``).
* :class:`ReplayMeter` -- returns measurements recorded earlier by :class:`RecordingMeter`, so real
  measurements become test fixtures.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

# The NVML energy counter advances every ~20-100 ms depending on the board: at a 100 ms tick a window of
# 1 s read at arbitrary times carries up to +-10 % quantisation from its two edges, one of 3 s about +-3 %
# (tests/runs/test_gpu_dry_run.py replays it). Windows on NVML last at least this long, and the runner
# closes them on a counter update, which leaves at most a step's misalignment at each edge.
NVML_MIN_WINDOW_S = 3.0


class MeterError(RuntimeError):
    """A meter cannot be used here; the message says why and what to do instead."""


@dataclass(frozen=True)
class Measurement:
    """One window. Energies in joules, one entry per metered unit (a GPU, or a whole node)."""

    name: str
    time_s: float
    energy_j: tuple[float, ...] | None  # None: this meter measures time only
    units: tuple[str, ...]  # what each energy entry covers, e.g. ("cuda:0",) or ("node:host1",)
    source: str  # e.g. "nvml", "codecarbon[cpu=cpu_load,ram=ram_model]", "replay:nvml"
    measured: bool  # True only when every joule came from a hardware counter
    components: dict = field(default_factory=dict)  # per-component joules and method, where known
    warnings: tuple[str, ...] = ()
    telemetry: dict = field(default_factory=dict)  # device state at the window's end (GPU: temperature_c,
    # sm_clock_mhz, power_limit_w), so throttling shows in the record

    @property
    def total_energy_j(self) -> float | None:
        return None if self.energy_j is None else float(sum(self.energy_j))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Measurement":
        d = dict(d)
        for key in ("energy_j", "units", "warnings"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**d)


class Meter:
    """Base class: times windows; subclasses add energy. ``sync`` runs at both edges of a window."""

    source = "none"
    measured = False
    scope = "none"  # "device", "node" or "none"
    min_window_s = 0.0  # shortest window this meter measures well, seconds (the runner never goes below)
    # True: the energy counter publishes in ticks (NVML: every ~20-100 ms) and the runner closes each window
    # on a counter update (``poll_counter``), so a window's energy spans whole counter intervals
    counter_ticks = False

    def __init__(
        self, sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter
    ):
        self._sync = sync or (lambda: None)
        self._clock = clock
        self._open: dict[str, float] = {}

    def begin_window(self, name: str) -> None:
        if name in self._open:
            raise MeterError(f"window {name!r} is already open")
        self._sync()
        self._begin_energy(name)
        self._open[name] = self._clock()

    def end_window(self, name: str) -> Measurement:
        if name not in self._open:
            raise MeterError(f"window {name!r} was never begun")
        self._sync()
        elapsed = self._clock() - self._open.pop(name)
        return self._end_energy(name, elapsed)

    def discard_window(self, name: str) -> None:
        """Forget an open window without measuring it (the runner stopped before it ended)."""
        self._open.pop(name, None)

    def poll_counter(self) -> float | None:
        """The energy counter's current value (synchronised with the device first); None without a counter."""
        return None

    def describe(self) -> dict:
        return {"source": self.source, "measured": self.measured, "scope": self.scope}

    def close(self) -> None:
        pass

    # hooks
    def _begin_energy(self, name: str) -> None:
        pass

    def _end_energy(self, name: str, elapsed_s: float) -> Measurement:
        return Measurement(name, elapsed_s, None, (), self.source, False)


class NullMeter(Meter):
    """Time only."""


# ----------------------------------------------------------------------------------------------- NVML
def _pynvml():
    """The NVML bindings, initialised; a clear message when the package or the driver library is missing."""
    from companion.runs.optional import require

    pynvml = require("pynvml", "meter='nvml' (the GPU energy counter)", "use meter='none'")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound on machines without a driver
        raise MeterError(f"NVML is not available ({exc}); use meter='codecarbon' or meter='none'") from exc
    return pynvml


def match_nvml_uuid(torch_uuid: str, nvml_uuids: list[str]) -> int:
    """Index of the NVML device whose UUID is torch's; a MeterError when none is (never a guess by index).

    NVML numbers GPUs physically while CUDA_VISIBLE_DEVICES renumbers (and may name by UUID or MIG slice)
    what torch calls ``cuda:<i>``: only the UUID identifies the board.
    """
    want = str(torch_uuid).removeprefix("GPU-").lower()
    for i, nv in enumerate(nvml_uuids):
        if str(nv).removeprefix("GPU-").lower() == want:
            return i
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    raise MeterError(
        f"no NVML device has torch's GPU UUID {torch_uuid} (NVML sees {', '.join(map(str, nvml_uuids)) or 'none'}; "
        f"CUDA_VISIBLE_DEVICES={visible!r}); energy would be read from another GPU. Make CUDA_VISIBLE_DEVICES "
        "name whole GPUs (indices or GPU-UUIDs, not MIG slices), or use meter='none'"
    )


def _nvml_handle(torch_device_index: int):
    """(pynvml, handle, NVML name) of the GPU torch calls ``cuda:<index>``, matched on its UUID."""
    pynvml = _pynvml()
    import torch

    uuid = str(torch.cuda.get_device_properties(torch_device_index).uuid)
    uuids = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        nv = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
        uuids.append(nv.decode() if isinstance(nv, bytes) else nv)
    handle = pynvml.nvmlDeviceGetHandleByIndex(match_nvml_uuid(uuid, uuids))
    name = pynvml.nvmlDeviceGetName(handle)
    return pynvml, handle, name.decode() if isinstance(name, bytes) else name


def nvml_device_name(torch_device_index: int) -> str:
    """NVML's name string of ``cuda:<index>``, e.g. 'NVIDIA H100 80GB HBM3' (the hardware-table variant key)."""
    return _nvml_handle(torch_device_index)[2]


def nvml_energy_counter(torch_device_index: int) -> tuple[Callable[[], float], str]:
    """A reader of the cumulative board energy (mJ) of the GPU torch calls ``cuda:<index>``, and its name."""
    pynvml, handle, name = _nvml_handle(torch_device_index)
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except pynvml.NVMLError as exc:
        raise MeterError(
            f"{name} has no NVML energy counter ({exc}; it needs Volta or newer); use meter='codecarbon'"
        ) from exc
    return (lambda: float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))), name


def nvml_telemetry(torch_device_index: int) -> Callable[[], dict]:
    """A reader of the GPU's state: temperature (deg C), SM clock (MHz), enforced power limit (W).

    Each value is None where the board does not report it; reading takes microseconds and happens after
    the window's closing synchronize, outside the measured time.
    """
    pynvml, handle, _ = _nvml_handle(torch_device_index)
    reads = {
        "temperature_c": lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        "sm_clock_mhz": lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
    }

    def read() -> dict:
        out = {}
        for key, fn in reads.items():
            try:
                out[key] = fn()
            except pynvml.NVMLError:
                out[key] = None
        return out

    return read


class NvmlMeter(Meter):
    """Energy of one GPU from its NVML counter: (counter at end - counter at begin) / 1000 J.

    ``counter`` returns cumulative millijoules; by default the real NVML counter of ``device_index``. A counter
    passed in (a replayed trace, a simulated GPU) is no measurement of this run: its windows say
    ``source="injected:nvml"`` and ``measured=False``.
    ``telemetry`` returns the device state logged with each window (temperature, SM clock, power limit).
    ``close_on_update`` (default): the counter advances in ticks of ~20-100 ms, and a window read at
    arbitrary times misses up to one tick's energy at each edge (+-3 % on a 3 s window at 100 ms); the
    runner therefore ends each window on a counter update (``counter_ticks``), see
    ``companion.runs.train.measure_windows``.
    """

    source = "nvml"
    measured = True
    scope = "device"
    min_window_s = NVML_MIN_WINDOW_S

    def __init__(
        self,
        device_index: int = 0,
        sync=None,
        counter: Callable[[], float] | None = None,
        clock=time.perf_counter,
        telemetry: Callable[[], dict] | None = None,
        close_on_update: bool = True,
    ):
        super().__init__(sync, clock)
        self.counter_ticks = bool(close_on_update)
        if counter is None:
            counter, self.device_name = nvml_energy_counter(device_index)
            telemetry = telemetry or nvml_telemetry(device_index)
        else:
            self.device_name = "unknown"
            self.source, self.measured = "injected:nvml", False
        self._counter = counter
        self._telemetry = telemetry or dict
        self._unit = f"cuda:{device_index}"
        self._start_mj: dict[str, float] = {}

    def poll_counter(self):
        self._sync()
        return self._counter()

    def discard_window(self, name):
        super().discard_window(name)
        self._start_mj.pop(name, None)

    def _begin_energy(self, name):
        self._start_mj[name] = self._counter()

    def _end_energy(self, name, elapsed_s):
        delta_mj = self._counter() - self._start_mj.pop(name)
        if delta_mj < 0:
            raise MeterError(f"NVML energy counter went backwards by {-delta_mj} mJ in window {name!r}")
        warnings = ()
        if elapsed_s < NVML_MIN_WINDOW_S:
            warnings = (
                f"window of {elapsed_s:.3f} s is shorter than the NVML counter resolution (~0.1 s) "
                f"allows to measure well; use windows >= {NVML_MIN_WINDOW_S} s",
            )
        return Measurement(
            name,
            elapsed_s,
            (delta_mj / 1000.0,),
            (self._unit,),
            self.source,
            self.measured,
            {"gpu": {"energy_j": delta_mj / 1000.0, "method": "nvml counter"}},
            warnings,
            self._telemetry(),
        )

    def describe(self):
        return {**super().describe(), "device": self.device_name, "unit": self._unit}


# ----------------------------------------------------------------------------------------- CodeCarbon
_COUNTER_CPU_MODES = {"intel_rapl", "intel_power_gadget", "windows_emi"}


class CodeCarbonMeter(Meter):
    """CodeCarbon's offline tracker with one task per window; node scope.

    Own exactly one per node (local rank 0): every tracker sees the whole machine, so one per rank would
    count the node several times. Whether its energy is measured depends on what CodeCarbon found: RAPL
    for the CPU and NVML for GPUs are counters; its CPU TDP x load model and RAM model are estimates.
    """

    scope = "node"

    def __init__(self, country: str = "USA", sync=None, node: str | None = None, clock=time.perf_counter):
        super().__init__(sync, clock)
        import logging
        import socket

        from companion.runs.optional import require

        OfflineEmissionsTracker = require(
            "codecarbon", "meter='codecarbon' (the CPU energy estimate)", "use meter='none'"
        ).OfflineEmissionsTracker

        logging.getLogger("codecarbon").setLevel(logging.ERROR)

        self._tracker = OfflineEmissionsTracker(
            country_iso_code=country,
            output_methods=[],
            log_level="error",
            measure_power_secs=3600,
            tracking_mode="machine",
            allow_multiple_runs=True,
        )
        # The first task initialises hardware detection (~1-2 s): do it here, outside any measured window.
        self._tracker.start_task("init")
        self._tracker.stop_task()
        self.component_methods = self._component_methods()
        self.measured = all(m["measured"] for m in self.component_methods.values())
        parts = ",".join(f"{k}={v['method']}" for k, v in sorted(self.component_methods.items()))
        self.source = f"codecarbon[{parts}]"
        self._unit = f"node:{node or socket.gethostname()}"
        self._task_seq = 0

    def _component_methods(self) -> dict:
        out = {}
        for hw in self._tracker._hardware:
            kind = type(hw).__name__
            if kind == "CPU":
                mode = getattr(hw, "_mode", "unknown")
                out["cpu"] = {"method": mode, "measured": mode in _COUNTER_CPU_MODES}
            elif kind == "GPU":
                out["gpu"] = {"method": "nvml", "measured": True}
            elif kind == "RAM":
                out["ram"] = {"method": "ram_model", "measured": False}
            else:
                out[kind.lower()] = {"method": repr(hw), "measured": False}
        return out

    def _begin_energy(self, name):
        # CodeCarbon renames a task whose name it has seen before and then loses track of it: give every
        # window a unique task name.
        self._task_seq += 1
        self._task = f"{name}#{self._task_seq}"
        self._tracker.start_task(self._task)

    def _end_energy(self, name, elapsed_s):
        data = self._tracker.stop_task(self._task)
        kwh_to_j = 3.6e6
        comps = {}
        for comp, attr in (("cpu", "cpu_energy"), ("gpu", "gpu_energy"), ("ram", "ram_energy")):
            if comp in self.component_methods:
                comps[comp] = {
                    "energy_j": float(getattr(data, attr)) * kwh_to_j,
                    "method": self.component_methods[comp]["method"],
                    "measured": self.component_methods[comp]["measured"],
                }
        total = float(data.energy_consumed) * kwh_to_j
        return Measurement(name, elapsed_s, (total,), (self._unit,), self.source, self.measured, comps)

    def describe(self):
        return {**super().describe(), "components": self.component_methods, "unit": self._unit}

    def close(self):
        try:
            self._tracker.stop()
        except Exception:
            pass


# ------------------------------------------------------------------------------------ record & replay
class RecordingMeter(Meter):
    """Wraps a meter and appends every measurement it returns to a JSONL log (for replay)."""

    def __init__(self, inner: Meter, log_path: str | Path):
        self.inner, self.log_path = inner, Path(log_path)
        self.source, self.measured, self.scope = inner.source, inner.measured, inner.scope
        self.min_window_s = inner.min_window_s
        self.counter_ticks = inner.counter_ticks
        self.log_path.parent.mkdir(parents=True, exist_ok=True)

    def begin_window(self, name):
        self.inner.begin_window(name)

    def discard_window(self, name):
        self.inner.discard_window(name)

    def poll_counter(self):
        return self.inner.poll_counter()

    def end_window(self, name):
        m = self.inner.end_window(name)
        with self.log_path.open("a") as f:
            f.write(json.dumps(m.to_json()) + "\n")
        return m

    def describe(self):
        return {**self.inner.describe(), "recorded_to": str(self.log_path)}

    def close(self):
        self.inner.close()


class ReplayMeter(Meter):
    """Plays back a recorded log: the n-th ``end_window`` returns the n-th recorded measurement.

    Window names must match the recording, so a replay exercises the caller's exact sequence of windows.
    The source is prefixed with ``replay:`` and keeps the original measured/estimated label.
    """

    def __init__(self, log_path: str | Path):
        lines = Path(log_path).read_text().splitlines()
        self._queue = [Measurement.from_json(json.loads(line)) for line in lines if line.strip()]
        if not self._queue:
            raise MeterError(f"replay log {log_path} holds no measurements")
        first = self._queue[0]
        self.source, self.measured = f"replay:{first.source}", first.measured
        self.scope = "device" if first.units and first.units[0].startswith("cuda") else "node"
        self.min_window_s = NVML_MIN_WINDOW_S if "nvml" in first.source.split(":") else 0.0
        self._open: set[str] = set()

    def begin_window(self, name):
        if name in self._open:
            raise MeterError(f"window {name!r} is already open")
        self._open.add(name)

    def discard_window(self, name):
        self._open.discard(name)

    def end_window(self, name):
        if name not in self._open:
            raise MeterError(f"window {name!r} was never begun")
        self._open.discard(name)
        if not self._queue:
            raise MeterError("replay log exhausted: the caller measured more windows than were recorded")
        m = self._queue.pop(0)
        if m.name != name:
            raise MeterError(f"replay expected window {m.name!r} but the caller ended {name!r}")
        return Measurement(
            m.name,
            m.time_s,
            m.energy_j,
            m.units,
            f"replay:{m.source}",
            m.measured,
            m.components,
            m.warnings,
            m.telemetry,
        )

    @property
    def remaining(self) -> int:
        return len(self._queue)


class CounterReplay:
    """A cumulative energy counter (mJ) recorded as samples and played back against a clock.

    The value at time ``t`` is the last sample at or before ``t``: the counter moves only at its own ticks
    (every ~20-100 ms on NVML), which is what quantises short windows. A trace is JSONL, one
    ``{"t_s": seconds, "energy_mj": millijoules}`` per change of the counter, as written by
    ``benchmarks/record_meter_log.py --counter-trace`` on a GPU; an :class:`NvmlMeter` built with
    ``counter=replay.read_mj, clock=replay.clock`` then measures exactly what the hardware showed.
    """

    def __init__(self, samples: list[tuple[float, float]], clock: Callable[[], float]):
        if len(samples) < 2:
            raise MeterError("a counter trace needs at least two samples")
        self.t_s = [float(t) for t, _ in samples]
        self.energy_mj = [float(e) for _, e in samples]
        if any(b < a for a, b in zip(self.t_s, self.t_s[1:])):
            raise MeterError("counter trace samples must be in time order")
        self.clock = clock

    @classmethod
    def from_jsonl(cls, path: str | Path, clock: Callable[[], float]) -> "CounterReplay":
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        return cls([(r["t_s"], r["energy_mj"]) for r in rows], clock)

    @classmethod
    def synthetic(
        cls,
        seconds: float,
        seed: int,
        clock: Callable[[], float],
        power_w: float = 450.0,
        tick_s: float = 0.1,
    ) -> "CounterReplay":
        """A counter that publishes cumulative mJ every ``tick_s`` (random phase), for tests and the protocol
        benchmark: power with 5 % noise per 5 ms and a 2 % drift over 7 s, integrated on a 5 ms grid."""
        import math
        import random

        rng = random.Random(seed)
        dt, phase = 0.005, rng.uniform(0, tick_s)
        e, samples, next_tick = 0.0, [(0.0, 0.0)], phase
        for i in range(int(seconds / dt)):
            t = i * dt
            p = power_w * (1 + 0.02 * math.sin(2 * math.pi * t / 7.0)) * (1 + 0.05 * rng.gauss(0, 1))
            e += p * dt * 1000.0
            if t + dt >= next_tick:
                samples.append((round(next_tick, 6), e))
                next_tick += tick_s
        return cls(samples, clock)

    def read_mj(self) -> float:
        import bisect

        t = self.clock()
        if t < self.t_s[0] or t > self.t_s[-1]:
            raise MeterError(
                f"replayed counter read at t={t:.3f} s, outside its trace "
                f"[{self.t_s[0]:.3f}, {self.t_s[-1]:.3f}] s"
            )
        return self.energy_mj[bisect.bisect_right(self.t_s, t) - 1]

    def tick_s(self) -> float:
        """Median interval between changes of the counter, seconds."""
        from statistics import median

        changes = [t for t, a, b in zip(self.t_s[1:], self.energy_mj, self.energy_mj[1:]) if b != a]
        return median(b - a for a, b in zip(changes, changes[1:]))

    def mean_power_w(self, t0: float, t1: float) -> float:
        """Counter-average power between two sample times (W)."""
        import bisect

        i, j = bisect.bisect_right(self.t_s, t0) - 1, bisect.bisect_right(self.t_s, t1) - 1
        return (self.energy_mj[j] - self.energy_mj[i]) / 1000.0 / (self.t_s[j] - self.t_s[i])


def counter_mean_power(
    read_mj: Callable[[], float], seconds: float, clock=time.perf_counter, sleep=time.sleep
) -> dict:
    """Mean power over a window from a cumulative millijoule counter, (E_end - E_start) / t: an average of the
    counter, never a single power sample (NVML's power readings cover only part of the time on A100/H100)."""
    e0, t0 = read_mj(), clock()
    sleep(seconds)
    e1, t1 = read_mj(), clock()
    energy_j = (e1 - e0) / 1000.0
    return {"energy_j": energy_j, "time_s": t1 - t0, "mean_power_w": energy_j / (t1 - t0)}


# ------------------------------------------------------------------------------------------- factory
def make_meter(
    kind: str, device_type: str, device_index: int, owns_node: bool, country: str, sync=None
) -> Meter:
    """The meter a rank uses for a run.

    ``auto``: NVML on CUDA (one per rank, its own GPU), CodeCarbon on CPU (one per node). A rank that does
    not own the node's CodeCarbon meter times windows with a NullMeter.
    """
    if kind == "auto":
        kind = "nvml" if device_type == "cuda" else "codecarbon"
    if kind == "nvml":
        if device_type != "cuda":
            raise MeterError("meter='nvml' needs device='cuda'; on CPU use meter='codecarbon' or 'none'")
        return NvmlMeter(device_index, sync=sync)
    if kind == "codecarbon":
        return CodeCarbonMeter(country, sync=sync) if owns_node else NullMeter(sync)
    return NullMeter(sync)
