"""Calibration files (data/devices/<name>.json): read, checked and turned into a device's roofs, in one place.

``companion calibrate`` writes them; ``predict``, ``plan``, the stages and the book read them only through
``load_calibration``. A file is refused with one line naming it, the field and the fix when it cannot be read
(truncated, a missing key, a newer format, a device other than the one asked). A file that reads but holds an
implausible quantity (``check_calibration``: timings that do not grow with size, a fitted roof above what was
measured or above the datasheet, a benchmark too small for the device, a power, launch cost or collective latency
that is not finite and positive)
is used with that quantity flagged: the datasheet's value (GPUs) or, on a CPU, what ``CPU_FALLBACKS`` names (a
roof measured now, the copy bandwidth, the model's default) takes its place, and the answer says so
(``Calibration.warnings``; ``DeviceRoofs.fallbacks``).
"""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from companion.errors import ConfigError

from companion.runs.provenance import cpu_model, host_slug  # noqa: E402
from companion.runs.records import CALIBRATION_FORMAT, dtype_precision  # noqa: E402

# The checks' thresholds.
ROOF_OVER_BEST = 1.25  # the fitted GEMM roof at a measured shape, at most this times the best rate measured
PEAK_OVER_DATASHEET = (
    1.1  # a fitted roof or bandwidth at most this times the datasheet's, where it has the board
)
MIN_SIZE_RANK_CORRELATION = 0.8  # Spearman correlation of GEMM time with FLOPs: timings grow with size
PASS_SPREAD_MAX = 1.5  # two passes of one benchmark differ by at most this (median ratio of their timings)
CPU_PEAK_PER_CORE = 400e9  # FLOP/s: 2 AVX-512 FMA units x 16 fp32 lanes x 2 FLOP x 6 GHz, above any x86 core
RATE_OVER_COPY = 1.5  # element-wise and optimizer rates, at most this times a copy's (``_check_optimizer``)
MAX_LAYER_INCREMENT_RATIO = 1.5  # the host probe's per-layer increments: a busy spell moves one by more
# a GEMM on every core at least this times as fast as on one: slower, a core was busy while it ran (every stored
# calibration of both hosts timed 1.7-2.2x on two threads; the one that timed 1.00x put runs 23-40 % off)
MIN_GEMM_THREAD_SPEEDUP = 1.1
HALF_DIM_BOUND = 0.99e5  # the GEMM fit's upper bound on k0: a fit there is launch-bound, not a roof
# the fitted GEMM roof at the measured shapes, at least this times the best rate measured (0.92-1.19 in every
# calibration shipped): far below it, the roof is a unit slip (GFLOP/s written as FLOP/s) or a fit gone astray
MIN_FIT_OVER_BEST = 0.5
MIN_PEAK_FLOPS_PER_S = 1e8  # below any device's GEMM roof (a unit slip)
MAX_LAUNCH_S = 1e-2  # an operator's launch cost above this times more than a launch (or is in another unit)
MAX_COLLECTIVE_ALPHA_S = 1.0  # a collective's latency per hop (0.2-1.6 ms on a shared 2-core node)
# what a CPU without a usable measurement of them is priced with: the launch cost, a collective's latency per hop
# and its bandwidth per rank (a calibration's flagged quantity, and ``load_device_roofs`` without a calibration)
CPU_DEFAULT_COSTS = {"launch_s": 5e-6, "collective_alpha_s": 1e-4, "collective_beta_bytes_per_s": 1e9}
# On a GPU a benchmark must run at BERT sizes, or it times kernel launches (about 10 us each)
GPU_MIN_GEMM_DIM = 8192  # the largest GEMM dimension
GPU_MIN_STREAM_BYTES = 100e6  # element-wise traffic, and the optimizer's fp32 weights
GPU_MIN_SCORES = 32 * 12 * 128**2  # attention score elements: BERT-base at batch 32, sequence 128
QUANTITIES = (
    "gemm",
    "bandwidth",
    "elementwise",
    "optimizer",
    "attention",
    "op_counts",
    "launch",
    "collectives",
    "power",
    "thread_scaling",
)
REQUIRED = (
    ("device_name",),
    ("device",),
    ("gemm", "peak_flops_per_s"),
    ("gemm", "half_dim"),
    ("bandwidth", "bandwidth_bytes_per_s"),
    ("launch", "launch_s"),
)


