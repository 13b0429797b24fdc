"""Stage 03: fit the efficiency model and every law to a profile's runs; write one JSON artifact.

The laws read eta from the *fitted* USL model, never from the run's own measured speedup, so a law never
sees the time of a run it predicts. Energies measured by a counter and energies estimated by a power model
are never fitted together.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from companion.energy import hardware
from companion.errors import ConfigError
from companion.energy.efficiency import UslFit, fit_usl, has_eta_model, predict_eta
from companion.energy.laws import LAWS, TIME_LAW, Fit, fit_law


def energy_kind(df: pd.DataFrame) -> str:
    """'measured' or 'estimated' for a frame that holds one kind only; an error for a mixed frame."""
    kinds = set(df.energy_measured)
    if len(kinds) != 1:
        raise ConfigError("these runs mix measured and estimated energy; fit each kind separately "
                          "(filter on the energy_measured column)")
    return "measured" if kinds.pop() else "estimated"


def design_matrix(df: pd.DataFrame, usl: dict) -> pd.DataFrame:
    """Law inputs: proxies, eta from the USL fits, and each device's power envelope."""
    X = df.copy()
    X["eta"] = [float(predict_eta(usl, r.device_name, r.mode, r.tp, r.dp)) for r in X.itertuples()]
    X["eta_modelled"] = [has_eta_model(usl, r.device_name, r.mode) for r in X.itertuples()]
    # Energy = metered units x power x T_p, with T_p = T_1 / (p eta). One unit per GPU (device scope: the
    # factor is 1/eta) or per node (node scope, e.g. p CPU ranks sharing one metered node: 1/(p eta)).
    X["time_factor"] = 1.0 / (X.world_size * X.eta)
    X["units_factor"] = X.metered_units * X.time_factor
    X["tdp_w"] = [hardware.device_spec(d).get("tdp_w") for d in X.device_name]
    X["idle_w"] = [hardware.device_spec(d).get("idle_w") for d in X.device_name]
    X["tdp_w"] = X.tdp_w.astype(float)
    X["idle_w"] = X.idle_w.astype(float)
    return X


def fit_all(df: pd.DataFrame, laws=None, n_boot: int = 200, seed: int = 0) -> dict:
    """Fit USL per (device, mode), then every law for energy and the time law; return the artifact."""
    laws = list(laws or LAWS)
    device = _one(df.device_name, "devices")
    kind = energy_kind(df)
    usl = fit_usl(df, n_boot=n_boot, seed=seed)
    X = design_matrix(df, usl)
    energy = {name: fit_law(name, X, "energy_per_step_j", n_boot, seed).to_json() for name in laws}
    time = fit_law(TIME_LAW, X, "step_s", n_boot, seed).to_json()
    return {
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
        self.usl = {(u["device_name"], u["mode"]): UslFit.from_json(u) for u in artifact["usl"]}
        self.energy = {k: Fit.from_json(v) for k, v in artifact["energy_laws"].items()}
        self.time = Fit.from_json(artifact["time_law"])

    @classmethod
    def load(cls, path: Path) -> "FittedModel":
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"fit artifact {str(path)!r} does not exist; run `make fit PROFILE=<profile>` first")
        return cls(json.loads(path.read_text()), path)

    def coefficient_table(self) -> pd.DataFrame:
        return pd.concat([f.coefficient_table() for f in [*self.energy.values(), self.time]], ignore_index=True)
