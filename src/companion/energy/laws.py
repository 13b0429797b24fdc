"""Energy laws and baselines: small named models with one interface, fitted with scipy.

Every law predicts the energy of one training step (J) from a frame with the columns

    flops_per_step, bytes_per_step     proxies (companion.energy.proxies), all ranks together
    eta                                the efficiency factor for the row's layout (from a fitted USL model)
    time_factor                        1 / (p eta): T_p = T_1 * time_factor
    metered_units                      GPUs metered (device scope) or nodes metered (node scope)
    units_factor                       metered_units * time_factor: how the layout scales single-device
                                       energy (1/eta on GPUs; 1/(p eta) for p CPU ranks on one metered node)
    world_size, padded_tokens          layout and tokens
    peak_flops_per_s, bandwidth_bytes_per_s, tdp_w, idle_w   the device's roofs and power envelope
    step_s                             measured time: read when fitting the time roofline on training rows;
                                       at prediction only by laws marked ``uses_measured_time``

and the same form with ``time`` as the target predicts the step time (s) where a law has a time form.

Fitting: point estimate by least squares on log (relative) errors; coefficient intervals and prediction
intervals by a case bootstrap (refit on resampled rows; predictions add a resampled training residual).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, lsq_linear, nnls

from companion.errors import ConfigError
from companion.energy.intervals import LEVEL


@dataclass(frozen=True)
class Law:
    name: str
    label: str
    description: str
    params: tuple[str, ...]
    uses_measured_time: bool = False
    baseline: bool = False

    # -- to be provided per law
    def fit_point(self, X: pd.DataFrame, y: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """Least-squares coefficients; ``start`` (the full-data fit) warm-starts bootstrap refits."""
        raise NotImplementedError  # pragma: no cover - abstract

    def predict(self, X: pd.DataFrame, theta: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


def _ols(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    theta, *_ = np.linalg.lstsq(A, b, rcond=None)
    return theta


def _log_units(X) -> np.ndarray:
    return np.log(np.clip(X["units_factor"].to_numpy(float), 1e-9, None))


class RooflinePowerLaw(Law):
    """The paper's law: E = c * F^alpha * Q^beta / eta(p), fitted in log space (1/eta generalised to
    units / (p eta) for node-scope meters)."""

    def fit_point(self, X, y, start=None):
        A = np.column_stack([np.ones(len(X)), np.log(X.flops_per_step), np.log(X.bytes_per_step)])
        return _ols(A, np.log(y) - _log_units(X))

    def predict(self, X, theta):
        return np.exp(
            theta[0]
            + theta[1] * np.log(X.flops_per_step)
            + theta[2] * np.log(X.bytes_per_step)
            + _log_units(X)
        )


class EnergyRoofline(Law):
    """E = eps_F * F + eps_Q * Q + P0 * units * T_p, with T_p from a calibrated time roofline:

        T_p = max(F / (u * peak), Q / (v * bandwidth)) / (p * eta)

    Fitted in two stages, because P0 and the utilisations u, v are not separately identifiable from energy
    alone (only P0/u and P0/v are): (1) u, v in (0, 1] from the training runs' measured step times;
    (2) eps_F, eps_Q >= 0 and P0 within [idle, TDP] of the device by bounded linear least squares on
    relative errors. A prediction reads only the proxies.
    """

    _TIME_COLUMNS = (
        "flops_per_step",
        "peak_flops_per_s",
        "bytes_per_step",
        "bandwidth_bytes_per_s",
        "time_factor",
    )

    @staticmethod
    def _time_of(cols, u, v) -> np.ndarray:
        flops, peak, nbytes, bandwidth, factor = cols
        return np.maximum(flops / (u * peak), nbytes / (v * bandwidth)) * factor

    @classmethod
    def _time_columns(cls, X) -> list[np.ndarray]:
        return [X[c].to_numpy(float) for c in cls._TIME_COLUMNS]

    @classmethod
    def _time(cls, X, u, v) -> np.ndarray:
        return cls._time_of(cls._time_columns(X), u, v)

    def fit_point(self, X, y, start=None):
        log_t = np.log(X.step_s.to_numpy(float))
        uv0 = np.asarray(start[3:], float) if start is not None else np.array([0.3, 0.3])
        cols = self._time_columns(X)  # once, not at every residual evaluation
        sol = least_squares(
            lambda z: np.log(self._time_of(cols, z[0], z[1])) - log_t,
            np.clip(uv0, 1e-6, 1.0),
            bounds=([1e-6, 1e-6], [1.0, 1.0]),
        )
        u, v = sol.x
        low = float(np.nanmax(X.idle_w)) if X.idle_w.notna().any() else 0.0
        high = float(np.nanmin(X.tdp_w)) if X.tdp_w.notna().any() else np.inf
        static = self._time(X, u, v) * X.metered_units.to_numpy(float)
        A = (
            np.column_stack([X.flops_per_step.to_numpy(float), X.bytes_per_step.to_numpy(float), static])
            / y[:, None]
        )
        scale = np.abs(A).max(axis=0)
        scale[scale == 0] = 1.0
        res = lsq_linear(
            A / scale,
            np.ones(len(y)),
            bounds=(np.array([0, 0, low]) * scale, np.array([np.inf, np.inf, high]) * scale),
        )
        eps_f, eps_q, p0 = res.x / scale
        return np.array([eps_f, eps_q, p0, u, v])

    def decompose(self, X, theta) -> pd.DataFrame:
        """The three parts of predicted energy per step (J): compute, memory, static."""
        return pd.DataFrame(
            {
                "compute_j": theta[0] * X.flops_per_step.to_numpy(float),
                "memory_j": theta[1] * X.bytes_per_step.to_numpy(float),
                "static_j": theta[2] * self._time(X, theta[3], theta[4]) * X.metered_units.to_numpy(float),
            },
            index=X.index,
        )

    def predict(self, X, theta):
        return self.decompose(X, theta).sum(axis=1).to_numpy(float)


class TokensLinear(Law):
    """Wang et al. 2023: energy tracks tokens processed, padding included: E = a * tokens + b."""

    def fit_point(self, X, y, start=None):
        T = X.padded_tokens.to_numpy(float)
        # minimise relative errors sum(((a T + b) / y - 1)^2) with a, b >= 0; scale a for conditioning
        scale = float(np.median(y / T))
        coef, _ = nnls(np.column_stack([T * scale / y, 1.0 / y]), np.ones(len(y)))
        return np.array([coef[0] * scale, coef[1]])

    def predict(self, X, theta):
        return theta[0] * X.padded_tokens.to_numpy(float) + theta[1]


class FlopsPowerLaw(Law):
    """Compute only (C = 6ND style): E = c * F^alpha."""

    def fit_point(self, X, y, start=None):
        return _ols(np.column_stack([np.ones(len(X)), np.log(X.flops_per_step)]), np.log(y))

    def predict(self, X, theta):
        return np.exp(theta[0] + theta[1] * np.log(X.flops_per_step))


class TdpTime(Law):
    """Fitted power x measured time: E = k * units * TDP * T_measured (k: mean fraction of TDP drawn).

    Where the hardware table has no TDP for the device (a CPU), TDP is taken as 1 W and k is a fitted
    constant power in W; either way the law is one fitted power times the measured time.

    Reads the run's *measured* step time, so it is an after-the-fact estimate, not a pre-run prediction.
    """

    def fit_point(self, X, y, start=None):
        base = X.metered_units * X.tdp_w.fillna(1.0) * X.step_s
        return np.array([float(np.exp(np.median(np.log(y / base))))])

    def predict(self, X, theta):
        return (theta[0] * X.metered_units * X.tdp_w.fillna(1.0) * X.step_s).to_numpy(float)


LAWS: dict[str, Law] = {
    law.name: law
    for law in (
        RooflinePowerLaw(
            "roofline_power_law",
            "roofline power law (paper)",
            "E = c F^alpha Q^beta / eta(p)",
            ("log_c", "alpha", "beta"),
        ),
        EnergyRoofline(
            "energy_roofline",
            "energy roofline",
            "E = eps_F F + eps_Q Q + P0 units T_p, T_p = max(F/(u peak), Q/(v bw))/(p eta)",
            ("eps_F_j_per_flop", "eps_Q_j_per_byte", "P0_w", "u_compute", "v_memory"),
        ),
        TokensLinear(
            "tokens_linear",
            "tokens-linear (Wang et al. 2023)",
            "E = a tokens + b",
            ("a_j_per_token", "b_j"),
            baseline=True,
        ),
        FlopsPowerLaw(
            "flops_power_law", "FLOPs-only power law", "E = c F^alpha", ("log_c", "alpha"), baseline=True
        ),
        TdpTime(
            "tdp_time",
            "fitted power × measured time",
            "E = k units TDP T_measured",
            ("k",),
            uses_measured_time=True,
            baseline=True,
        ),
    )
}

# The time forms used by `companion predict` (step time from the same proxies).
TIME_LAW = "roofline_power_law"


def get_law(name: str) -> Law:
    if name not in LAWS:
        raise ConfigError(f"law {name!r} is unknown; use one of {', '.join(LAWS)}")
    return LAWS[name]


@dataclass
class Fit:
    """A law fitted to data, with bootstrap replicates for intervals."""

    law: str
    target: str  # "energy_per_step_j" or "step_s"
    theta: np.ndarray
    boot: np.ndarray  # (B, k) refits on resampled rows
    log_residuals: np.ndarray  # training residuals, log(measured / predicted)
    n_train: int
    ranges: dict = field(default_factory=dict)  # training range of each input, for extrapolation warnings

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return LAWS[self.law].predict(X, self.theta)

    def interval(self, X: pd.DataFrame, level: float = LEVEL, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap prediction interval: refitted predictions times a resampled training residual."""
        rng = np.random.default_rng(seed)
        law = LAWS[self.law]
        preds = (
            np.stack([law.predict(X, th) for th in self.boot]) if len(self.boot) else self.predict(X)[None]
        )
        noise = rng.choice(self.log_residuals, size=preds.shape) if len(self.log_residuals) else 0.0
        draws = np.log(np.clip(preds, 1e-300, None)) + noise
        a = (1 - level) / 2
        return np.exp(np.quantile(draws, a, axis=0)), np.exp(np.quantile(draws, 1 - a, axis=0))

    def coefficient_table(self, level: float = LEVEL) -> pd.DataFrame:
        a = (1 - level) / 2
        lo = np.quantile(self.boot, a, axis=0) if len(self.boot) else self.theta
        hi = np.quantile(self.boot, 1 - a, axis=0) if len(self.boot) else self.theta
        return pd.DataFrame(
            {
                "law": self.law,
                "target": self.target,
                "param": LAWS[self.law].params,
                "value": self.theta,
                "lo": lo,
                "hi": hi,
            }
        )

    def to_json(self) -> dict:
        return {
            "law": self.law,
            "target": self.target,
            "theta": self.theta.tolist(),
            "boot": self.boot.tolist(),
            "log_residuals": self.log_residuals.tolist(),
            "n_train": self.n_train,
            "ranges": self.ranges,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Fit":
        return cls(
            d["law"],
            d["target"],
            np.asarray(d["theta"], float),
            np.asarray(d["boot"], float),
            np.asarray(d["log_residuals"], float),
            d["n_train"],
            d.get("ranges", {}),
        )


RANGE_COLUMNS = ("flops_per_step", "bytes_per_step", "world_size", "padded_tokens")


def _range(values: np.ndarray) -> list[float]:
    """[min, max] of the values, NaN skipped as pandas skips it (nan for both where none is left)."""
    values = values[~np.isnan(values)]
    return [float(values.min()), float(values.max())] if len(values) else [float("nan")] * 2


def fit_law(
    name: str, X: pd.DataFrame, target: str = "energy_per_step_j", n_boot: int = 200, seed: int = 0
) -> Fit:
    law = get_law(name)
    y = X[target].to_numpy(float)
    theta = law.fit_point(X, y)
    resid = np.log(y) - np.log(np.clip(law.predict(X, theta), 1e-300, None))
    boot = []
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        # the laws read numeric columns only: resampling one float block is a fraction of resampling the frame
        numeric = X.select_dtypes("number")
        Xn = pd.DataFrame(numeric.to_numpy(float), index=X.index, columns=numeric.columns)
        for _ in range(n_boot):
            idx = rng.integers(0, len(X), len(X))
            try:
                boot.append(law.fit_point(Xn.iloc[idx], y[idx], start=theta))
            except (ValueError, np.linalg.LinAlgError):
                continue
    ranges = {c: _range(X[c].to_numpy(float)) for c in RANGE_COLUMNS if c in X}
    return Fit(
        name,
        target,
        np.asarray(theta, float),
        np.asarray(boot, float).reshape(-1, len(theta)),
        resid,
        len(X),
        ranges,
    )