# the calibration's quantities (the checks' names) in words
QUANTITY_WORDS = {
    "gemm": "matrix-multiply roof",
    "attention": "attention cost",
    "bandwidth": "copy bandwidth",
    "elementwise": "element-wise rate",
    "optimizer": "optimizer rate",
    "op_counts": "operator counts",
    "power": "power",
    "launch": "launch cost",
    "collectives": "collective costs",
    "thread_scaling": "thread scaling",
}


# what replaces a CPU calibration's flagged quantity, in words (``_fallback_values``); a quantity not named is used
# as measured
CPU_FALLBACKS = {
    "gemm": "a roof measured when the analysis ran",
    "bandwidth": "a roof measured when the analysis ran",
    "elementwise": "the copy bandwidth",
    "optimizer": "the copy bandwidth",
    "attention": "the attention GEMMs' roofline",
    "op_counts": "the launch benchmark's cost per launch (else the model's default) and the model's default "
    "operator counts",
    "launch": "the model's default (5 us)",
    "collectives": "the other group sizes' costs (else the model's default latency and bandwidth, 100 us per hop "
    "and 1 GB/s)",
    "thread_scaling": "every core adding its share (exponent 1, the model's default)",
}


class CalibrationError(ConfigError):
    """A calibration file that cannot be used at all."""


def _fix(path: Path, rec: dict | None = None) -> str:
    device = (rec or {}).get("device") or ("cpu" if path.stem == "cpu" else "cuda")
    return f"re-run `companion calibrate --device {device} --out {path}`"


def read_calibration(path: Path) -> dict:
    """The record of a calibration file, its format and required keys checked; ``CalibrationError`` names the
    file, the field and the fix."""
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationError(f"no calibration file {path}; {_fix(path)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CalibrationError(
            f"calibration file {path} is not valid JSON (truncated or corrupt: {exc}); {_fix(path)}"
        ) from None
    if not isinstance(rec, dict):
        raise CalibrationError(f"calibration file {path} holds no JSON object; {_fix(path)}")
    fmt = rec.get("format", 1)
    if not isinstance(fmt, int) or fmt > CALIBRATION_FORMAT:
        raise CalibrationError(
            f"calibration file {path} has format {fmt!r}, newer than this companion reads "
            f"({CALIBRATION_FORMAT}); update the companion or {_fix(path, rec)}"
        )
    for keys in REQUIRED:
        part = rec
        for k in keys:
            part = part.get(k) if isinstance(part, dict) else None
        if part is None:
            raise CalibrationError(f"calibration file {path} lacks {'.'.join(keys)}; {_fix(path, rec)}")
    return rec


