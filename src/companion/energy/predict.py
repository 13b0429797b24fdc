"""Predict a planned fine-tune's energy, time and CO2 before running it, with intervals.

    companion predict --model bert-base --seq-len 128 --batch-size 32 --examples 100000 --epochs 3 \
        --device H100 --devices 8 --tp 2 --dp 4 --country FRA

Uses a fit artifact of stage 03 (``data/derived/<profile>/fit.json``) made from runs on the same device
type: energy per step from the chosen law, step time from the time law, both times the number of steps.
Intervals are the laws' bootstrap prediction intervals. It warns when the request lies outside the range
the law was fitted on, and refuses unknown devices, impossible layouts and devices with no fit.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from companion.energy import hardware, proxies
from companion.runs.carbon import J_PER_KWH, carbon_intensity
from companion.errors import ConfigError
from companion.runs.config import DataConfig, Layout, LengthDist, build_run
from companion.runs.data import expected_token_counts
from companion.energy.fit import FittedModel, design_matrix
from companion.energy.laws import LAWS, TIME_LAW
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


def make_plan(model: str | None = None, layers=None, hidden=None, heads=None, ffn=0, vocab=30522, max_positions=512,
              seq_len=128, lengths: str | LengthDist | None = None, batch_size=32, tokens=None, examples=None,
              epochs=1.0, tp=1, dp=1, device="cpu", devices=None, precision=None, country="USA") -> Plan:
    """Validate a request and turn tokens or examples x epochs into optimizer steps."""
    from companion.runs.config import parse_lengths

    for flag, value in (("--tokens", tokens), ("--examples", examples), ("--epochs", epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise ConfigError(f"{flag} {value!r} must be a finite number above 0, e.g. {flag} 100000"
                              if flag != "--epochs" else f"--epochs {value!r} must be a finite number above 0, e.g. --epochs 3")
    if precision is not None and precision not in ("fp32", "bf16"):
        raise ConfigError(f"--precision {precision!r} is unknown; use fp32 or bf16")

    if model is not None:
        if model not in NAMED_SIZES:
            raise ConfigError(f"model {model!r} is not a named size; use one of {', '.join(NAMED_SIZES)} "
                              "or give --layers/--hidden/--heads")
        layers, hidden, heads = NAMED_SIZES[model]
    if None in (layers, hidden, heads):
        raise ConfigError("give a named --model (e.g. bert-base) or all of --layers, --hidden, --heads")
    hardware.device_spec(device)  # unknown device -> clear error
    if devices is not None and devices != tp * dp:
        raise ConfigError(f"--devices {devices} != tp*dp = {tp}*{dp} = {tp * dp}; "
                          "a layout uses exactly tp*dp devices: change --devices, --tp or --dp")
    if isinstance(lengths, str):
        lengths = parse_lengths(lengths)
    lengths = lengths or LengthDist()
    # The run configuration validates the shape and layout exactly as a real run would.
    build_run({"layers": layers, "hidden": hidden, "heads": heads, "ffn": ffn, "vocab": vocab,
               "max_positions": max_positions, "seq_len": seq_len, "lengths": lengths, "batch_size": batch_size,
               "tp": tp, "dp": dp, "country": country})
    data = DataConfig(seq_len=seq_len, batch_size=batch_size, lengths=lengths)
    if (tokens is None) == (examples is None):
        raise ConfigError("give the training amount as --tokens N or as --examples N (with --epochs E)")
    if tokens is not None:
        per_step = expected_token_counts(data, dp).real
        steps = math.ceil(tokens / per_step)
    else:
        steps = math.ceil(examples * epochs / batch_size)
    if steps < 1:
        raise ConfigError("the training amount gives no optimizer step; raise --tokens or --examples")
    return Plan(layers, hidden, heads, seq_len, batch_size, steps, tp, dp, device, lengths, ffn, vocab,
                max_positions, precision, country)


def find_fit(device: str, root: Path | None = None) -> Path:
    """The fit artifact made from runs on ``device`` with the most runs."""
    root = root or data_dir() / "derived"
    candidates, have = [], set()
    for path in sorted(root.glob("*/fit.json")):
        try:  # one broken fit (another profile's) must not stop predictions for every device
            art = json.loads(path.read_text(encoding="utf-8"))
            name, n_runs = art["device_name"], int(art["n_runs"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
            print(f"warning: skipping the corrupt fit artifact {path} ({type(exc).__name__}); re-make it with "
                  "stage 03", file=sys.stderr)
            continue
        have.add(name)
        if name == device:
            candidates.append((n_runs, path))
    if not candidates:
        raise ConfigError(
            f"no fitted law for device {device!r} (fits exist for: {', '.join(have) or 'none'}); measure runs on "
            f"a {device} with `make reproduce PROFILE=gpu-1` (or gpu-node) to fit one, or pass --fit PATH"
        )
    return max(candidates)[1]


def plan_frame(plan: Plan, fitted: FittedModel) -> pd.DataFrame:
    """The one-row frame of proxies a law reads, for the planned fine-tune."""
    art = fitted.artifact
    if plan.device_name != art["device_name"]:
        raise ConfigError(f"the fit {fitted.path} was measured on {art['device_name']!r}, not {plan.device_name!r}; "
                          "use a fit from the same device type")
    precision = plan.precision or art["precision"][0]
    ffn = plan.ffn or 4 * plan.hidden
    tokens = expected_token_counts(DataConfig(seq_len=plan.seq_len, batch_size=plan.batch_size, lengths=plan.lengths),
                                   plan.dp)
    shape = proxies.StepShape(plan.layers, plan.hidden, plan.heads, ffn, plan.vocab, plan.max_positions, 2,
                              plan.batch_size, tokens.padded, tokens.attention_pairs, plan.tp, plan.dp, precision)
    row = {
        **proxies.step_proxies(shape),
        "device_name": plan.device_name, "precision": precision, "mode": Layout(plan.tp, plan.dp).mode,
        "tp": plan.tp, "dp": plan.dp, "world_size": plan.tp * plan.dp, "padded_tokens": tokens.padded,
        "real_tokens": tokens.real, "peak_flops_per_s": art["peak_flops_per_s"],
        "bandwidth_bytes_per_s": art["bandwidth_bytes_per_s"],
        # as the fitted runs were metered: one unit per GPU, or one per node shared by its ranks
        "metered_units": plan.tp * plan.dp if art["energy_scope"] == "device" else 1,
    }
    return design_matrix(pd.DataFrame([row]), fitted.usl)


def predict(plan: Plan, fitted: FittedModel, law: str = "roofline_power_law", level: float = 0.9) -> dict:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ConfigError(f"--level {level!r} must lie strictly between 0 and 1, e.g. --level 0.9 for a 90 % interval")
    if law not in fitted.energy:
        raise ConfigError(f"law {law!r} is not in the fit artifact; use one of {', '.join(fitted.energy)}")
    if LAWS[law].uses_measured_time:
        raise ConfigError(f"law {law!r} needs the run's measured time, which a prediction does not have; "
                          "use roofline_power_law or energy_roofline")
    X = plan_frame(plan, fitted)
    fit = fitted.energy[law]
    e_step = float(fit.predict(X)[0])
    e_lo, e_hi = (float(v[0]) for v in fit.interval(X, level))
    t_step = float(fitted.time.predict(X)[0])
    t_lo, t_hi = (float(v[0]) for v in fitted.time.interval(X, level))
    intensity = carbon_intensity(plan.country)
    kwh = lambda j: j * plan.steps / J_PER_KWH  # noqa: E731
    co2 = lambda j: kwh(j) * intensity["g_per_kwh"] / 1000  # noqa: E731
    warnings = []
    for col, (lo, hi) in fit.ranges.items():
        v = float(X[col].iloc[0])
        if not lo <= v <= hi:
            warnings.append(f"{col} = {v:.3g} lies outside the fitted range [{lo:.3g}, {hi:.3g}]: extrapolation")
    asked = {"layers": plan.layers, "hidden": plan.hidden, "heads": plan.heads, "ffn": plan.ffn or 4 * plan.hidden,
             "vocab": plan.vocab, "seq_len": plan.seq_len, "batch_size": plan.batch_size, "tp": plan.tp,
             "dp": plan.dp, "world_size": plan.tp * plan.dp}
    for col, (lo, hi) in fitted.artifact.get("input_ranges", {}).items():
        if col in asked and not lo <= asked[col] <= hi:
            warnings.append(f"{col} = {asked[col]:g} lies outside the fitted range [{lo:g}, {hi:g}]: extrapolation")
    fitted_precisions = fitted.artifact["precision"]
    if plan.precision is not None and plan.precision not in fitted_precisions:
        warnings.append(f"precision {plan.precision} was not measured: the fit holds {', '.join(fitted_precisions)} "
                        "runs only, so the prediction extrapolates across precisions")
    for w in fitted.artifact.get("warnings", []):  # the fit's flags on the laws this prediction uses
        if any(f"{name} " in w for name in (law, TIME_LAW)) or not any(f"{name} " in w for name in LAWS):
            warnings.append(f"fit: {w}")
    if not bool(X.eta_modelled.iloc[0]):
        warnings.append(f"no efficiency model for {X['mode'].iloc[0]} on {plan.device_name}: eta = 1 assumed")
    return {
        "plan": {**{k: v for k, v in plan.__dict__.items() if k != "lengths"}, "lengths": plan.lengths.__dict__},
        "law": law, "interval_level": level, "fit": str(fitted.path) if fitted.path else None,
        "fit_energy_kind": fitted.artifact["energy_kind"], "fit_device": fitted.artifact["device_name"],
        "steps": plan.steps, "flops_per_step": float(X.flops_per_step.iloc[0]), "eta": float(X.eta.iloc[0]),
        "energy_kwh": kwh(e_step), "energy_kwh_interval": [kwh(e_lo), kwh(e_hi)],
        "time_h": t_step * plan.steps / 3600, "time_h_interval": [t_lo * plan.steps / 3600, t_hi * plan.steps / 3600],
        "co2_kg": co2(e_step), "co2_kg_interval": [co2(e_lo), co2(e_hi)],
        "carbon_intensity_g_per_kwh": intensity["g_per_kwh"], "country": intensity["country"],
        "warnings": warnings,
    }


def format_prediction(p: dict, warnings: bool = True) -> str:
    """The prediction as text; ``warnings=False`` leaves the warnings out (the command prints them on stderr)."""
    lvl = int(p["interval_level"] * 100)
    kind = p["fit_energy_kind"]
    lines = [
        f"planned: L{p['plan']['layers']}-h{p['plan']['hidden']}-a{p['plan']['heads']} seq {p['plan']['seq_len']} "
        f"batch {p['plan']['batch_size']}, {p['steps']} steps, tp={p['plan']['tp']} dp={p['plan']['dp']} "
        f"on {p['plan']['device_name']}",
        f"energy: {p['energy_kwh']:.4g} kWh  [{lvl}% interval {p['energy_kwh_interval'][0]:.4g} - "
        f"{p['energy_kwh_interval'][1]:.4g}]  (law fitted on {kind} energy)",
        f"time:   {p['time_h']:.4g} h  [{p['time_h_interval'][0]:.4g} - {p['time_h_interval'][1]:.4g}]",
        f"CO2:    {p['co2_kg']:.4g} kg  [{p['co2_kg_interval'][0]:.4g} - {p['co2_kg_interval'][1]:.4g}] "
        f"at {p['carbon_intensity_g_per_kwh']:.0f} g/kWh ({p['country']})",
        f"law: {p['law']}; fit: {p['fit']}",
    ]
    if warnings:
        lines += [f"warning: {w}" for w in p["warnings"]]
    return "\n".join(lines)
