"""Stage 03: fit the efficiency model and every law to a profile's runs; write one JSON artifact.

The laws read eta from the *fitted* USL model, never from the run's own measured speedup, so a law never
sees the time of a run it predicts. Energies measured by a counter and energies estimated by a power model
are never fitted together.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from companion.energy import hardware
from companion.errors import ConfigError
from companion.energy.efficiency import UslFit, fit_usl, has_eta_model, predict_eta
from companion.energy.laws import LAWS, TIME_LAW, Fit, fit_law


def energy_kind(df: pd.DataFrame) -> str:
    """'measured' or 'estimated' for a frame that holds one kind only; an error for a mixed frame."""
    kinds = set(df.energy_measured)
    if len(kinds) != 1:
        raise ConfigError(
            "these runs mix measured and estimated energy; fit each kind separately "
            "(filter on the energy_measured column)"
        )
    return "measured" if kinds.pop() else "estimated"


def design_matrix(df: pd.DataFrame, usl: dict) -> pd.DataFrame:
    """Law inputs: proxies, eta from the USL fits, and each device's power envelope (computed on arrays:
    validation builds thousands of these)."""
    keys = list(zip(*(df[c].tolist() for c in ("device_name", "mode", "tp", "dp"))))
    eta = {
        k: (float(predict_eta(usl, k[0], k[1], k[2], k[3])), has_eta_model(usl, k[0], k[1]))
        for k in set(keys)
    }
    eta_values = np.array([eta[k][0] for k in keys], float)
    # Energy = metered units x power x T_p, with T_p = T_1 / (p eta). One unit per GPU (device scope: the
    # factor is 1/eta) or per node (node scope, e.g. p CPU ranks sharing one metered node: 1/(p eta)).
    time_factor = 1.0 / (df.world_size.to_numpy() * eta_values)
    devices = [k[0] for k in keys]
    specs = {d: hardware.device_spec(d) for d in set(devices)}
    new = {
        "eta": eta_values,
        "eta_modelled": np.array([eta[k][1] for k in keys], bool),
        "time_factor": time_factor,
        "units_factor": df.metered_units.to_numpy() * time_factor,
        "tdp_w": np.array([specs[d].get("tdp_w") for d in devices], float),
        "idle_w": np.array([specs[d].get("idle_w") for d in devices], float),
    }
    fresh = [c for c in new if c not in df.columns]  # appended at once (one by one costs several times more)
    X = pd.concat([df, pd.DataFrame({c: new[c] for c in fresh}, index=df.index)], axis=1)
    for column in (c for c in new if c not in fresh):  # replaced where they stand
        X[column] = new[column]
    return X


def check_n_boot(n_boot) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ConfigError(
            f"n_boot={n_boot!r} must be a positive integer (bootstrap replicates for the intervals); "
            "set n_boot to e.g. 200 in params/03_fit.yaml (50 in params/04_validation.yaml)"
        )


# Each law's inputs that must vary independently for its coefficients to be identified (None: distinct rows).
_IDENTIFYING = {
    "roofline_power_law": lambda X: [np.ones(len(X)), np.log(X.flops_per_step), np.log(X.bytes_per_step)],
    "flops_power_law": lambda X: [np.ones(len(X)), np.log(X.flops_per_step)],
    "tokens_linear": lambda X: [np.ones(len(X)), X.padded_tokens.to_numpy(float)],
}
# Inputs reported with their fitted range, so that `predict` warns when a request lies outside it.
INPUT_COLUMNS = (
    "layers",
    "hidden",
    "heads",
    "ffn",
    "vocab",
    "seq_len",
    "batch_size",
    "tp",
    "dp",
    "world_size",
)


def check_design(df: pd.DataFrame, laws=None) -> list[str]:
    """Refuse designs that cannot identify the paper's law; return warnings for the laws barely identified.

    A law with k coefficients needs at least k distinct configurations (and, for the log-linear laws, inputs
    that vary independently: the design's rank is k). Short of that, the paper's law (which predictions and
    the time law use) is refused; a baseline is flagged. Exactly k leaves no residual, so its intervals say
    nothing: flagged, not refused.
    """
    if len(df) == 0:
        raise ConfigError(
            "there are no finished runs to fit; run the sweep (companion sweep --profile <name>) first"
        )
    for col in ("energy_per_step_j", "step_s"):
        if col in df and not np.isfinite(pd.to_numeric(df[col], errors="coerce")).all():
            raise ConfigError(
                f"some runs have no finite {col}; they cannot be fitted: re-run them or drop them"
            )
    cols = [c for c in ("flops_per_step", "bytes_per_step", "world_size", "padded_tokens") if c in df]
    distinct = len(df[cols].round(6).drop_duplicates()) if cols else len(df)
    warnings = []
    for name in [*(laws or LAWS), TIME_LAW]:
        k = len(LAWS[name].params)
        rank = distinct
        if name in _IDENTIFYING:
            A = np.column_stack(_IDENTIFYING[name](df)).astype(float)
            rank = min(distinct, int(np.linalg.matrix_rank(A)))
        if rank < k:
            msg = (
                f"the runs hold {distinct} distinct configuration(s) but law {name} has {k} coefficients "
                f"({', '.join(LAWS[name].params)}) and they vary in only {rank} independent direction(s)"
            )
            if name == TIME_LAW or name == "roofline_power_law":  # the law predictions rest on: refused
                raise ConfigError(
                    f"{msg}; add configurations of other sizes (layers, hidden, seq_len) to the profile"
                )
            warnings.append(f"{msg}: its coefficients are not identified (a baseline, kept for comparison)")
        elif distinct == k:
            warnings.append(
                f"law {name} has as many coefficients as distinct configurations ({k}): it interpolates "
                "them exactly and its intervals are not informative; add configurations"
            )
    return warnings


def _check_signs(name: str, fit: Fit, target: str, warnings: list[str]) -> None:
    """Energy and time grow with compute: a negative compute exponent of the paper's law or the FLOPs-only
    baseline is flagged in ``warnings`` (the fit page shows it, and every prediction with the law carries it).

    It is not refused: it is a finding about these runs (a sweep too small or too noisy to separate F from Q
    and the parallel overhead), and the operator roofline, which does not rest on it, still predicts."""
    if name not in ("roofline_power_law", "flops_power_law"):
        return
    alpha = float(fit.theta[1])
    if alpha < 0:
        warnings.append(
            f"the fitted compute exponent of {name} for {target} is alpha = {alpha:.3g} < 0 (it falls "
            "as FLOPs grow, which is unphysical): the runs do not pin the law down and its predictions "
            "shrink as the model grows; add configurations of other sizes (layers, hidden, seq_len) "
            "to the profile"
        )


def fit_all(df: pd.DataFrame, laws=None, n_boot: int = 200, seed: int = 0) -> dict:
    """Fit USL per (device, mode), then every law for energy and the time law; return the artifact.

    Degenerate designs are refused or flagged (:func:`check_design`); the flags go to ``warnings``.
    """
    check_n_boot(n_boot)
    laws = list(laws or LAWS)
    device = _one(df.device_name, "devices")
    kind = energy_kind(df)
    warnings = check_design(df, laws)
    usl = fit_usl(df, n_boot=n_boot, seed=seed)
    X = design_matrix(df, usl)
    energy = {}
    for name in laws:
        fit = fit_law(name, X, "energy_per_step_j", n_boot, seed)
        _check_signs(name, fit, "energy", warnings)
        energy[name] = fit.to_json()
    time_fit = fit_law(TIME_LAW, X, "step_s", n_boot, seed)
    _check_signs(TIME_LAW, time_fit, "time", warnings)
    time = time_fit.to_json()
    inputs = {c: [float(df[c].min()), float(df[c].max())] for c in INPUT_COLUMNS if c in df}
    return {
        "warnings": warnings,
        "input_ranges": inputs,
        "device_name": device,
        "energy_kind": kind,
        "energy_source": sorted(set(df.energy_source)),
        # "device": one meter per GPU; "node": one meter per node shared by its ranks (e.g. CPU ranks)
        "energy_scope": _one(df.energy_scope, "energy scopes"),
        "n_runs": len(df),
        "usl": [f.to_json() for f in usl.values()],
        "energy_laws": energy,
        "time_law": time,
        "runs": sorted(df.run_id),
        "peak_flops_per_s": float(df.peak_flops_per_s.iloc[0]),
        "bandwidth_bytes_per_s": float(df.bandwidth_bytes_per_s.iloc[0]),
        "precision": sorted(set(df.precision)),
    }


def _one(values: pd.Series, what: str):
    distinct = sorted(set(values))
    if len(distinct) != 1:
        raise ConfigError(f"these runs mix {what} ({', '.join(map(str, distinct))}); fit them separately")
    return distinct[0]


class FittedModel:
    """A fit artifact loaded back: USL fits, energy laws and the time law."""

    def __init__(self, artifact: dict, path: Path | None = None):
        self.artifact, self.path = artifact, path
        for key in (
            "device_name",
            "energy_kind",
            "energy_scope",
            "precision",
            "peak_flops_per_s",
            "bandwidth_bytes_per_s",
        ):
            artifact[key]  # noqa: B018  (a KeyError names the missing key)
        self.usl = {(u["device_name"], u["mode"]): UslFit.from_json(u) for u in artifact["usl"]}
        self.energy = {k: Fit.from_json(v) for k, v in artifact["energy_laws"].items()}
        self.time = Fit.from_json(artifact["time_law"])

    @classmethod
    def load(cls, path: Path) -> "FittedModel":
        """Read a fit artifact; a missing, corrupt or malformed file is a ConfigError naming it."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"fit artifact {str(path)!r} does not exist; run `make fit PROFILE=<profile>` first"
            )
        fix = "re-make it with `make fit PROFILE=<profile>` (stage 03), or pass another --fit"
        try:
            artifact = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"fit artifact {path} is corrupt ({exc}); {fix}") from None
        try:
            return cls(artifact, path)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ConfigError(f"fit artifact {path} is not a fit (missing or bad {exc}); {fix}") from None

    def coefficient_table(self) -> pd.DataFrame:
        return pd.concat(
            [f.coefficient_table() for f in [*self.energy.values(), self.time]], ignore_index=True
        )