# ------------------------------------------------------------------------------------------------ checks
def _positive(value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _spearman(x, y) -> float:
    import pandas as pd

    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()  # ties share their mean rank
    return (
        float(np.corrcoef(rx, ry)[0, 1]) if len(x) > 2 and np.std(rx) > 0 and np.std(ry) > 0 else float("nan")
    )


def _stuck_share(flops, times) -> float:
    """The share of timings within 5 % of their median while the FLOPs they time span more than 10x: a timer
    or a machine stuck at one value, whatever the work."""
    near = np.abs(times / np.median(times) - 1) < 0.05
    return float(near.mean()) if near.sum() > 1 and flops[near].max() > 10 * flops[near].min() else 0.0


def _datasheet(rec: dict) -> dict | None:
    """The hardware table's entry of the calibrated board (GPUs), with its peak at the calibration's dtype."""
    from companion.energy import hardware

    if rec.get("device") != "cuda":
        return None
    try:
        spec = hardware.device_spec(rec["device_name"])
        precision = dtype_precision(rec.get("dtype")) or "bf16"
        return {
            "peak": hardware.peak_flops_per_s(rec["device_name"], precision),
            "bandwidth": hardware.bandwidth_bytes_per_s(rec["device_name"]),
            "tdp_w": spec.get("tdp_w"),
        }
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def check_gemm(rec: dict) -> list[str]:
    gemm, sheet = rec.get("gemm") or {}, _datasheet(rec)
    peak, k0, rows = gemm.get("peak_flops_per_s"), gemm.get("half_dim"), gemm.get("shapes") or []
    if not _positive(peak) or not _positive(k0):
        return [f"GEMM roof {peak!r} / half-dimension {k0!r} not finite and positive"]
    out = []
    times = np.array([r.get("time_s", np.nan) for r in rows], float)
    if rows and np.all(np.isfinite(times) & (times > 0)):
        flops = np.array([2.0 * r["m"] * r["n"] * r["k"] for r in rows])
        best = float(np.max(flops / times))
        x = np.array([1 / r["m"] + 1 / r["n"] + 1 / r["k"] for r in rows])
        rho, stuck = _spearman(flops, times), _stuck_share(flops, times)
        if stuck >= 0.5:
            out.append(
                f"{stuck:.0%} of the GEMM timings sit near {np.median(times) * 1e3:.3g} ms whatever their "
                "size: a busy machine or a stuck timer"
            )
        elif rho < MIN_SIZE_RANK_CORRELATION:
            out.append(
                f"GEMM timings do not grow with size (rank correlation {rho:.2f} < "
                f"{MIN_SIZE_RANK_CORRELATION}): a busy machine, or timings bound by kernel launches"
            )
        fitted = float(np.max(peak / (1 + k0 * x)))
        if fitted > ROOF_OVER_BEST * best:
            out.append(
                f"fitted GEMM roof at the measured shapes {fitted:.3g} FLOP/s is {fitted / best:.1f}x the best "
                f"rate measured ({best:.3g})"
            )
        elif fitted < MIN_FIT_OVER_BEST * best:
            out.append(
                f"fitted GEMM roof at the measured shapes {fitted:.3g} FLOP/s is {fitted / best:.2g}x the best "
                f"rate measured ({best:.3g}): a unit slip, or a fit gone astray"
            )
        if rec.get("device") == "cuda" and max(max(r["m"], r["n"], r["k"]) for r in rows) < GPU_MIN_GEMM_DIM:
            out.append(
                f"GEMMs up to {max(max(r['m'], r['n'], r['k']) for r in rows)} per dimension time kernel "
                f"launches on a GPU, not its roof (needs {GPU_MIN_GEMM_DIM})"
            )
    elif rows:
        out.append("GEMM timings not finite and positive")
    if peak < MIN_PEAK_FLOPS_PER_S:
        out.append(f"GEMM roof {peak:.3g} FLOP/s is below any device's (a unit slip? the file holds FLOP/s)")
    if k0 >= HALF_DIM_BOUND:
        out.append(f"GEMM half-dimension k0 = {k0:.3g} sits at its fit's bound: launch-bound timings")
    if sheet and peak > PEAK_OVER_DATASHEET * sheet["peak"]:
        out.append(f"fitted GEMM roof {peak:.3g} FLOP/s exceeds the datasheet's {sheet['peak']:.3g}")
    if rec.get("device") == "cpu":
        prov = rec.get("provenance") or {}
        cores = int(prov.get("torch_threads") or prov.get("cpu_count") or os.cpu_count() or 1)
        if peak > CPU_PEAK_PER_CORE * cores:
            out.append(
                f"fitted GEMM roof {peak:.3g} FLOP/s exceeds what {cores} CPU core(s) can do "
                f"({CPU_PEAK_PER_CORE * cores:.3g})"
            )
    spread = gemm.get("pass_spread")
    if _positive(spread) and spread > PASS_SPREAD_MAX:
        out.append(f"GEMM passes disagree ({spread:.2f}x > {PASS_SPREAD_MAX}x)")
    return out


def check_bandwidth(rec: dict) -> list[str]:
    bw, sheet = (rec.get("bandwidth") or {}).get("bandwidth_bytes_per_s"), _datasheet(rec)
    if not _positive(bw):
        return [f"memory bandwidth {bw!r} not finite and positive"]
    if sheet and bw > PEAK_OVER_DATASHEET * sheet["bandwidth"]:
        return [f"memory bandwidth {bw:.3g} B/s exceeds the datasheet's {sheet['bandwidth']:.3g}"]
    if bw < 1e8:
        return [f"memory bandwidth {bw:.3g} B/s is below any device's (a unit slip?)"]
    return []


def _check_rate(rec: dict, key: str, label: str, size_bytes, rate=None, copy=None) -> list[str]:
    """``rate``: the rate as the model reads it, where that differs from the file's (``opmodel.elementwise_rate``);
    ``copy``: (bytes/s, its words), the copy it is held to, where not the bandwidth benchmark's."""
    part = rec.get(key)
    if not part:
        return []
    rate = part.get("bytes_per_s") if rate is None else rate
    bw, words = copy or ((rec.get("bandwidth") or {}).get("bandwidth_bytes_per_s"), "the copy bandwidth")
    if not _positive(rate):
        return [f"{label} rate {rate!r} not finite and positive"]
    out = []
    if _positive(bw) and rate > RATE_OVER_COPY * bw:
        out.append(f"{label} rate {rate:.3g} B/s exceeds {RATE_OVER_COPY}x {words} ({bw:.3g})")
    if rec.get("device") == "cuda" and size_bytes is not None and size_bytes < GPU_MIN_STREAM_BYTES:
        out.append(
            f"{label} benchmark over {size_bytes / 1e6:.0f} MB times kernel launches on a GPU "
            f"(needs {GPU_MIN_STREAM_BYTES / 1e6:.0f} MB)"
        )
    return out


# k0 where a CPU's GEMM roof is measured by the analysis (load_device_roofs' too)
FALLBACK_GEMM_HALF_DIM = 32.0


def _check_optimizer(rec: dict) -> list[str]:
    """The optimizer's rate against the copy bandwidth or, where the benchmark timed a copy over a working set of
    the step's size, the bytes its kernel moves against that copy (a CPU's cache may hold the one and not the
    bandwidth benchmark's buffers: the fused kernel runs faster than those)."""
    opt = rec.get("optimizer") or {}
    if "bytes_per_s" in opt and not _positive(opt["bytes_per_s"]):  # the rate the model reads
        return [f"optimizer rate {opt['bytes_per_s']!r} not finite and positive"]
    size = 4 * opt["parameters"] if _positive(opt.get("parameters")) else None
    moved, copy = opt.get("moved_bytes_per_s"), opt.get("copy_bytes_per_s")
    if _positive(moved) and _positive(copy):
        return _check_rate(
            rec,
            "optimizer",
            "optimizer moved-bytes",
            size,
            rate=moved,
            copy=(copy, "a copy of its working set"),
        )
    return _check_rate(rec, "optimizer", "optimizer", size)


def check_attention(rec: dict) -> list[str]:
    rows = rec.get("attention") or []
    if not rows:
        return []
    if not all(_positive(r.get("fwd_bwd_s")) for r in rows):
        return ["attention timings not finite and positive"]
    scores = max(r["batch"] * r["heads"] * r["seq"] ** 2 for r in rows)
    if rec.get("device") == "cuda" and scores < GPU_MIN_SCORES:
        return [
            f"attention shapes up to {scores:.3g} score elements time kernel launches on a GPU "
            f"(needs BERT-base's {GPU_MIN_SCORES:.3g})"
        ]
    return []


def _valid_launch_s(value) -> bool:
    return _positive(value) and value < MAX_LAUNCH_S


def check_op_counts(rec: dict) -> list[str]:
    ops = rec.get("op_counts")
    if not ops:
        return []
    out = []
    if not (
        _positive(ops.get("per_layer"))
        and isinstance(ops.get("per_step"), (int, float))
        and ops["per_step"] >= 0
    ):
        out.append(
            f"operator counts per layer {ops.get('per_layer')!r} / per step {ops.get('per_step')!r} invalid"
        )
    cost = ops.get("per_op_s")
    if cost is not None and not _valid_launch_s(cost):
        out.append(f"cost per operator {cost!r} s not within (0, {MAX_LAUNCH_S * 1e3:g} ms)")
    # the cost is a slope over depths: each added layer must cost about the same (older files have no increments)
    inc = [x for x in ops.get("layer_increments_s") or [] if isinstance(x, (int, float))]
    if len(inc) >= 2 and (min(inc) <= 0 or max(inc) / min(inc) > MAX_LAYER_INCREMENT_RATIO):
        shown = ", ".join(f"{x * 1e3:.3g}" for x in inc)
        out.append(
            f"added layers cost {shown} ms each, more than {MAX_LAYER_INCREMENT_RATIO}x apart: the step is not "
            "linear in depth (a busy host, or a probe that is not host-bound)"
        )
    return out


def check_launch(rec: dict) -> list[str]:
    """The launch benchmark's cost per operator launch, where the model reads it: a file whose operator counts
    carry a cost per operator of their own is priced by that one (a flagged ``op_counts`` falls back to this
    cost only where it is valid, ``_fallback_values``)."""
    if _valid_launch_s((rec.get("op_counts") or {}).get("per_op_s")):
        return []
    cost = (rec.get("launch") or {}).get("launch_s")
    if _valid_launch_s(cost):
        return []
    return [f"launch cost {cost!r} s not within (0, {MAX_LAUNCH_S * 1e3:g} ms)"]


def _collective_problems(world: str, c) -> list[str]:
    """One group size's latency per hop and bandwidth per rank as ``fit_alpha_beta`` fits them: a latency in [0,
    1 s) (non-negative least squares may give 0) and a bandwidth that is positive or absent or infinite (timings
    that did not grow with the bytes: the model reads no bound)."""
    c = c if isinstance(c, dict) else {}
    alpha, beta = c.get("alpha_s"), c.get("beta_bytes_per_s", math.inf)
    out = []
    if not (_positive(alpha) or alpha == 0) or isinstance(alpha, bool) or not alpha < MAX_COLLECTIVE_ALPHA_S:
        out.append(
            f"collective latency over {world} ranks {alpha!r} s not within [0, {MAX_COLLECTIVE_ALPHA_S:g} s)"
        )
    if not (_positive(beta) or (isinstance(beta, float) and beta == math.inf)):
        out.append(f"collective bandwidth over {world} ranks {beta!r} B/s not positive")
    return out


def check_collectives(rec: dict) -> list[str]:
    """Each group size's collective costs (``_collective_problems``); a flagged one is left out of the roofs and
    the others kept (``_fallback_values``)."""
    return [
        p
        for world, c in sorted((rec.get("collectives") or {}).items())
        for p in _collective_problems(world, c)
    ]


def check_power(rec: dict) -> list[str]:
    power = rec.get("power") or {}
    idle, loaded = power.get("idle_w"), power.get("loaded_w")
    if idle is None and loaded is None:
        return []
    if not (_positive(idle) and _positive(loaded)):
        return [f"power idle {idle!r} W / loaded {loaded!r} W not finite and positive"]
    out = []
    if loaded < idle:
        out.append(f"loaded power {loaded:.4g} W below idle {idle:.4g} W")
    sheet = _datasheet(rec)
    if sheet and sheet.get("tdp_w") and loaded > PEAK_OVER_DATASHEET * sheet["tdp_w"]:
        out.append(f"loaded power {loaded:.4g} W exceeds the board's {sheet['tdp_w']} W limit")
    if loaded > 1e4:
        out.append(f"loaded power {loaded:.4g} W is beyond one device's (a unit slip?)")
    return out


def check_thread_scaling(rec: dict) -> list[str]:
    """A CPU's speed-up on every core over one (``thread_scaling``), read by the operator model as the exponent of
    a rank's share of the node: a GEMM no faster on every core than on one timed a node with a busy core."""
    ts = rec.get("thread_scaling") or {}
    threads, gemm, exponent = ts.get("threads"), ts.get("gemm_speedup"), ts.get("exponent")
    if exponent is not None and not (isinstance(exponent, (int, float)) and 0 <= exponent <= 1.5):
        return [f"thread exponent {exponent!r} not a number in [0, 1.5] (speed-up = threads ** exponent)"]
    if not (isinstance(threads, int) and threads > 1) or gemm is None:
        return []
    if not _positive(gemm):
        return [f"GEMM speed-up {gemm!r} not finite and positive"]
    if gemm < MIN_GEMM_THREAD_SPEEDUP:
        return [
            f"a GEMM on {threads} threads ran {gemm:.2f}x as fast as on one (under {MIN_GEMM_THREAD_SPEEDUP}x): a "
            "core was busy while it ran"
        ]
    return []


def check_calibration(rec: dict) -> dict[str, list[str]]:
    """{quantity: problems} for every quantity of ``QUANTITIES`` that fails its checks (empty: all pass)."""
    from companion.energy import opmodel

    ew = rec.get("elementwise") or {}
    found = {
        "gemm": check_gemm(rec),
        "bandwidth": check_bandwidth(rec),
        "elementwise": _check_rate(
            rec,
            "elementwise",
            "element-wise",
            ew.get("bytes"),
            opmodel.elementwise_rate(ew, rec.get("dtype")),
        ),
        "optimizer": _check_optimizer(rec),
        "attention": check_attention(rec),
        "op_counts": check_op_counts(rec),
        "launch": check_launch(rec),
        "collectives": check_collectives(rec),
        "power": check_power(rec),
        "thread_scaling": check_thread_scaling(rec),
    }
    return {k: v for k, v in found.items() if v}


# ------------------------------------------------------------------------------------------------ hosts
def this_host() -> dict:
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count(), "cpu_model": cpu_model()}


