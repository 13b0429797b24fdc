"""The speedup-based hardware-efficiency factor eta(p) = T_1 / (p * T_p).

Measured per configuration from run records, and modelled per (device, mode) with the universal
scalability law (USL) eta(p) = 1 / (1 + sigma (p - 1) + kappa p (p - 1)), sigma, kappa >= 0, so that
degrees never measured can be predicted, with bootstrap uncertainty. With a single measured degree only
sigma is identifiable (kappa is fixed at 0). A 2-D layout without its own fit uses eta_tp(t) * eta_fsdp(d).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from companion.energy.intervals import LEVEL

# Columns that identify "the same fine-tune" apart from its layout.
CONFIG_KEY = [
    "device_name",
    "precision",
    "layers",
    "hidden",
    "heads",
    "ffn",
    "seq_len",
    "lengths",
    "batch_size",
]


def measured_eta(runs: pd.DataFrame) -> pd.DataFrame:
    """Add ``eta`` and ``eta_reference`` to each run: T_ref * p_ref / (p * T_p) within its configuration.

    The reference is the single-device run (p = 1) when it exists (run eager, as every parallel layout is, with
    the parallel ranks' thread budget where one was measured so; the mean over its replicates); otherwise the
    smallest degree measured for that configuration and mode, and ``eta_reference`` says so. The attention
    kernel asked for (``attn``, where the frame has it) is part of the configuration. Only the rows of ``runs``
    are read: a fit that computes eta on its own rows learns nothing from a run left out of it.
    """
    out = runs.copy()
    n = len(out)
    eta, label = np.full(n, np.nan), np.full(n, "", dtype=object)
    if n:
        key = CONFIG_KEY + [c for c in ("attn",) if c in out]
        cfg = out.groupby(key, dropna=False, sort=False).ngroup().to_numpy()
        eager = (
            (out["execution"].astype(str) == "eager").to_numpy() if "execution" in out else np.ones(n, bool)
        )
        p, t = out.world_size.to_numpy(float), out.step_s.to_numpy(float)
        mode = out["mode"].astype(str).to_numpy()
        threads = out.threads_per_rank.to_numpy(float) if "threads_per_rank" in out else np.full(n, np.nan)
        order = np.argsort(cfg, kind="stable")  # each configuration's rows, in the frame's order
        for idx in np.split(order, np.flatnonzero(np.diff(cfg[order])) + 1):
            single, par = idx[p[idx] == 1], idx[p[idx] > 1]
            eta[single], label[single] = 1.0, "p=1"
            for m in dict.fromkeys(mode[par]):
                rows = par[mode[par] == m]
                ref = _same_thread_budget(single[eager[single]], threads, rows)
                if len(ref):
                    ref_p, ref_t, why = 1, t[ref].mean(), "p=1"
                else:
                    first = rows[np.argmin(p[rows])]
                    ref_p, ref_t, why = (
                        int(p[first]),
                        t[first],
                        f"p={int(p[first])} ({m}; no single-device run)",
                    )
                eta[rows] = ref_p * ref_t / (p[rows] * t[rows])
                label[rows] = why
    out["eta"] = eta
    out["eta_reference"] = label
    return out


def _same_thread_budget(single: np.ndarray, threads: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The single-device runs (positions) measured with the per-rank thread budget of ``rows``; all of them
    if none was."""
    if not len(single) or np.isnan(threads[single]).all():
        return single
    budget = threads[rows]
    same = single[np.isin(threads[single], budget[~np.isnan(budget)])]
    return same if len(same) else single


def usl_eta(p, sigma: float, kappa: float):
    p = np.asarray(p, dtype=float)
    return 1.0 / (1.0 + sigma * (p - 1) + kappa * p * (p - 1))


def kappa_fitted(degrees) -> bool:
    """Whether a USL's kappa is fitted: it needs two or more parallel degrees; on one it is fixed at 0 (one point
    on the curve cannot tell it from sigma)."""
    return len(set(degrees)) >= 2


def _fit_usl_points(p: np.ndarray, eta: np.ndarray) -> tuple[float, float]:
    """Non-negative least squares on the linear form 1/eta - 1 = sigma (p-1) + kappa p (p-1).

    kappa is fixed at 0 when fewer than two degrees above 1 were measured (it is not identifiable).
    """
    keep = (p > 1) & np.isfinite(eta) & (eta > 0)
    p, eta = p[keep], eta[keep]
    if len(p) == 0:
        return 0.0, 0.0
    A = np.column_stack([p - 1, p * (p - 1)]) if kappa_fitted(p.tolist()) else (p - 1)[:, None]
    coef, _ = nnls(A, 1.0 / eta - 1.0)
    return float(coef[0]), float(coef[1]) if len(coef) > 1 else 0.0


@dataclass(frozen=True)
class UslFit:
    device_name: str
    mode: str
    sigma: float
    kappa: float
    degrees: list[int]  # distinct p > 1 it was fitted on
    n_points: int
    boot: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 2)))  # (B, 2) sigma, kappa

    def eta(self, p) -> np.ndarray:
        return usl_eta(p, self.sigma, self.kappa)

    def eta_interval(self, p, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
        if not len(self.boot):
            e = self.eta(p)
            return e, e
        draws = np.stack([usl_eta(p, s, k) for s, k in self.boot])
        a = (1 - level) / 2
        return np.quantile(draws, a, axis=0), np.quantile(draws, 1 - a, axis=0)

    def to_json(self) -> dict:
        lo, hi = np.quantile(self.boot, [0.05, 0.95], axis=0) if len(self.boot) else (None, None)
        return {
            "device_name": self.device_name,
            "mode": self.mode,
            "sigma": self.sigma,
            "kappa": self.kappa,
            "degrees": self.degrees,
            "n_points": self.n_points,
            "sigma_ci90": None if lo is None else [float(lo[0]), float(hi[0])],
            "kappa_ci90": None if lo is None else [float(lo[1]), float(hi[1])],
            "boot": self.boot.tolist(),
        }

    @classmethod
    def from_json(cls, d: dict) -> "UslFit":
        return cls(
            d["device_name"],
            d["mode"],
            d["sigma"],
            d["kappa"],
            d["degrees"],
            d["n_points"],
            np.asarray(d.get("boot", []), dtype=float).reshape(-1, 2),
        )


def fit_usl(runs: pd.DataFrame, n_boot: int = 200, seed: int = 0) -> dict[tuple[str, str], UslFit]:
    """One USL fit per (device, mode) over runs with measured eta; the bootstrap resamples measured points.

    The fit depends on the points alone, so it is computed once per set of points: validation fits every law
    on the same held-out folds, and each law's fit needs the same USL. Where the runs carry their step times
    and configurations, eta is measured again on these rows alone: a fold's USL never reads the time of a run
    left out of it (a reference run held out, or dropped as too noisy to fit)."""
    if {"step_s", "mode", "world_size", *CONFIG_KEY} <= set(runs.columns):
        runs = measured_eta(runs)
    data = runs[(runs.world_size > 1) & runs.eta.notna()]
    points = tuple(
        zip(
            data.device_name.astype(str),
            data["mode"].astype(str),
            data.world_size.to_numpy(float).tolist(),
            data.eta.to_numpy(float).tolist(),
        )
    )
    return dict(_fit_usl_points_cached(points, int(n_boot), seed))


@lru_cache(maxsize=256)
def _fit_usl_points_cached(points: tuple, n_boot: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    fits = {}
    data = pd.DataFrame(list(points), columns=["device_name", "mode", "world_size", "eta"])
    for (device, mode), rows in data.groupby(["device_name", "mode"]):
        p, eta = rows.world_size.to_numpy(float), rows.eta.to_numpy(float)
        sigma, kappa = _fit_usl_points(p, eta)
        boot = np.array(
            [_fit_usl_points(p[i], eta[i]) for i in (rng.integers(0, len(p), len(p)) for _ in range(n_boot))]
        )
        fits[(device, mode)] = UslFit(
            device, mode, sigma, kappa, sorted(int(x) for x in np.unique(p)), len(p), boot
        )
    return tuple(fits.items())


def predict_eta(fits: dict, device: str, mode: str, tp, dp) -> np.ndarray:
    """eta for layouts from the fits: its own mode's fit, else (2-D) the TP fit times the FSDP fit.

    A mode with no fit at all predicts eta = 1 (no parallel loss), which the caller should flag.
    """
    tp, dp = np.asarray(tp, dtype=float), np.asarray(dp, dtype=float)
    p = tp * dp
    if mode == "single":
        return np.ones_like(p)
    if (device, mode) in fits:
        return fits[(device, mode)].eta(p)
    if mode == "2d":
        return predict_eta(fits, device, "tp", tp, 1) * predict_eta(fits, device, "fsdp", 1, dp)
    return np.ones_like(p)


def has_eta_model(fits: dict, device: str, mode: str) -> bool:
    if mode == "single" or (device, mode) in fits:
        return True
    return mode == "2d" and (device, "tp") in fits and (device, "fsdp") in fits
