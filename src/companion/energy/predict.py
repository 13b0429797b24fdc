"""Predict a planned fine-tune's energy, time and CO2 before running it, with intervals.

    companion predict --model bert-base --seq-len 128 --batch-size 32 --examples 100000 --epochs 3 \
        --device H100 --devices 8 --tp 2 --dp 4 --country FRA

Uses a fit artifact of stage 03 (``data/derived/<profile>/fit.json``) made from runs on the same device
type: energy per step from the chosen law, step time from the time law, both times the number of steps.
Intervals come from the law's errors on groups of runs left out of its fit (the artifact's ``law_intervals``),
as wide as the plan's novelty; an artifact without them falls back to the bootstrap, and ``interval_source``
says which. It warns when the request lies outside the range the law was fitted on (and carries the fit's
flags on the law), and refuses unknown devices, impossible layouts and devices with no fit.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from companion.energy import hardware, proxies
from companion.energy.calibration import (
    CalibrationError,
    calibration_path,
    load_calibration,
)
from companion.runs.carbon import J_PER_KWH, carbon_intensity
from companion.runs.records import dtype_precision
from companion.errors import ConfigError
from companion.runs.config import DataConfig, Layout, LengthDist, build_run
from companion.runs.data import expected_token_counts
from companion.energy.fit import FittedModel
from companion.energy.laws import LAWS, TIME_LAW
from companion.energy import opmodel
from companion.energy.intervals import LEVEL, too_few
from companion.paths import data_dir

# Named BERT sizes (Turc et al. 2019 for the small ones; Devlin et al. 2019 for base and large).
NAMED_SIZES = {
    "bert-tiny": (2, 128, 2),
    "bert-mini": (4, 256, 4),
    "bert-small": (4, 512, 8),
    "bert-medium": (8, 512, 8),
    "bert-base": (12, 768, 12),
    "bert-large": (24, 1024, 16),
}


@dataclass(frozen=True)
class Plan:
    """A fine-tune someone intends to run."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    batch_size: int
    steps: int
    tp: int = 1
    dp: int = 1
    device_name: str = "cpu"
    lengths: LengthDist = LengthDist()
    ffn: int = 0
    vocab: int = 30522
    max_positions: int = 512
    precision: str | None = None
    country: str = "USA"
    execution: str = "eager"  # eager, compile or cudagraphs (``runs.config.EXECUTIONS``)
    engine: str = "native"  # native or accelerate (``runs.config.ENGINES``)
    attn: str = "sdpa"  # the attention kernel (``runs.config.ATTENTION_KERNELS``)