def host_words(h: dict) -> str:
    return f"{h.get('cpu_model') or 'an unnamed CPU'}, {h.get('cpu_count')} cores, host {h.get('hostname')!r}"


def other_host(rec: dict, here: dict | None = None) -> str | None:
    """Why a CPU calibration describes another machine than this one (None where it does not): its CPU model
    or its core count differ (host names of virtual machines repeat, so they are named, not compared)."""
    prov = rec.get("provenance") or {}
    here = here or this_host()
    theirs = {
        "hostname": prov.get("hostname"),
        "cpu_count": prov.get("cpu_count"),
        "cpu_model": prov.get("cpu_model"),
    }
    differ = theirs["cpu_count"] not in (None, here["cpu_count"]) or (
        theirs["cpu_model"] and here["cpu_model"] and theirs["cpu_model"] != here["cpu_model"]
    )
    return f"measured on {host_words(theirs)}; this is {host_words(here)}" if differ else None


# ------------------------------------------------------------------------------------------------ loading
@dataclass
class Calibration:
    """A checked calibration: its record, where it came from, what failed its checks and the roofs to use."""

    path: Path
    record: dict
    problems: dict = field(default_factory=dict)  # {quantity: [problem, ...]} (``check_calibration``)
    warnings: list = field(default_factory=list)  # one line each: flagged quantities, another host
    roofs: object = None  # opmodel.DeviceRoofs, with the flagged quantities replaced


