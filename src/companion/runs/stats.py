"""Small statistics used by the measurement protocol."""

from __future__ import annotations

import math
from statistics import mean, median, stdev


# Two-sided 95 % Student-t quantiles for 1..30 degrees of freedom (scipy.stats.t.ppf(0.975, dof), 6 digits);
# above 30 the Cornish-Fisher expansion around the normal quantile is within 1e-7 relative. No scipy needed
# at run time (tests/runs/test_train.py checks the table against scipy).
_T975 = (
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.13145,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.04523,
    2.042272,
)
_Z975 = 1.959963984540054


def t_quantile_975(dof: int) -> float:
    """Two-sided 95 % Student-t quantile (``dof`` >= 1)."""
    if dof < 1:
        raise ValueError(f"dof={dof} must be at least 1")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z, n = _Z975, float(dof)
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4)
    )


def ci95_halfwidth(samples: list[float]) -> float:
    """Half-width of the 95 % confidence interval of the mean (inf with fewer than two samples)."""
    if len(samples) < 2:
        return math.inf
    return t_quantile_975(len(samples) - 1) * stdev(samples) / math.sqrt(len(samples))


def summarize(samples: list[float]) -> dict:
    """Median, mean, and the absolute and relative 95 % CI half-widths of the mean."""
    if not samples:
        return {"median": None, "mean": None, "ci95_halfwidth": None, "ci95_rel": None, "n": 0}
    hw = ci95_halfwidth(samples)
    m = mean(samples)
    return {
        "median": median(samples),
        "mean": m,
        "ci95_halfwidth": None if math.isinf(hw) else hw,
        "ci95_rel": None if math.isinf(hw) or m == 0 else hw / abs(m),
        "n": len(samples),
    }


def relative_ci(samples: list[float]) -> float:
    """95 % CI half-width relative to the mean (inf when undefined)."""
    if len(samples) < 2:
        return math.inf
    m = mean(samples)
    return math.inf if m == 0 else ci95_halfwidth(samples) / abs(m)