def make_plan(
    model: str | None = None,
    layers=None,
    hidden=None,
    heads=None,
    ffn=0,
    vocab=30522,
    max_positions=512,
    seq_len=128,
    lengths: str | LengthDist | None = None,
    batch_size=32,
    tokens=None,
    examples=None,
    epochs=None,
    tp=1,
    dp=1,
    device="cpu",
    devices=None,
    precision=None,
    country="USA",
    execution="eager",
    engine="native",
    attn="sdpa",
) -> Plan:
    """Validate a request and turn tokens or examples x epochs into optimizer steps."""
    from companion.runs.config import parse_lengths

    for flag, value in (("--tokens", tokens), ("--examples", examples), ("--epochs", epochs)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ConfigError(
                f"{flag} {value!r} must be a finite number above 0, e.g. {flag} 100000"
                if flag != "--epochs"
                else f"--epochs {value!r} must be a finite number above 0, e.g. --epochs 3"
            )
    if precision is not None and precision not in ("fp32", "bf16"):
        raise ConfigError(f"--precision {precision!r} is unknown; use fp32 or bf16")

    if model is not None:
        if model not in NAMED_SIZES:
            raise ConfigError(
                f"model {model!r} is not a named size; use one of {', '.join(NAMED_SIZES)} "
                "or give --layers/--hidden/--heads"
            )
        layers, hidden, heads = NAMED_SIZES[model]
    if None in (layers, hidden, heads):
        raise ConfigError("give a named --model (e.g. bert-base) or all of --layers, --hidden, --heads")
    from companion.runs.provenance import canonical_device_name

    device = canonical_device_name(device)  # 'h100' -> 'H100', as the table and the files name it
    hardware.device_spec(device)  # unknown device -> clear error
    if devices is not None and devices != tp * dp:
        raise ConfigError(
            f"--devices {devices} != tp*dp = {tp}*{dp} = {tp * dp}; "
            "a layout uses exactly tp*dp devices: change --devices, --tp or --dp"
        )
    if isinstance(lengths, str):
        lengths = parse_lengths(lengths)
    lengths = lengths or LengthDist()
    # The run configuration validates the shape and layout exactly as a real run would.
    build_run(
        {
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "ffn": ffn,
            "vocab": vocab,
            "max_positions": max_positions,
            "seq_len": seq_len,
            "lengths": lengths,
            "batch_size": batch_size,
            "tp": tp,
            "dp": dp,
            "country": country,
            "execution": execution,
            "engine": engine,
            "attn": attn,
            "device": "cpu" if device == "cpu" else "cuda",
        }
    )
    data = DataConfig(seq_len=seq_len, batch_size=batch_size, lengths=lengths)
    if tokens is not None and examples is not None:
        raise ConfigError("--tokens and --examples both give the training amount; give one of them")
    if tokens is None and examples is None:
        raise ConfigError("give the training amount as --tokens N or as --examples N (with --epochs E)")
    if tokens is not None and epochs is not None:
        raise ConfigError(
            "--epochs counts passes over --examples; with --tokens give every token the fine-tune trains on "
            "(the tokens of one epoch times the epochs)"
        )
    epochs = 1.0 if epochs is None else epochs
    if tokens is not None:
        per_step = expected_token_counts(data, dp).real
        steps = math.ceil(tokens / per_step)
    else:
        steps = math.ceil(examples * epochs / batch_size)
    if steps < 1:
        raise ConfigError("the training amount gives no optimizer step; raise --tokens or --examples")
    return Plan(
        layers,
        hidden,
        heads,
        seq_len,
        batch_size,
        steps,
        tp,
        dp,
        device,
        lengths,
        ffn or 4 * hidden,
        vocab,
        max_positions,
        precision,
        country,
        execution,
        engine,
        attn,
    )


def _fit_artifacts(root: Path | None = None):
    """(path, artifact) of every profile's fit.json; a corrupt one is skipped with a warning, so one broken
    fit (another profile's) never stops predictions for every device."""
    root = root or data_dir() / "derived"
    for path in sorted(root.glob("*/fit.json")):
        try:
            art = json.loads(path.read_text(encoding="utf-8"))
            art["device_name"], int(art["n_runs"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
            print(
                f"warning: skipping the corrupt fit artifact {path} ({type(exc).__name__}); re-make it with "
                "stage 03",
                file=sys.stderr,
            )
            continue
        yield path, art


def find_fit(device: str, root: Path | None = None) -> Path:
    """The fit artifact made from runs on ``device`` with the most runs."""
    candidates, have = [], set()
    for path, art in _fit_artifacts(root):
        have.add(art["device_name"])
        if art["device_name"] == device:
            candidates.append((int(art["n_runs"]), path))
    if not candidates:
        raise ConfigError(
            f"no fitted law for device {device!r} (fits exist for: {', '.join(have) or 'none'}); measure runs on "
            f"a {device} with `make reproduce PROFILE=gpu-1` (or gpu-node) to fit one, or pass --fit PATH"
        )
    return max(candidates)[1]


def planned_attention_kernel(device_name: str, attn: str = "sdpa") -> str:
    """The attention kernel a planned fine-tune will run, as the sweeps record it: eager attention materialises
    the scores (math); training with dropout, SDPA's CPU kernel falls back to the math kernel; GPUs run a fused
    kernel, compiled or not where SDPA is left out of the graphs (``sdpa-nocompile``)."""
    return "math" if attn == "eager" or device_name == "cpu" else "fused"


def plan_memory(plan: Plan, precision: str) -> dict:
    """The estimated peak memory of the plan's largest step (every sequence padded to the longest the lengths
    allow: a step that does not fit fails the fine-tune, however rare) against its devices'
    (``energy.memory.memory_check``): the check ``companion run`` makes, on the run configuration the plan is."""
    from companion.energy.memory import longest_step_shape, memory_check

    cfg = build_run(
        {
            "layers": plan.layers,
            "hidden": plan.hidden,
            "heads": plan.heads,
            "ffn": plan.ffn,
            "vocab": plan.vocab,
            "max_positions": plan.max_positions,
            "seq_len": plan.seq_len,
            "lengths": plan.lengths,
            "batch_size": plan.batch_size,
            "tp": plan.tp,
            "dp": plan.dp,
            "precision": precision,
            "attn": plan.attn,
            "execution": plan.execution,
            "device": "cpu" if plan.device_name == "cpu" else "cuda",
            "device_name": plan.device_name,
        }
    )
    return memory_check(longest_step_shape(cfg), plan.device_name)


def planned_step(plan: Plan, precision: str):
    """The planned fine-tune's mean step as the proxies count a sweep's run (``tables.proxies_frame``), and its
    expected token counts: (``proxies.StepShape``, ``runs.data.TokenCounts``)."""
    tokens = expected_token_counts(
        DataConfig(seq_len=plan.seq_len, batch_size=plan.batch_size, lengths=plan.lengths), plan.dp
    )
    shape = proxies.StepShape(
        plan.layers,
        plan.hidden,
        plan.heads,
        plan.ffn or 4 * plan.hidden,
        plan.vocab,
        plan.max_positions,
        2,
        plan.batch_size,
        tokens.padded,
        tokens.attention_pairs,
        plan.tp,
        plan.dp,
        precision,
        fused_attention=planned_attention_kernel(plan.device_name, plan.attn) == "fused",
    )
    return shape, tokens


def plan_frame(plan: Plan, fitted) -> pd.DataFrame:
    """The one-row frame of proxies a law reads, for the planned fine-tune."""
    art = fitted.artifact
    if plan.device_name != art["device_name"]:
        raise ConfigError(
            f"the fit {fitted.path} was measured on {art['device_name']!r}, not {plan.device_name!r}; "
            "use a fit from the same device type"
        )
    precision = plan.precision or art["precision"][0]
    shape, tokens = planned_step(plan, precision)
    row = {
        **proxies.step_proxies(shape),
        # the run's shape, which says what in the plan is new to the fit (its interval's width)
        "layers": plan.layers,
        "hidden": plan.hidden,
        "heads": plan.heads,
        "seq_len": plan.seq_len,
        "batch_size": plan.batch_size,
        "device_name": plan.device_name,
        "precision": precision,
        "mode": Layout(plan.tp, plan.dp).mode,
        "tp": plan.tp,
        "dp": plan.dp,
        "world_size": plan.tp * plan.dp,
        "padded_tokens": tokens.padded,
        "real_tokens": tokens.real,
        "peak_flops_per_s": art["peak_flops_per_s"],
        "bandwidth_bytes_per_s": art["bandwidth_bytes_per_s"],
        # as the fitted runs were metered: one unit per GPU, or one per node shared by its ranks
        "metered_units": plan.tp * plan.dp if art["energy_scope"] == "device" else 1,
    }
    from companion.energy.fit import design_matrix

    return design_matrix(pd.DataFrame([row]), fitted.usl)


def check_level(level) -> None:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ConfigError(
            f"--level {level!r} must lie strictly between 0 and 1, e.g. --level 0.9 for a 90 % interval"
        )


def predict(plan: Plan, fitted: FittedModel, law: str = "roofline_power_law", level: float = LEVEL) -> dict:
    check_level(level)
    if law not in fitted.energy:
        raise ConfigError(f"law {law!r} is not in the fit artifact; use one of {', '.join(fitted.energy)}")
    if LAWS[law].uses_measured_time:
        raise ConfigError(
            f"law {law!r} needs the run's measured time, which a prediction does not have; "
            "use roofline_power_law or energy_roofline"
        )
    X = plan_frame(plan, fitted)
    fit = fitted.energy[law]
    e_step = float(fit.predict(X)[0])
    t_step = float(fitted.time.predict(X)[0])
    held = fitted.artifact.get("law_intervals") or {}
    if law in held and TIME_LAW in held:
        e_q = _halfwidths_per_plan(held[law], X, level)[0]["energy_per_step_j"]
        t_q = _halfwidths_per_plan(held[TIME_LAW], X, level)[0]["step_s"]
        e_lo, e_hi, t_lo, t_hi = (
            e_step * math.exp(-e_q),
            e_step * math.exp(e_q),
            t_step * math.exp(-t_q),
            t_step * math.exp(t_q),
        )
        interval_source = (
            "held-out groups: the law's errors on model sizes, layouts and degrees left out of its fit"
        )
    else:
        e_lo, e_hi = (float(v[0]) for v in fit.interval(X, level))
        t_lo, t_hi = (float(v[0]) for v in fitted.time.interval(X, level))
        interval_source = (
            "bootstrap with in-sample residuals, narrower than the law's held-out errors: this fit "
            "artifact holds none; re-make it with `make fit PROFILE=<profile>` (stage 03)"
        )
    intensity = carbon_intensity(plan.country)
    kwh = lambda j: j * plan.steps / J_PER_KWH  # noqa: E731
    co2 = lambda j: kwh(j) * intensity["g_per_kwh"] / 1000  # noqa: E731
    warnings = []
    for col, (lo, hi) in fit.ranges.items():
        v = float(X[col].iloc[0])
        if not lo <= v <= hi:
            warnings.append(
                f"{col} = {v:.3g} lies outside the fitted range [{lo:.3g}, {hi:.3g}]: extrapolation"
            )
    warnings += _outside_ranges(plan, fitted.artifact.get("input_ranges", {}))
    fitted_precisions = fitted.artifact["precision"]
    if plan.precision is not None and plan.precision not in fitted_precisions:
        warnings.append(
            f"precision {plan.precision} was not measured: the fit holds {', '.join(fitted_precisions)} "
            "runs only, so the prediction extrapolates across precisions"
        )
    for w in fitted.artifact.get("warnings", []):  # the fit's flags on the laws this prediction uses
        if any(f"{name} " in w for name in (law, TIME_LAW)) or not any(f"{name} " in w for name in LAWS):
            warnings.append(f"fit: {w}")
    if not bool(X.eta_modelled.iloc[0]):
        warnings.append(f"no efficiency model for {X['mode'].iloc[0]} on {plan.device_name}: eta = 1 assumed")
    precision = plan.precision or fitted_precisions[0]  # as plan_frame priced it
    mem = plan_memory(plan, precision)
    warnings += _memory_warnings(mem, plan.device_name)
    return {
        "plan": {
            **{k: v for k, v in plan.__dict__.items() if k != "lengths"},
            "precision": precision,
            "lengths": plan.lengths.__dict__,
        },
        "law": law,
        "interval_level": level,
        "interval_source": interval_source,
        "fit": str(fitted.path) if fitted.path else None,
        "fit_energy_kind": fitted.artifact["energy_kind"],
        "fit_device": fitted.artifact["device_name"],
        "steps": plan.steps,
        "flops_per_step": float(X.flops_per_step.iloc[0]),
        "eta": float(X.eta.iloc[0]),
        "energy_kwh": kwh(e_step),
        "energy_kwh_interval": [kwh(e_lo), kwh(e_hi)],
        "time_h": t_step * plan.steps / 3600,
        "time_h_interval": [t_lo * plan.steps / 3600, t_hi * plan.steps / 3600],
        "co2_kg": co2(e_step),
        "co2_kg_interval": [co2(e_lo), co2(e_hi)],
        "carbon_intensity_g_per_kwh": intensity["g_per_kwh"],
        "country": intensity["country"],
        "memory": mem,
        "warnings": warnings,
    }


def _memory_warnings(mem: dict, device_name: str) -> list[str]:
    from companion.energy.memory import misfit_message

    return [] if mem["fits"] else [misfit_message(mem, device_name)]


def format_memory(mem: dict) -> str:
    """The estimated peak memory as one line of text."""
    from companion.energy.memory import gb

    where = (
        f"{gb(mem['need_bytes'])} per GPU, of its {gb(mem['capacity_bytes'])}"
        if mem["scope"] == "device"
        else f"{gb(mem['need_bytes'])} for all ranks, of the node's {gb(mem['capacity_bytes'])}"
    )
    return (
        f"memory: {where} (estimated peak of the longest step, at the {mem['peak_at']})"
        f"{'' if mem['fits'] else ': does not fit'}"
    )


def interval_cells(values, lows, highs) -> list[str]:
    """Each value with its interval in one table cell, as the book's tables show them: '0.0125 [0.00973, 0.0161]'."""
    return [f"{v:.3g} [{lo:.3g}, {hi:.3g}]" for v, lo, hi in zip(values, lows, highs)]


def level_label(level: float) -> str:
    """An interval's level as a reader reads it: '90%', '99.9%' (never rounded to '100%')."""
    return f"{round(level * 100, 6):g}%"


def format_prediction(p: dict, warnings: bool = True) -> str:
    """The prediction as text; ``warnings=False`` leaves the warnings out (the command prints them on stderr)."""
    lvl = level_label(p["interval_level"])
    kind = p["fit_energy_kind"]
    lines = [
        f"planned: L{p['plan']['layers']}-h{p['plan']['hidden']}-a{p['plan']['heads']} seq {p['plan']['seq_len']} "
        f"batch {p['plan']['batch_size']}, {p['steps']} steps, tp={p['plan']['tp']} dp={p['plan']['dp']} "
        f"on {p['plan']['device_name']}",
        f"energy: {p['energy_kwh']:.4g} kWh  [{lvl} interval {p['energy_kwh_interval'][0]:.4g} - "
        f"{p['energy_kwh_interval'][1]:.4g}]  (law fitted on {kind} energy)",
        f"time:   {p['time_h']:.4g} h  [{p['time_h_interval'][0]:.4g} - {p['time_h_interval'][1]:.4g}]",
        f"CO2:    {p['co2_kg']:.4g} kg  [{p['co2_kg_interval'][0]:.4g} - {p['co2_kg_interval'][1]:.4g}] "
        f"at {p['carbon_intensity_g_per_kwh']:.0f} g/kWh ({p['country']})",
        format_memory(p["memory"]),
        f"law: {p['law']}; fit: {p['fit']}",
        f"intervals: {p['interval_source']}",
    ]
    if warnings:
        lines += [f"warning: {w}" for w in p["warnings"]]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ tiers: fitted, calibrated, prior
TIERS = ("fitted", "calibrated", "prior")
TIER_TEXT = {
    "fitted": "operator roofline with coefficients fitted on this device's sweep",
    "calibrated": "operator roofline at face value from this device's calibration file (no sweep)",
    "prior": "operator roofline from spec-sheet roofs and TDP with published efficiency and power priors",
}


# the level at which the hardware table's interval_factor is stated (a factor either side)
PRIOR_LEVEL = 0.9


def find_operator_fit(device: str, root: Path | None = None) -> dict | None:
    """The operator model fitted on ``device``'s sweep with the most runs (from stage 03's fit.json), if any,
    with the ranges of the inputs it was fitted on, the precisions its runs used and how their energy was had."""
    best = None
    for path, art in _fit_artifacts(root):
        op = art.get("operator_model")
        if art["device_name"] == device and op and (best is None or art["n_runs"] > best[0]):
            best = (
                art["n_runs"],
                {
                    **op,
                    "path": str(path),
                    "input_ranges": art.get("input_ranges", {}),
                    "precision": list(art.get("precision") or []),
                    "energy_kind": art.get("energy_kind"),
                },
            )
    return best[1] if best else None


def find_calibration(device: str, root: Path | None = None, precision: str = "bf16"):
    """``device``'s checked calibration (``calibration.load_calibration``; its own file, else the one shipped
    with its reference measurements), or None; ``CalibrationError`` for a file that cannot be used."""
    path = calibration_path(device, root)
    return load_calibration(path, device, precision) if path else None


def _calibrated_residuals(device: str, root: Path | None = None) -> tuple[dict, str] | tuple[None, None]:
    """The calibrated tier's log errors on a swept device's runs, and that device: ``device``'s own sweep where
    it has one, else another's (stage 03 scores the un-fitted calibrated model on every run of its sweep:
    nothing is fitted, so these are held out)."""
    # a CPU node's errors say nothing of a GPU's (host and device overlap there; they share cores here)
    kind = lambda name: name == "cpu"  # noqa: E731
    found = [
        (art["device_name"] != device, art["device_name"], art["calibrated_tier_residuals"])
        for _, art in _fit_artifacts(root)
        if art.get("calibrated_tier_residuals") and kind(art["device_name"]) == kind(device)
    ]
    if not found:
        return None, None
    _, name, residuals = min(found, key=lambda f: f[0])
    return residuals, name


def _precision_mismatch(tier: str, device: str, precision: str, has: list[str], source: str) -> str | None:
    """Why a tier made at other precisions cannot answer for ``precision`` (None where it can). A GEMM roof, a
    byte count and an energy per FLOP all change with the precision, so a fit or a calibration at bf16 says
    nothing exact about fp32."""
    if not has or precision in has:
        return None
    return f"the {tier} tier for {device} ({source}) was made at {', '.join(has)}, not {precision}"


def _stated_width() -> tuple[float, dict]:
    """The hardware table's interval factor (either side, at ``PRIOR_LEVEL``) and its log half-widths: the
    width of a tier with no held-out errors of its own."""
    factor = float(hardware.priors().get("gpu", {}).get("interval_factor", 2.0))
    return factor, {"step_s": math.log(factor), "energy_per_step_j": math.log(factor)}


def resolve_tier(
    device: str,
    precision: str,
    tier: str | None = None,
    derived_root: Path | None = None,
    devices_root: Path | None = None,
) -> dict:
    """The tier a prediction uses, with its roofs, coefficients and interval half-widths (log).

    ``tier=None`` takes the best tier this device has at this precision (fitted > calibrated > prior) and says
    why it passed over a better one; a named tier is used as asked or refused with the reason; it is never
    upgraded nor downgraded silently.
    """
    if tier is not None and tier not in TIERS:
        raise ConfigError(f"tier={tier!r} is not a tier; use one of {', '.join(TIERS)}")
    passed = []  # why a better tier this device has was not used
    if tier in (None, "fitted"):
        op = find_operator_fit(device, derived_root)
        why = op and _precision_mismatch("fitted", device, precision, op["precision"], op["path"])
        if op and not why:
            dev = opmodel.DeviceRoofs.from_json(op["dev"])
            return {
                "tier": "fitted",
                "dev": dev,
                "time": op["time"],
                "energy": op["energy"],
                "layout_scale": op.get("layout_scale") or {},
                "source": op["path"],
                "residuals": op["residuals"],
                "input_ranges": op["input_ranges"],
                "residuals_by_kind": op.get("residuals_by_kind"),
                "train_keys": op.get("train_keys"),
                "residuals_scaled": bool(op.get("residuals_scaled")),
                # the coefficients were fitted to the sweep's energies: their kind, not the calibration's
                "energy_measured": op.get("energy_kind") == "measured",
                "notes": [],
            }
        if tier == "fitted":
            if why:
                raise ConfigError(
                    f"tier='fitted': {why}; use --precision {op['precision'][0]}, or --tier "
                    "calibrated or prior"
                )
            raise ConfigError(
                f"tier='fitted' needs a sweep fitted on {device!r} (data/derived/<profile>/fit.json); "
                f"run `make reproduce` with a {device} profile, or use --tier calibrated or prior"
            )
        if why:
            passed.append(f"fitted tier not used: {why}")
    if tier in (None, "calibrated"):
        try:
            cal = find_calibration(device, devices_root, precision)
        except CalibrationError as exc:
            if tier == "calibrated":
                raise
            cal = None
            passed.append(f"calibrated tier not used: {exc}")
        dtype = cal.record.get("dtype") if cal else None
        has = [dtype_precision(dtype) or str(dtype)] if dtype else []
        why = cal and _precision_mismatch("calibrated", device, precision, has, str(cal.path))
        if cal and not why:
            dev = cal.roofs
            coef = opmodel.prior_coefficients(dev)
            residuals, swept = _calibrated_residuals(device, derived_root)
            factor, hw = _stated_width()
            note = (
                f"interval from the calibrated tier's errors on the {swept} sweep's runs"
                + (
                    ""
                    if swept == device
                    else f" (another device: how far they carry over to {device} is untested)"
                )
                if residuals
                else f"calibrated tier not scored on a sweep of {device} runs: a factor-{factor:g} interval at "
                f"{PRIOR_LEVEL:.0%} (log-normal at other levels)"
            )
            return {
                "tier": "calibrated",
                "dev": dev,
                **coef,
                "halfwidth": hw,
                "residuals": residuals,
                "source": str(cal.path),
                "energy_measured": bool(dev.power_measured),
                "notes": [*passed, note],
                "calibration_warnings": list(cal.warnings),
            }
        if tier == "calibrated":
            if why:
                raise ConfigError(f"tier='calibrated': {why}; calibrate at {precision} or use --tier prior")
            raise ConfigError(
                f"tier='calibrated' needs data/devices/{device}.json; run "
                f"`companion calibrate --device {'cpu' if device == 'cpu' else 'cuda'}` on a {device}, "
                "or use --tier prior"
            )
        if why:
            passed.append(f"calibrated tier not used: {why}")
    dev = opmodel.roofs_from_spec(device, precision)
    factor, hw = _stated_width()
    return {
        "tier": "prior",
        "dev": dev,
        **opmodel.prior_coefficients(dev),
        "halfwidth": hw,
        "source": "energy/resources/hardware.yaml",
        "energy_measured": bool(dev.power_measured),
        "notes": [
            *passed,
            f"spec-sheet priors: a factor-{factor:g} interval at {PRIOR_LEVEL:.0%} (log-normal at other levels)",
        ],
    }


def default_precision(device: str) -> str:
    """The precision a plan on ``device`` defaults to: bf16 where the board has it (the sweeps' GPU precision),
    fp32 on a CPU and on boards without bf16 (a V100, an RTX 8000), which the runs also support."""
    if device == "cpu":
        return "fp32"
    return "bf16" if hardware.device_spec(device).get("bf16_tflops") else "fp32"


def plan_rows(plans: list[Plan], precision: str, scope: str) -> pd.DataFrame:
    """The frame the operator model reads, one row per plan (no law proxies: nothing here needs scipy)."""
    rows = []
    for plan in plans:
        shape, tokens = planned_step(plan, precision)
        rows.append(
            {
                "layers": plan.layers,
                "hidden": plan.hidden,
                "heads": plan.heads,
                "ffn": shape.ffn,
                "vocab": plan.vocab,
                "max_positions": plan.max_positions,
                "num_labels": 2,
                "batch_size": plan.batch_size,
                "padded_tokens": tokens.padded,
                "attention_pairs": tokens.attention_pairs,
                "real_tokens": tokens.real,
                "seq_len": plan.seq_len,
                "tp": plan.tp,
                "dp": plan.dp,
                "world_size": plan.tp * plan.dp,
                "mode": Layout(plan.tp, plan.dp).mode,
                "execution": plan.execution,
                "attn": plan.attn,  # attention left out of the compiled graphs: its own execution probe entry
                "engine": plan.engine,
                "precision": precision,
                "attention_kernel": planned_attention_kernel(plan.device_name, plan.attn),
                "metered_units": plan.tp * plan.dp if scope == "device" else 1,
                # the FLOPs a run of the sweep is counted with (tables.proxies_frame): whether the plan is new in scale
                "flops_per_step": proxies.flops_per_step(shape),
            }
        )
    return pd.DataFrame(rows)


def tier_point(res: dict):
    """The operator roofline of a resolved tier, as the point fit that validation scores
    (``models.OperatorPoint``): its predictions and interval scale are computed the same way."""
    from companion.energy.models import OperatorPoint

    return OperatorPoint(res["dev"], res["time"], res["energy"], res.get("layout_scale") or {})


def predict_tiered(
    plans: list[Plan] | Plan,
    tier: str | None = None,
    level: float = LEVEL,
    derived_root: Path | None = None,
    devices_root: Path | None = None,
) -> list[dict] | dict:
    """Energy, time and CO2 of planned fine-tunes on one device type with the operator roofline, in a tier."""
    single = isinstance(plans, Plan)
    plans = [plans] if single else list(plans)
    check_level(level)
    device = plans[0].device_name
    precision = plans[0].precision or default_precision(device)
    if device == "cpu" and precision != "fp32":
        raise ConfigError(
            f"precision={precision!r} on cpu: the CPU sweeps and calibration run fp32; use --precision fp32"
        )
    res = resolve_tier(device, precision, tier, derived_root, devices_root)
    dev = res["dev"]
    X = plan_rows(plans, precision, "node" if dev.shared_node else "device")
    point = tier_point(res)
    if res.get("residuals_scaled"):  # the fitted tier's residuals were divided by each run's interval scale
        t, e, scale = point.predict_with_scale(X)
    else:
        (t, e), scale = point.predict(X), np.ones(len(X))
    single_t, _ = point.predict(X.assign(tp=1, dp=1, world_size=1))
    mems = [plan_memory(plan, precision) for plan in plans]
    widths, short = _widths_and_notes(res, X, level)
    hws = [{k: w * f for k, w in hw.items()} for hw, f in zip(widths, scale)]
    out = []
    for i, plan in enumerate(plans):
        hw = hws[i]
        intensity = carbon_intensity(plan.country)
        kwh = e[i] * plan.steps / J_PER_KWH
        hours = t[i] * plan.steps / 3600
        ke, kt = math.exp(hw["energy_per_step_j"]), math.exp(hw["step_s"])
        g = intensity["g_per_kwh"] / 1000
        out.append(
            {
                "plan": {
                    **{k: v for k, v in plan.__dict__.items() if k != "lengths"},
                    "lengths": plan.lengths.__dict__,
                    "precision": precision,
                },
                "tier": res["tier"],
                "tier_means": TIER_TEXT[res["tier"]],
                "source": res["source"],
                "interval_level": level,
                "steps": plan.steps,
                "energy_kwh": kwh,
                "energy_kwh_interval": [kwh / ke, kwh * ke],
                "time_h": hours,
                "time_h_interval": [hours / kt, hours * kt],
                "co2_kg": kwh * g,
                "co2_kg_interval": [kwh / ke * g, kwh * ke * g],
                "step_s": float(t[i]),
                "energy_per_step_j": float(e[i]),
                "mean_power_w": float(e[i] / t[i]),
                "eta": float(single_t[i] / (X.world_size[i] * t[i])),
                "energy_measured_basis": res["energy_measured"],
                "carbon_intensity_g_per_kwh": intensity["g_per_kwh"],
                "country": intensity["country"],
                "memory": mems[i],
                "notes": list(res["notes"])
                + (
                    [f"{device} has no bf16: priced at {precision} (pass --precision to choose)"]
                    if plans[0].precision is None and device != "cpu" and precision == "fp32"
                    else []
                )
                + _no_bf16_note(device, precision)
                + short[i],
                "warnings": list(res.get("calibration_warnings") or [])
                + _execution_warnings(plan, dev)
                + _layout_warnings(plan, dev)
                + _outside_ranges(plan, res.get("input_ranges", {}))
                + _memory_warnings(mems[i], device),
            }
        )
    return out[0] if single else out


def _no_bf16_note(device: str, precision: str) -> list[str]:
    """Where bf16 was asked of a board without it (V100, RTX 8000): that the plan is priced at its fp16 tensor
    cores' peak, as a 2-byte mixed-precision run (fp16 autocast with loss scaling) would run on it."""
    if precision != "bf16" or device == "cpu":
        return []
    spec = hardware.device_spec(device)
    if spec.get("bf16_tflops") is not None or spec.get("fp16_tflops") is None:
        return []
    return [
        f"{device} has no bf16: priced at its fp16 tensor cores' peak ({spec['fp16_tflops']:g} TFLOP/s), as a "
        "2-byte mixed-precision run (fp16 autocast with loss scaling) would run"
    ]


def _execution_warnings(plan: Plan, dev) -> list[str]:
    """What the operator model does not know about a plan's execution mode and engine, said once each."""
    missing = opmodel.unprobed(dev, [plan.execution], [plan.attn])
    whole = plan.execution in dev.execution_scale
    out = [
        f"execution {m!r} was not probed by this tier's device ({dev.tier}): predicted "
        + (f"with the whole-model {plan.execution}'s host time" if whole else "as eager")
        + (", which leaves out the graph breaks around each layer's attention" if m != plan.execution else "")
        + f"; `companion calibrate --executions {m}` measures it"
        for m in missing
    ]
    # Inductor fuses element-wise work the model times as eager's kernels
    if plan.execution != "eager":
        from companion.energy.reference import compiled_ratio

        measured = compiled_ratio()
        out.append(
            "a compiled step's kernels are timed as eager's, without Inductor's fusion"
            + (
                f" (on an {measured['device']} a compiled step took {measured['ratio']:.2f}x eager's at "
                f"{measured['seq_len']} tokens, and the calibrated tier predicted every compiled run long; the GPU "
                "chapter)"
                if measured
                else ""
            )
        )
    if plan.engine != "native":
        out.append(
            f"engine {plan.engine!r} is predicted as the native engine (the same model, optimizer and data; "
            "the measured difference is on the GPU chapter)"
        )
    return out


def _layout_warnings(plan: Plan, dev) -> list[str]:
    """What the tier's device did not measure of a plan over several GPUs: its collectives (a calibration on one
    GPU times none) and its layout's overhead (DTensor dispatch, FSDP hooks; probed only on several GPUs)."""
    n = plan.tp * plan.dp
    if n == 1 or dev.shared_node:
        return []
    out = []
    if "collectives" in dev.fallbacks:
        out.append(
            f"collectives not measured (a calibration on one GPU): NCCL's datasheet costs instead "
            f"({dev.collective_alpha_s * 1e6:.0f} µs per hop, {dev.collective_beta_bytes_per_s / 1e9:.0f} GB/s "
            f"per rank); calibrate on {n} GPUs to measure them"
        )
    network = dev.network_beta_bytes_per_s()
    if network is not None and dev.spans_nodes(n):
        out.append(
            f"{n} GPUs span {-(-n // dev.gpus_per_node)} nodes of {dev.gpus_per_node}: collectives between them "
            f"priced at the network's {network / 1e9:.0f} GB/s per GPU (a datasheet guess; the hardware table's "
            "internode_beta_gbs)"
        )
    if dev.cross_link_beta_bytes_per_s and dev.leaves_link_group(n) and not dev.spans_nodes(n):
        out.append(
            f"{n} GPUs leave the groups of {dev.link_group} that the board's NVLink bridges join: collectives "
            f"between the groups priced at PCIe's {float(dev.group_beta_bytes_per_s(n)) / 1e9:.0f} GB/s "
            "per GPU (a datasheet guess; the hardware table's cross_link_beta_gbs)"
        )
    if f"tp{plan.tp}-dp{plan.dp}" not in dev.layout_overhead_s:
        out.append(
            "the layout's own overhead (DTensor dispatch, FSDP hooks) not probed: priced as eager launches, a "
            "guess of unknown error"
        )
    return out


def _outside_ranges(plan: Plan, ranges: dict) -> list[str]:
    """One warning per planned input (vocab included) outside the range the fitted tier was fitted on."""
    asked = {
        "layers": plan.layers,
        "hidden": plan.hidden,
        "heads": plan.heads,
        "ffn": plan.ffn or 4 * plan.hidden,
        "vocab": plan.vocab,
        "seq_len": plan.seq_len,
        "batch_size": plan.batch_size,
        "tp": plan.tp,
        "dp": plan.dp,
        "world_size": plan.tp * plan.dp,
    }
    return [
        f"{col} = {asked[col]:g} lies outside the fitted range [{lo:g}, {hi:g}]: extrapolation"
        for col, (lo, hi) in ranges.items()
        if col in asked and not lo <= asked[col] <= hi
    ]


def _halfwidths_per_plan(res: dict, X, level: float) -> list[dict]:
    """Per planned run, log half-widths at ``level``. A fitted tier that stored its held-out residuals by kind
    gives each plan the width of the novelty it has (a new size, layout, parallel degree, mode or head
    dimension, a value outside the fitted ranges or FLOPs per step above them: the widest that applies, and for
    a plan new in anything no narrower than the validation set's errors where the fit stored them, see
    ``models.Fitted.halfwidth``); otherwise one width for every plan."""
    return _widths_and_notes(res, X, level)[0]


def _widths_and_notes(res: dict, X, level: float) -> tuple[list[dict], list[list[str]]]:
    """``_halfwidths_per_plan``'s widths and, per planned run, a note where the fitted tier holds too few held-out
    errors of a novelty the plan has for a ``level`` interval (k = level x (n + 1) above n: at 0.9, fewer than 9):
    its width there is the largest of those errors (``intervals.bounded_halfwidth``), which a ``level`` interval may
    well exceed. One pass over the plans' novelty."""
    by_kind = res.get("residuals_by_kind")
    if not (by_kind and res.get("train_keys")):
        # one width for every plan; with too few errors for the level, the largest of them, said as the fitted
        # tier's kinds say it
        n = min(
            (int(np.isfinite(np.asarray(v, float)).sum()) for v in (res.get("residuals") or {}).values()),
            default=0,
        )
        note = (
            [
                f"too few held-out errors for a {level_label(level)} interval ({n}): its width is the largest "
                "of them, which such an interval may exceed"
            ]
            if n and too_few(n, level)
            else []
        )
        return [_halfwidths_at(res, level)] * len(X), [list(note) for _ in range(len(X))]
    from companion.energy.models import interval_model

    stub = interval_model(res["residuals"], by_kind, res["train_keys"])
    widths, notes = [], []
    for kinds in stub.novelty(X):
        widths.append({t: stub.halfwidth(t, level, kinds) for t in ("step_s", "energy_per_step_j")})
        few = {
            k: n for k in kinds if (n := len((by_kind.get(k) or {}).get("step_s", ()))) and too_few(n, level)
        }
        notes.append(
            [
                f"too few held-out errors for a {level_label(level)} interval ("
                + ", ".join(f"{n} {NOVELTY_WORDS.get(k, k)}" for k, n in few.items())
                + "): its width there is the largest of them, which such an interval may exceed"
            ]
            if few
            else []
        )
    return widths, notes


# what a planned run is new in (``models.GROUP_KINDS`` and the off-grid kind), as the held-out errors of each say it
NOVELTY_WORDS = {
    "size": "with a model size left out",
    "layout": "with a layout left out",
    "degree": "with a parallel degree left out",
    "mode": "with a parallel mode left out",
    "head_dim": "with a head dimension left out",
    "range": "beyond a fitted range",
    "scale": "above the fitted FLOPs per step",
    "off_grid": "off the grid",
}


def _halfwidths_at(res: dict, level: float) -> dict:
    """Log half-widths at ``level``: conformal from stored held-out residuals where the tier has them."""
    from companion.energy.intervals import bounded_halfwidth

    if res.get("residuals"):
        # too few residuals for the level: the largest of them (as a fitted tier's kind of novelty takes it)
        return {k: bounded_halfwidth(v, level) for k, v in res["residuals"].items()}
    # a stated width (priors: a factor either side at PRIOR_LEVEL), carried to ``level`` as a log-normal
    # error's would be: the quantile ratio of the normal distribution
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    ratio = z((1 + level) / 2) / z((1 + PRIOR_LEVEL) / 2)
    return {k: w * ratio for k, w in res["halfwidth"].items()}


def format_tiered(p: dict) -> str:
    lvl = level_label(p["interval_level"])
    pl = p["plan"]
    lines = [
        f"planned: L{pl['layers']}-h{pl['hidden']}-a{pl['heads']} seq {pl['seq_len']} batch {pl['batch_size']}, "
        f"{p['steps']} steps, tp={pl['tp']} dp={pl['dp']} on {pl['device_name']} ({pl['precision']})",
        f"tier:   {p['tier']} - {p['tier_means']} ({p['source']})",
        f"energy: {p['energy_kwh']:.4g} kWh  [{lvl} interval {p['energy_kwh_interval'][0]:.4g} - "
        f"{p['energy_kwh_interval'][1]:.4g}]  ({'from measured' if p['energy_measured_basis'] else 'from estimated'} power)",
        f"time:   {p['time_h']:.4g} h  [{p['time_h_interval'][0]:.4g} - {p['time_h_interval'][1]:.4g}]",
        f"CO2:    {p['co2_kg']:.4g} kg  [{p['co2_kg_interval'][0]:.4g} - {p['co2_kg_interval'][1]:.4g}] "
        f"at {p['carbon_intensity_g_per_kwh']:.0f} g/kWh ({p['country']})",
        f"model:  eta = {p['eta']:.3f}, mean power {p['mean_power_w']:.4g} W"
        # a GPU plan's energy is every device's: its power is theirs together (CPU ranks share one node)
        + (
            f" (all {pl['tp'] * pl['dp']} GPUs)"
            if pl["device_name"] != "cpu" and pl["tp"] * pl["dp"] > 1
            else ""
        )
        + f", {p['step_s']:.4g} s/step",
        format_memory(p["memory"]),
    ]
    return "\n".join(lines + [f"note: {n}" for n in p["notes"]])


# ----------------------------------------------------------------------------------------------- plan
def model_degrees(devices: int, heads: int, hidden: int) -> list[tuple[int, int]]:
    """(tp, dp) with tp * dp = devices and tp dividing heads and hidden: the layouts the model allows."""
    return [
        (tp, devices // tp) for tp in range(1, devices + 1) if not (devices % tp or heads % tp or hidden % tp)
    ]


def candidate_layouts(devices: int, heads: int, hidden: int, batch_sizes) -> list[tuple[int, int, int]]:
    """(tp, dp, batch) of ``model_degrees`` with dp dividing the batch."""
    return [
        (tp, dp, b) for tp, dp in model_degrees(devices, heads, hidden) for b in batch_sizes if b % dp == 0
    ]


def pareto_front(energy, time) -> list[int]:
    """Indices not dominated in (energy, time): nothing else is at least as good in both and better in one."""
    idx = []
    for i, (e, t) in enumerate(zip(energy, time)):
        if not any((e2 <= e and t2 <= t) and (e2 < e or t2 < t) for e2, t2 in zip(energy, time)):
            idx.append(i)
    return sorted(idx, key=lambda i: energy[i])


def plan_layouts(
    devices: int,
    batch_sizes=(8, 16, 32, 64, 128),
    tier: str | None = None,
    level: float = LEVEL,
    derived_root: Path | None = None,
    devices_root: Path | None = None,
    **request,
) -> dict:
    """Rank every valid layout (TP x FSDP degrees, batch size) of a fine-tune on ``devices`` devices by
    predicted energy and time; the Pareto front and the tier used."""
    if not isinstance(devices, int) or devices < 1:
        raise ConfigError(f"devices={devices!r} must be a positive integer, e.g. --devices 8")
    if not batch_sizes or any(int(b) < 1 for b in batch_sizes):
        raise ConfigError(
            f"batch_sizes={list(batch_sizes)!r} must be positive integers, e.g. --batch-sizes 16,32,64"
        )
    probe = make_plan(**{**request, "tp": 1, "dp": 1, "devices": None, "batch_size": int(batch_sizes[0])})
    sizes = list(dict.fromkeys(int(b) for b in batch_sizes))  # each batch size once, in the order given
    layouts = candidate_layouts(devices, probe.heads, probe.hidden, sizes)
    if not layouts:
        raise ConfigError(
            f"devices={devices}: no TP x FSDP layout divides the heads ({probe.heads}) and the batch "
            "sizes; change --devices or --batch-sizes"
        )
    # a layout whose TP degree divides the model but whose FSDP degree divides none of the batch sizes is said, not
    # dropped silently (3 or 6 devices with the default powers of two)
    skipped = [
        f"tp{tp}-dp{dp} left out: no batch size of {sizes} splits over {dp} FSDP ranks; "
        f"add multiples of {dp} with --batch-sizes"
        for tp, dp in model_degrees(devices, probe.heads, probe.hidden)
        if not any(b % dp == 0 for b in sizes)
    ]
    plans = [
        make_plan(**{**request, "tp": tp, "dp": dp, "devices": devices, "batch_size": b})
        for tp, dp, b in layouts
    ]
    preds = predict_tiered(plans, tier, level, derived_root, devices_root)
    # a layout whose step does not fit its devices' memory is no option: said, not ranked
    misfits = [p for p in preds if not p["memory"]["fits"]]
    preds = [p for p in preds if p["memory"]["fits"]]
    if not preds:
        from companion.energy.memory import misfit_message

        least = min(misfits, key=lambda p: p["memory"]["need_bytes"])
        raise ConfigError(
            f"no layout of {devices} x {plans[0].device_name} fits in memory: even "
            f"tp{least['plan']['tp']}-dp{least['plan']['dp']} at batch {least['plan']['batch_size']}: "
            + misfit_message(least["memory"], plans[0].device_name, fixes="plan")
        )
    if misfits:
        from companion.energy.memory import gb

        m = misfits[0]["memory"]
        skipped.append(
            f"{len(misfits)} layout{'s' if len(misfits) > 1 else ''} left out as they do not fit in memory "
            f"(estimated peak over {m['usable_share']:.0%} of {gb(m['capacity_bytes'])}): "
            + ", ".join(
                f"tp{p['plan']['tp']}-dp{p['plan']['dp']} b{p['plan']['batch_size']} "
                f"({gb(p['memory']['need_bytes'])})"
                for p in misfits
            )
        )
    rows = [
        {
            "tp": p["plan"]["tp"],
            "dp": p["plan"]["dp"],
            "batch_size": p["plan"]["batch_size"],
            "steps": p["steps"],
            "energy_kwh": p["energy_kwh"],
            "energy_kwh_interval": p["energy_kwh_interval"],
            "time_h": p["time_h"],
            "time_h_interval": p["time_h_interval"],
            "co2_kg": p["co2_kg"],
            "co2_kg_interval": p["co2_kg_interval"],
            "eta": p["eta"],
            "mean_power_w": p["mean_power_w"],
            "memory_gb": p["memory"]["need_bytes"] / 1e9,
        }
        for p in preds
    ]
    front = pareto_front([r["energy_kwh"] for r in rows], [r["time_h"] for r in rows])
    for i, r in enumerate(rows):
        r["pareto"] = i in front
    ranked = sorted(rows, key=lambda r: (r["energy_kwh"], r["time_h"]))
    return {
        "tier": preds[0]["tier"],
        "tier_means": preds[0]["tier_means"],
        "source": preds[0]["source"],
        "device_name": plans[0].device_name,
        "devices": devices,
        "interval_level": level,
        "seq_len": plans[0].seq_len,
        "precision": preds[0]["plan"]["precision"],
        "layouts": ranked,
        "pareto_front": [rows[i] for i in front],
        # the ranked plans' warnings (what the tier could not measure of them), each once however many share it
        "notes": [*preds[0]["notes"], *skipped, *dict.fromkeys(w for p in preds for w in p["warnings"])],
    }


def format_plan(p: dict) -> str:
    lvl = level_label(p["interval_level"])
    mem = "memory GB" + (" node" if p["device_name"] == "cpu" else "/GPU")
    cell = lambda v, iv: f"{v:.4g} [{iv[0]:.3g}, {iv[1]:.3g}]"  # noqa: E731
    energy = [cell(r["energy_kwh"], r["energy_kwh_interval"]) for r in p["layouts"]]
    time_h = [cell(r["time_h"], r["time_h_interval"]) for r in p["layouts"]]
    e_head, t_head = f"energy kWh [{lvl}]", f"time h [{lvl}]"
    ew, tw = (max(len(h), *map(len, col)) for h, col in ((e_head, energy), (t_head, time_h)))
    lines = [
        f"{len(p['layouts'])} layouts on {p['devices']} x {p['device_name']}; tier: {p['tier']} - {p['tier_means']}",
        f"{'':2s}{'tp':>3s} {'dp':>3s} {'batch':>6s} {'steps':>8s} {e_head:>{ew}s} {t_head:>{tw}s} "
        f"{'CO2 kg':>9s} {'eta':>6s} {mem:>15s}",
    ]
    for r, e, t in zip(p["layouts"], energy, time_h):
        lines.append(
            f"{'*' if r['pareto'] else ' ':2s}{r['tp']:3d} {r['dp']:3d} {r['batch_size']:6d} {r['steps']:8d} "
            f"{e:>{ew}s} {t:>{tw}s} {r['co2_kg']:9.4g} {r['eta']:6.3f} {r['memory_gb']:15.3g}"
        )
    lines.append(
        "eta: the layout's speedup over one device divided by its device count; memory: the estimated peak "
        "of the longest step"
    )
    lines.append(
        "* on the Pareto front of energy and time ("
        + ", ".join(f"tp{r['tp']}-dp{r['dp']} b{r['batch_size']}" for r in p["pareto_front"])
        + ")"
    )
    return "\n".join(lines + [f"note: {n}" for n in p["notes"]])