def names_a_gpu(name: str) -> bool:
    """Whether ``name`` is a GPU of the hardware table (its tag, in any case): no CPU calibration may be filed
    under it."""
    from companion.energy import hardware

    try:
        return hardware.device_spec(name).get("bandwidth_tbs") != "measure"
    except ConfigError:
        return any(
            name.lower() == d.lower()
            for d, spec in hardware.device_table().items()
            if spec.get("bandwidth_tbs") != "measure"
        )


def _fallback_values(rec: dict, quantity: str, precision: str) -> tuple[dict, str] | tuple[None, str]:
    """The DeviceRoofs fields that replace a flagged quantity, and what they are, in words."""
    from companion.energy import opmodel

    if quantity == "collectives":
        kept = {w: c for w, c in (rec.get("collectives") or {}).items() if not _collective_problems(w, c)}
        if kept:  # the group sizes that passed, as the roofs read them
            r = opmodel.roofs_from_calibration({**rec, "collectives": kept})
            values = {
                "collective_alpha_s": r.collective_alpha_s,
                "collective_alpha_by_world_s": r.collective_alpha_by_world_s,
                "collective_beta_bytes_per_s": r.collective_beta_bytes_per_s,
            }
            return values, f"the costs measured over {', '.join(sorted(kept))} ranks"
        if rec.get("device") == "cpu":  # none passed (a GPU's take the datasheet prior, below)
            defaults = {k: v for k, v in CPU_DEFAULT_COSTS.items() if k.startswith("collective")}
            return {
                **defaults,
                "collective_alpha_by_world_s": {},
            }, "the model's default latency and bandwidth"
    if rec.get("device") == "cuda":
        try:
            return opmodel.gpu_prior_values(rec["device_name"], precision)[quantity], "the datasheet prior"
        except (ConfigError, KeyError):
            return None, "nothing (no datasheet for this board): used as measured"
    if quantity in ("gemm", "bandwidth"):
        from companion.energy.hardware import measure_cpu_roofs

        r = measure_cpu_roofs()
        values = (
            # the roof and its half-dimension together: a flagged fit's k0 (negative, at its bound) is no better
            # than its peak, and the measured roof has none of its own
            {"gemm_peak_flops_per_s": r["peak_flops_per_s"], "gemm_half_dim": FALLBACK_GEMM_HALF_DIM}
            if quantity == "gemm"
            else {"bandwidth_bytes_per_s": r["bandwidth_bytes_per_s"]}
        )
        return values, CPU_FALLBACKS[quantity]
    if quantity == "op_counts":
        launch = (rec.get("launch") or {}).get("launch_s")
        counts = {
            "ops_per_layer": opmodel.DeviceRoofs.ops_per_layer,
            "ops_per_step": opmodel.DeviceRoofs.ops_per_step,
        }
        if _valid_launch_s(launch):
            return {
                "launch_s": launch,
                **counts,
            }, "the launch benchmark's cost and the model's default counts"
        return {
            "launch_s": CPU_DEFAULT_COSTS["launch_s"],
            **counts,
        }, "the model's default launch cost and counts"
    values = {
        "launch": {"launch_s": CPU_DEFAULT_COSTS["launch_s"]},
        "elementwise": {"elementwise_bytes_per_s": None},
        "optimizer": {"optimizer_bytes_per_s": None},
        "attention": {"attention_s_per_score": {}},
        "thread_scaling": {"thread_exponent": 1.0},
    }
    if quantity in values:
        return values[quantity], CPU_FALLBACKS[quantity]
    return None, "nothing: used as measured"


