"""Small statistics used by the measurement protocol."""

from __future__ import annotations

import math
from statistics import mean, median, stdev


def t_quantile_975(dof: int) -> float:
    """Two-sided 95 % Student-t quantile."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


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
