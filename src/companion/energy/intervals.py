"""The one interval method the book scores: normalised split-conformal intervals on log residuals.

A model's held-out log residuals (``models.heldout_residuals_by_kind``: each run predicted by a fit that left it
out, grouped by the kind of novelty it had) give a conformal half-width at the interval level
(``conformal_halfwidth``); each residual is first divided by its run's scale, and a new prediction's width is the
half-width times its own scale (``interval_scale_of_share``). The guarantee holds for any scale fixed before the
run is measured. Where the fit is given the validation set (off-grid configurations it never fitted), a run new to
it takes at least the width of those runs' errors (``models.OFF_GRID``): split-conformal calibration on the kind of
configuration a prediction is asked for. The level and the pass/fail thresholds the book applies are written into the validation
artifact (``validation.VERDICT_CRITERIA``).
"""

from __future__ import annotations

import numpy as np

# The level of every prediction interval the book states and scores (its default everywhere: one definition)
LEVEL = 0.9

# The interval of a run scales with the share of its predicted step outside the compute terms (per-step and
# per-layer fixed costs, a layout's overheads, collectives): 1 for a step of GEMMs, attention, elementwise and
# optimizer traffic only, 1 + INTERVAL_OVERHEAD_WEIGHT from half the step in those costs on. Held-out errors are
# divided by it before their quantile is taken and a prediction's width is multiplied by it (normalised
# conformal intervals: the guarantee holds for any scale fixed before the run is measured). Runs whose step is
# mostly such costs err more than compute-bound ones, so one width for both covers the first too rarely and the
# second too often. (The weight's choice and its checks: docs/decisions.md.)
INTERVAL_OVERHEAD_WEIGHT = 0.5


def interval_scale_of_share(share) -> np.ndarray:
    """The factor on a run's interval log half-width from its ``overhead_share`` (``opmodel.overhead_share``):
    1 + ``INTERVAL_OVERHEAD_WEIGHT`` x min(share, 0.5) / 0.5."""
    return 1.0 + INTERVAL_OVERHEAD_WEIGHT * np.clip(np.asarray(share, float), 0.0, 0.5) / 0.5


def conformal_halfwidth(log_residuals, level: float) -> float:
    """Conformal quantile of |log residual| that a new exchangeable residual falls within with probability
    about ``level``: the k-th smallest of n does with probability k / (n + 1), so the quantile sits at rank
    k = level x (n + 1), interpolated between the two order statistics around it (coverage between
    floor(k) / (n + 1) and ceil(k) / (n + 1), so up to 1 / (n + 1) below ``level``); inf where k > n (too few
    residuals: at level 0.9, fewer than 9). Non-finite residuals are dropped.

    The usual rank ceil(level x (n + 1)) guarantees at least ``level`` and gives up to level + 1 / (n + 1):
    on the 8-20 residuals of one kind of novelty (modes, layouts, head dimensions left out) that is 90-95 %,
    and the stored cpu sweeps' held-out intervals covered 95-97 % of the runs of the splits those kinds
    serve (``benchmarks/model_accuracy.py``). A nominal 90 % interval is meant to cover 90 %."""
    r = np.abs(np.asarray(log_residuals, float))
    r = np.sort(r[np.isfinite(r)])
    n = len(r)
    k = level * (n + 1)
    if too_few(n, level):
        return float("inf")
    if k <= 1:
        return float(r[0])
    i = int(np.floor(k))  # rank i (1-based) and the next, k - i of the way between them
    return float(r[i - 1] + (k - i) * (r[min(i, n - 1)] - r[i - 1]))


def too_few(n: int, level: float) -> bool:
    """Whether ``n`` residuals are too few for a conformal quantile at ``level``: its rank level x (n + 1)
    lies beyond them (at 0.9, fewer than 9)."""
    return n == 0 or level * (n + 1) > n


def bounded_halfwidth(log_residuals, level: float) -> float:
    """``conformal_halfwidth``, or where there are too few residuals for ``level`` (``too_few``: e.g. the two
    layouts of a sweep whose only other degree is held out) the largest of them: a finite interval that says what
    the data show, where the quantile alone would be unbounded and would "cover" every run (inf only where there
    is no finite residual at all)."""
    r = np.abs(np.asarray(log_residuals, float))
    r = r[np.isfinite(r)]
    w = conformal_halfwidth(r, level)
    return w if np.isfinite(w) or not len(r) else float(r.max())