def load_calibration(
    path: Path, device: str | None = None, precision: str = "bf16", here: dict | None = None
) -> Calibration:
    """Read, check and turn a calibration file into roofs. ``device``: the device name asked for (refused if
    the file calibrated another, or a CPU under a GPU's name). Flagged quantities take their fallback."""
    from companion.energy import opmodel

    path = Path(path)
    rec = read_calibration(path)
    name, kind = rec["device_name"], rec["device"]
    if device is not None and name != device:
        raise CalibrationError(
            f"calibration file {path} calibrated {name!r}, not {device!r}; rename it "
            f"data/devices/{name}.json or "
            f"{_fix(path, {'device': 'cuda' if names_a_gpu(device) else 'cpu'})} on a {device}"
        )
    if kind == "cpu" and names_a_gpu(name):
        raise CalibrationError(
            f"calibration file {path} was measured on a CPU but names the GPU {name!r}; "
            f"delete it and re-run `companion calibrate --device cuda` on a {name}"
        )
    try:
        roofs = opmodel.roofs_from_calibration(rec)
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(
            f"calibration file {path} has an unreadable field ({type(exc).__name__}: {exc}); "
            f"{_fix(path, rec)}"
        ) from None
    problems = check_calibration(rec)
    warnings, fallbacks = [], {}
    for quantity, found in problems.items():
        values, what = _fallback_values(rec, quantity, precision)
        if values:
            roofs = replace(roofs, **values)
        fallbacks[quantity] = f"{'; '.join(found)} -> {what}"
        warnings.append(f"calibration {path}: {quantity} failed its check ({'; '.join(found)}); using {what}")
    if kind != "cpu" and not rec.get("collectives"):
        # a calibration on a machine with one GPU times no collective: a multi-GPU plan would otherwise be priced
        # at the record's placeholder (50 us per hop, 1 GB/s), tens of times slower than NCCL over NVLink
        values, what = _fallback_values(rec, "collectives", precision)
        if values:
            roofs = replace(roofs, **values)
        fallbacks["collectives"] = f"not measured (one GPU) -> {what}"
    if fallbacks:
        roofs = replace(roofs, fallbacks=fallbacks)
    measured_at = dtype_precision(rec.get("dtype"))
    if measured_at and precision and measured_at != precision:
        # a GEMM roof, a rate in bytes and an attention cost all change with the precision: say so (``predict``
        # refuses the calibrated tier outright, ``_precision_mismatch``)
        warnings.append(
            f"calibration {path} was measured at {measured_at}, not {precision}: its roofs and rates are "
            f"{measured_at}'s, read as they are for these {precision} runs"
        )
    if kind == "cpu":
        why = other_host(rec, here)
        if why:
            warnings.append(
                f"calibration {path} describes another machine ({why}); re-run `companion calibrate "
                "--device cpu` here for this machine's roofs"
            )
    return Calibration(path, rec, problems, warnings, roofs)


def calibration_names(device: str, cpu: str | None = None) -> list[str]:
    """The file names a calibration of ``device`` goes by, the one ``companion calibrate`` writes first. A CPU's
    is named by its host, since results, calibrations and stored builds are per CPU model
    (``cpu-<host>.json``, the host as ``provenance.host_slug`` names it; ``cpu`` defaults to this machine's);
    ``cpu.json``, the name before, is still read (with a warning where it describes another machine)."""
    if device != "cpu":
        return [f"{device}.json"]
    return [f"cpu-{host_slug(cpu if cpu is not None else cpu_model())}.json", "cpu.json"]


# sub-folders of a reference folder whose calibration was taken on the machine that then measured their runs,
# the one a prediction reads first: the execution modes' as the runner compiles them now (the attention mask kept,
# autocast inside the graph; its calibration probes those compiled modes), then the first execution modes' (its
# probe timed compiled steps whose attention ran the math path), then the one-machine set's
# (``companion.energy.reference``)
MASKED_MODES_SET, MODES_SET, ONE_MACHINE_SET = "modes-masked", "modes", "one-machine"
SHIPPED_SETS = (MASKED_MODES_SET, MODES_SET, ONE_MACHINE_SET)


def calibration_path(device: str, root: Path | None = None) -> Path | None:
    """The calibration file of ``device``: in ``root`` where given, else this checkout's own
    (data/devices/, ``calibration_names``) and then one shipped with its reference measurements: a set's whose
    machine measured runs after it (``SHIPPED_SETS``, in that order), else data/reference/<device>/<device>.json;
    None where there is none."""
    from companion.paths import devices_dir, reference_dir

    shipped = [reference_dir(device) / s for s in SHIPPED_SETS] + [reference_dir(device)]
    places = [Path(root)] if root is not None else [devices_dir(), *shipped]
    for folder in places:
        for name in calibration_names(device):
            path = folder / name
            if path.is_file():
                return path
    return None


def load_device_roofs(device: str, precision: str, root=None):
    """The roofs of ``device``: its calibration file (data/devices/<device>.json) where one exists, else the
    spec-sheet priors (GPUs). A CPU without a calibration file gets its GEMM roof and bandwidth measured now
    (a two-second check, ``hardware.measure_cpu_roofs``) and default fixed and collective costs, labelled
    'analysis-time roofs': the fitted tier learns its multipliers either way."""
    import sys

    from companion.energy import opmodel
    from companion.paths import devices_dir

    path = calibration_path(device, root or devices_dir())
    if path:
        cal = load_calibration(path, device, precision)
        for line in cal.warnings:
            print(f"warning: {line}", file=sys.stderr)
        return cal.roofs
    if device == "cpu":
        from companion.energy.hardware import measure_cpu_roofs

        r = measure_cpu_roofs()
        return opmodel.DeviceRoofs(
            "cpu",
            gemm_peak_flops_per_s=r["peak_flops_per_s"],
            gemm_half_dim=FALLBACK_GEMM_HALF_DIM,
            bandwidth_bytes_per_s=r["bandwidth_bytes_per_s"],
            **CPU_DEFAULT_COSTS,
            shared_node=True,
            overlap=False,
            node_cores=int(r.get("threads") or 1),
            tier="analysis-time roofs",
            sources={"roofs": r["method"]},
        )
    return opmodel.roofs_from_spec(device, precision)


def measured_roofs(device: str, precision: str = "fp32", root=None) -> dict:
    """The compute and memory roofs the proxies use for a device whose hardware-table entry says 'measure'
    (the CPU): the ones its calibration measured, so the proxies and the operator model read one measurement
    (``load_device_roofs``: without a calibration file, measured now)."""
    from companion.energy import opmodel

    return opmodel.proxy_roofs(load_device_roofs(device, precision, root))


def check_calibrate_args(
    device: str, device_name: str | None, out: Path | None, budget_s: float, executions: list[str]
) -> None:
    """Every argument of ``companion calibrate`` checked before torch is imported and the first benchmark runs:
    the device, the budget and the modes to probe (``runs.config.check_calibration_request``), the device's name
    (a CPU cannot be named after a GPU of the hardware table) and the output file (a file, in a folder that
    exists or can be made, writable)."""
    from companion.runs.config import check_calibration_request

    check_calibration_request(device, budget_s, device_name, executions)
    if device_name is not None:
        if device == "cpu" and names_a_gpu(device_name):
            raise ConfigError(
                f"--device cpu --device-name {device_name}: a CPU's calibration cannot be "
                f"named after the GPU {device_name}; drop --device-name, or calibrate with "
                "--device cuda on that GPU"
            )
    if out is not None:
        out = Path(out)
        if out.is_dir():
            raise ConfigError(f"--out {out} is a folder; give a file, e.g. --out {out / 'cpu.json'}")
        parent = next((p for p in [out.parent, *out.parent.parents] if p.exists()), None)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ConfigError(
                f"--out {out}: {parent or out.parent} is not a writable folder; choose another path"
            )
