"""Every energy/time model behind one small interface, so validation, the book and ``predict`` treat them alike.

    model = MODELS["operator_roofline"](device_roofs)     # or paper_law(), tokens_linear(), ...
    fitted = fit_model(model, frame)                       # frame: companion.energy.tables.proxies_frame rows
    fitted.predict(frame, level=0.9)                       # step_s, energy_j and their intervals
    fitted.describe()                                      # coefficients with units (and intervals)

Prediction intervals come from *held-out groups*, a jackknife-style construction (the interval is centred on
the fit to every run, not on each refit's prediction as the jackknife+ / CV+ would be): at fit time the model is
refitted with each model size, layout, parallel degree, mode and head dimension left out in turn (and the
largest and the smallest value of each axis, and the runs of the largest FLOPs per step), and the log errors on
the left-out runs give the interval half-width, the conformal quantile of |log(measured / predicted)|
(``intervals.conformal_halfwidth``), from the errors of the kind of novelty a new run has, and for a run new in
anything no narrower than the validation set's errors where the fit is given them (``OFF_GRID``). In-sample residuals,
which are too small for a flexible model, are never used. ``fit_point`` is the only place that fits.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from companion.energy import opmodel
from companion.energy.intervals import LEVEL, bounded_halfwidth, conformal_halfwidth, interval_scale_of_share
from companion.energy.efficiency import fit_usl
from companion.energy.fit import design_matrix
from companion.energy.laws import LAWS, TIME_LAW, fit_law

LOG_FLOOR = 1e-300

# While ``memoized_fits`` is active: the runs every fit is a subset of, and each fit computed on them so far
_MEMO: dict | None = None


@contextmanager
def memoized_fits(runs: pd.DataFrame):
    """Within the block, what is fitted on the same rows of ``runs`` is computed once: a model's fit (validation
    refits each model on sets of runs that recur, e.g. size A then B left out, and B then A), the operator fit
    the fitted operator roofline and the power model given time share, and the USL fit the laws share. Every
    frame fitted inside must be rows of ``runs``; fits are deterministic, so the results are the same as
    without. Forked workers inherit the memo as it stands and fill their own copies. Runs whose index repeats
    a label cannot name a set of their rows by its labels: for them nothing is memoized."""
    global _MEMO
    memo = None
    if runs.index.is_unique:
        targets = {c: runs[c].to_numpy(float) for c in ("step_s", "energy_per_step_j") if c in runs}
        memo = {"index": runs.index, "targets": targets, "fits": {}}
    outer, _MEMO = _MEMO, memo
    try:
        yield
    finally:
        _MEMO = outer


def _memo(what: str, owner, df: pd.DataFrame, compute):
    """``compute()``, or the value it gave for ``what`` of ``owner`` (the model or the device roofs fitted, held
    by the memo so that its identity cannot pass to another object) on the same rows inside ``memoized_fits``."""
    memo = _MEMO
    if memo is None:
        return compute()
    if not _rows_of(memo, df):
        raise RuntimeError("a fit inside memoized_fits on runs that are not rows of its frame")
    key = (what, id(owner), tuple(df.index))
    held = memo["fits"].get(key)
    if held is None or held[0] is not owner:
        held = memo["fits"][key] = (owner, compute())
    return held[1]


def _rows_of(memo: dict, df: pd.DataFrame) -> bool:
    """Whether ``df``'s rows are rows of the memo's runs: its index among theirs, with the same targets."""
    at = memo["index"].get_indexer(df.index)
    return bool((at >= 0).all()) and all(
        c in memo["targets"] and np.array_equal(df[c].to_numpy(float), memo["targets"][c][at], equal_nan=True)
        for c in ("step_s", "energy_per_step_j")
        if c in df
    )


def compact_runs(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` held as one block per dtype, its text columns as Python strings (object): the same values. Validation's
    folds take rows of it thousands of times, each take in a third of the time a frame with a block per text
    column needs."""
    text = [c for c, t in df.dtypes.items() if isinstance(t, pd.StringDtype)]
    return df.astype(dict.fromkeys(text, object)).copy()


def size_key(df: pd.DataFrame) -> pd.Series:
    return "L" + df.layers.astype(str) + "-h" + df.hidden.astype(str) + "-a" + df.heads.astype(str)


def layout_key(df: pd.DataFrame) -> pd.Series:
    return df["mode"].astype(str) + "-tp" + df.tp.astype(str) + "-dp" + df.dp.astype(str)


# ------------------------------------------------------------------------------------------ the models
@dataclass
class Model:
    """A model's identity; subclasses implement ``_fit`` -> a point fit with ``predict(df) -> (t, e)``."""

    name: str = ""
    label: str = ""
    baseline: bool = False
    uses_measured_time: bool = False  # reads the run's measured time at prediction: not a pre-run predictor
    predicts_time: bool = True

    def _fit(self, df: pd.DataFrame):  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class OperatorPoint:
    dev: opmodel.DeviceRoofs
    time: dict
    energy: dict
    layout_scale: dict = field(
        default_factory=dict
    )  # fitted tier: {layout: factor} (opmodel.fit_layout_scales)

    def predict(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        return self._predict(df, opmodel.operator_frame(df, self.dev), opmodel.layout_names(df))

    def predict_with_scale(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``predict`` and ``interval_scale`` from one build of the runs' operator terms and layout names."""
        terms, layouts = opmodel.operator_frame(df, self.dev), opmodel.layout_names(df)
        scale = opmodel.interval_scale(terms, self.time, self.layout_scale, layouts)
        return (*self._predict(df, terms, layouts), scale)

    def _predict(self, df: pd.DataFrame, terms: pd.DataFrame, layouts) -> tuple[np.ndarray, np.ndarray]:
        t = opmodel.predict_time_s(terms, self.time, self.layout_scale, layouts)
        return t, opmodel.predict_energy_j(
            terms, t, opmodel.metered_units(df), self.energy, self.dev.power_ceiling_w, self.time
        )

    def interval_scale(self, df: pd.DataFrame) -> np.ndarray:
        """Per run, the factor on its interval's width (``opmodel.interval_scale``): wider where more of the
        predicted step is fixed costs, layout overheads and collectives."""
        return interval_scale_of_share(self.overhead_share(df))

    def overhead_share(self, df: pd.DataFrame) -> np.ndarray:
        """Per run, the share of its predicted step in fixed costs, layout overheads and collectives
        (``opmodel.overhead_share``): what its interval scale rises with."""
        return opmodel.overhead_share(
            opmodel.operator_frame(df, self.dev), self.time, self.layout_scale, opmodel.layout_names(df)
        )

    def eta(self, df: pd.DataFrame) -> np.ndarray:
        """The model's efficiency factor T_1 / (p T_p) for each row's layout."""
        t_p, _ = self.predict(df)
        t_1, _ = self.predict(df.assign(tp=1, dp=1, world_size=1, mode="single"))
        return t_1 / (df.world_size.to_numpy(float) * t_p)

    def describe(self) -> pd.DataFrame:
        return pd.DataFrame(
            opmodel.coefficient_rows(
                self.time,
                self.energy,
                self.layout_scale,
                self.dev.thread_exponent if self.dev.shared_node else None,
            )
        )


@dataclass
class OperatorRoofline(Model):
    """The operator-level roofline (companion.energy.opmodel). ``fitted=False`` is the calibrated/prior tier:
    every term at face value from the device's roofs, nothing learned from runs."""

    dev: opmodel.DeviceRoofs | None = None
    fitted: bool = True

    def _fit(self, df):
        coef = opmodel.prior_coefficients(self.dev)
        if not self.fitted:
            return OperatorPoint(self.dev, coef["time"], coef["energy"])
        return _memo("operator", self.dev, df, lambda: self._fit_operator(df))

    def _fit_operator(self, df) -> OperatorPoint:
        dev, terms, time = opmodel.fit_time_model(df, self.dev)
        energy = opmodel.fit_energy_coefficients(
            terms,
            df.step_s.to_numpy(float),
            opmodel.metered_units(df),
            df.energy_per_step_j.to_numpy(float),
            time,
        )
        scale = opmodel.fit_layout_scales(terms, time, df.step_s.to_numpy(float), opmodel.layout_names(df))
        return OperatorPoint(dev, time, energy, scale)


@dataclass
class GivenTimePoint(OperatorPoint):
    """The operator roofline's power model alone: energy from its fitted powers and the run's *measured* step
    time (the time it returns is the measured one; ``Fitted.predict`` reports none)."""

    def _predict(self, df: pd.DataFrame, terms: pd.DataFrame, layouts) -> tuple[np.ndarray, np.ndarray]:
        t = df.step_s.to_numpy(float)
        return t, opmodel.predict_energy_j(
            terms, t, opmodel.metered_units(df), self.energy, self.dev.power_ceiling_w, self.time
        )


@dataclass
class PowerGivenTime(OperatorRoofline):
    """The fitted operator roofline's energy with the time error taken out: where energy is estimated as a power
    model times measured time (a CPU under CodeCarbon), this scores the power model on its own."""

    def _fit(self, df):
        p = super()._fit(df)
        return GivenTimePoint(p.dev, p.time, p.energy, p.layout_scale)


@dataclass
class LawPoint:
    """A law of companion.energy.laws with its USL efficiency model."""

    energy: object  # laws.Fit
    time: object | None
    usl: dict
    uses_measured_time: bool = False

    def design(self, df):
        return design_matrix(df, self.usl)

    def predict(self, df):
        X = self.design(df)
        e = self.energy.predict(X)
        t = self.time.predict(X) if self.time is not None else np.full(len(df), np.nan)
        return np.asarray(t, float), np.asarray(e, float)

    def describe(self) -> pd.DataFrame:
        tables = [self.energy.coefficient_table()] + (
            [self.time.coefficient_table()] if self.time is not None else []
        )
        out = pd.concat(tables, ignore_index=True).rename(columns={"law": "model"})
        out["unit"] = [UNITS.get(p, "") for p in out.param]
        return out


UNITS = {
    "log_c": "log J (or log s)",
    "alpha": "per log FLOP",
    "beta": "per log byte",
    "a_j_per_token": "J/token",
    "b_j": "J",
    "k": "fraction of TDP (W where the TDP is unknown)",
    "eps_F_j_per_flop": "J/FLOP",
    "eps_Q_j_per_byte": "J/byte",
    "P0_w": "W per metered unit",
    "u_compute": "fraction of the compute roof",
    "v_memory": "fraction of the memory roof",
}


@dataclass
class LawModel(Model):
    law: str = "roofline_power_law"
    n_boot: int = 50

    def _fit(self, df):
        usl = _memo(f"usl n_boot={self.n_boot}", fit_usl, df, lambda: fit_usl(df, n_boot=self.n_boot))
        point = LawPoint(None, None, usl, self.uses_measured_time)
        X = point.design(df)
        point.energy = fit_law(self.law, X, "energy_per_step_j", self.n_boot)
        if self.predicts_time:
            point.time = fit_law(
                TIME_LAW if self.law == "roofline_power_law" else self.law, X, "step_s", self.n_boot
            )
        return point


def paper_law(n_boot: int = 50) -> LawModel:
    return LawModel(
        "roofline_power_law", LAWS["roofline_power_law"].label, law="roofline_power_law", n_boot=n_boot
    )


# ------------------------------------------------------------------------------------------ fitting
def fit_point(model: Model, df: pd.DataFrame):
    """The one place a model learns from runs (validation's leak test watches it)."""
    return _memo("fit", model, df, lambda: model._fit(df))


def point_only(model: Model) -> Model:
    """The model without its coefficient bootstrap: a held-out prediction and its interval need the point fit
    and the held-out-group residuals only (the bootstrap serves the fit stage's coefficient intervals)."""
    return replace(model, n_boot=0) if getattr(model, "n_boot", 0) else model


GROUP_KINDS = (
    "size",
    "layout",
    "degree",
    "mode",
    "head_dim",
    "range",
    "scale",
)  # what a run is new in (``novelty``)
RANGE_AXES = (
    "layers",
    "hidden",
    "seq_len",
    "batch_size",
)  # a run outside the fitted range of one is extrapolated
SCALE_COLUMN = "flops_per_step"  # a run above the fitted FLOPs per step is new in scale
SCALE_QUANTILES = (0.5, 0.625, 0.75, 0.875)  # the scale kind's folds: the runs above each quantile left out


def range_values(df: pd.DataFrame) -> pd.DataFrame:
    """Per run, the values whose fitted range a new run is checked against (``novelty``): the varied axes
    (``RANGE_AXES``, also left out at both ends for the range kind's errors) and two a sweep usually holds fixed,
    the vocabulary and the FFN width per hidden unit, where the frame has them: a planned run at another
    vocabulary or FFN ratio is extrapolated too."""
    out = pd.DataFrame({a: df[a] for a in RANGE_AXES if a in df}, index=df.index)
    if "vocab" in df:
        out["vocab"] = df["vocab"]
    if "ffn" in df and "hidden" in df:
        out["ffn_per_hidden"] = df["ffn"] / df["hidden"]
    return out.astype(float)


def group_keys(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Per run, its key in each grouping: model size, parallel layout, parallel degree (world size), parallel
    mode and head dimension. Single-device runs have no layout, degree or mode key (""): they anchor every term
    and are never held out as one."""
    par = df.world_size > 1
    return {
        "size": size_key(df),
        "layout": layout_key(df).where(par, ""),
        "degree": df.world_size.astype(int).astype(str).where(par, ""),
        "mode": df["mode"].astype(str).where(par, ""),
        "head_dim": (df.hidden // df.heads).astype(int).astype(str),
    }


def scaled_log_residuals(point, df: pd.DataFrame, uses_measured_time: bool = False) -> dict[str, np.ndarray]:
    """Per run of ``df`` (in its order), log(measured / predicted) under ``point`` divided by the run's interval
    scale (``predict_with_scale``), per target: what every interval's width is a quantile of (nan where a
    prediction or a measurement is missing, and for time where the model reads the measured time)."""
    t, e, scale = predict_with_scale(point, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        time = np.log(df.step_s.to_numpy(float) / np.clip(t, LOG_FLOOR, None)) / scale
        energy = np.log(df.energy_per_step_j.to_numpy(float) / np.clip(e, LOG_FLOOR, None)) / scale
    return {"step_s": np.full(len(df), np.nan) if uses_measured_time else time, "energy_per_step_j": energy}


def heldout_residuals_by_kind(
    model: Model, df: pd.DataFrame, min_train: int = 4
) -> dict[str, dict[str, np.ndarray]]:
    """log(measured / predicted) of each run when its model size, then its parallel layout, its parallel degree,
    its whole parallel mode and its head dimension was left out of the fit: {kind: {target: residuals}}. Each kind
    measures the error of one kind of extrapolation, so an interval for a new run can be as wide as the novelty
    it has (a new head dimension moves the attention-score cost, which a new size at a known one does not).
    Each residual is divided by the run's ``interval_scale`` under the fit that left it out."""
    model = point_only(model)  # held-out residuals need point fits only
    out = {}
    folds = {}
    for kind, key in group_keys(df).items():
        groups = sorted(set(key) - {""})
        if kind in ("degree", "mode") and len(groups) < 2:
            # one parallel degree (or mode) only: leaving it out leaves no parallel run, so the question it would
            # answer (parallel runs from single-device runs and the calibration alone) is harder than a new degree
            # or mode asks of this fit, which keeps the fitted one's collectives; such a run takes the wider of its
            # new layout's (or mode's) width and the pooled one (docs/decisions.md)
            groups = []
        if kind == "head_dim":
            # the head dimensions beside the usual one: leaving the usual one out leaves few runs, a harder
            # question than a new head dimension asks of a fit that has the usual one (docs/decisions.md)
            groups = [g for g in groups if g != key.mode().iloc[0]]
        folds[kind] = [(key == g).to_numpy() for g in groups]
    # extrapolation along one axis, either way (``novelty`` flags a value below the fitted range as well as one
    # above it): the runs at the largest value of each varied axis, then those at its smallest, fitted on the rest
    folds["range"] = [
        (df[a] == getattr(df[a], end)()).to_numpy()
        for a in RANGE_AXES
        if a in df and df[a].nunique() > 2
        for end in ("max", "min")
    ]
    # extrapolation in scale: the runs above a quantile of FLOPs per step, fitted on the rest (the validation's
    # largest split, asked of the training runs), at each of SCALE_QUANTILES. Such runs may lie inside every
    # axis's range (the largest size at a middling length), so without this kind they took the pooled width of
    # sizes and layouts left out, a harder question. Several quantiles, so that the width does not rest on one
    # fit's errors, which share that fit's bias (the quantiles' choice: docs/decisions.md)
    folds["scale"] = (
        [(df[SCALE_COLUMN] > df[SCALE_COLUMN].quantile(q)).to_numpy() for q in SCALE_QUANTILES]
        if SCALE_COLUMN in df and df[SCALE_COLUMN].nunique() > 2
        else []
    )
    for kind, tests in folds.items():
        res = {"step_s": [], "energy_per_step_j": []}
        for test in tests:
            if test.all() or (~test).sum() < min_train:
                continue
            try:
                point = fit_point(model, df[~test])
            except (ValueError, np.linalg.LinAlgError):
                continue
            # each divided by the scale of the fit that never saw these runs
            for target, r in scaled_log_residuals(point, df[test]).items():
                res[target] += list(r)
        out[kind] = {k: np.asarray([x for x in v if np.isfinite(x)], float) for k, v in res.items()}
    return out


# The off-grid kind: the validation set's runs (drawn off the grid, never fitted on), predicted by the fit on the
# whole sweep. Split-conformal calibration on the configurations a prediction is asked for: the grid's own held-out
# groups (the other kinds) are easier than a configuration between and beyond them, so a run new in anything takes
# at least this width (docs/decisions.md)
OFF_GRID = "off_grid"


def predict_leaving_each_out(
    fitted: Fitted, df: pd.DataFrame, groups: pd.Series, level: float = LEVEL
) -> pd.DataFrame:
    """``fitted.predict`` on the off-grid runs ``df`` that calibrate its off-grid width themselves, each group of
    ``groups`` (a configuration's replicates) with that width taken from the other groups' residuals only, so a
    run never sets its own interval."""
    if not len(df):
        return fitted.predict(df, level)
    res = scaled_log_residuals(fitted.point, df, fitted.model.uses_measured_time)
    parts = []
    for g in pd.unique(groups):
        rows = (groups == g).to_numpy()
        others = {t: r[~rows][np.isfinite(r[~rows])] for t, r in res.items()}
        one = replace(fitted, residuals_by_kind={**fitted.residuals_by_kind, OFF_GRID: others})
        parts.append(one.predict(df[rows], level).set_axis(np.flatnonzero(rows)))
    return pd.concat(parts).sort_index().set_axis(df.index)  # back in df's order, positionally


def predict_with_scale(point, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A point fit's predictions and, per run, the factor on its interval's width: the point fit's own (the
    operator roofline's overhead share, ``OperatorPoint.interval_scale``), 1 for a model without one. Held-out
    residuals are stored divided by it."""
    if hasattr(point, "predict_with_scale"):
        return point.predict_with_scale(df)
    t, e = point.predict(df)
    return t, e, np.ones(len(df))


def heldout_log_residuals(model: Model, df: pd.DataFrame, min_train: int = 4) -> dict[str, np.ndarray]:
    """The held-out residuals of every size and every layout left out, pooled: the width of a kind of novelty
    none of whose groups could be left out (``Fitted.halfwidth``)."""
    return _pooled(heldout_residuals_by_kind(model, df, min_train))


def _pooled(by_kind: dict) -> dict[str, np.ndarray]:
    """The residuals of sizes and layouts left out, pooled per target: the width of a run whose novelty is not known."""
    return {
        t: np.concatenate([by_kind[k][t] for k in ("size", "layout") if k in by_kind])
        for t in ("step_s", "energy_per_step_j")
    }


@dataclass
class Fitted:
    model: Model
    point: object
    residuals: dict = field(
        default_factory=dict
    )  # held-out log residuals per target (sizes and layouts pooled)
    n_train: int = 0
    extra_halfwidth: dict = field(default_factory=dict)  # prior tier: a stated log half-width per target
    residuals_by_kind: dict = field(default_factory=dict)  # {kind: {target: residuals}}
    train_keys: dict = field(default_factory=dict)  # {kind: set of keys seen in training}

    def predict(self, df: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
        """Point predictions and ``level`` intervals for step time (s) and energy per step (J). Where the
        training keys are known, each run's interval is as wide as its novelty: a parallel mode never fitted
        takes the width of modes left out in training, a new degree that of degrees left out, a layout never
        fitted that of layouts left out, a new model size that of sizes left out, a new head dimension that of
        head dimensions left out, a run above the fitted FLOPs per step that of the largest runs left out (the
        widest of those that apply; a kind none were left out of takes the pooled width); a run new in nothing
        that of sizes left out; a run new in anything at least that of the off-grid residuals, where the fit holds
        them. Each width is then multiplied by the run's ``interval_scale``."""
        t, e, scale = predict_with_scale(self.point, df)
        if self.model.uses_measured_time:
            t = np.full(len(df), np.nan)
        out = {"step_s": t, "energy_per_step_j": e}
        frame = pd.DataFrame(out, index=df.index)
        kinds = self.novelty(df)
        for target, v in out.items():
            q = np.array([self.halfwidth(target, level, k) for k in kinds]) * scale
            frame[f"{target}_lo"], frame[f"{target}_hi"] = v * np.exp(-q), v * np.exp(q)
        return frame

    def novelty(self, df: pd.DataFrame) -> list[tuple[str, ...]]:
        """Per run, the kinds of grouping in which it is new to the fit (e.g. ('size', 'layout')), and
        ``OFF_GRID`` after them where there are any and the fit holds off-grid residuals."""
        if not self.train_keys:
            return [()] * len(df)
        keys = group_keys(df)
        lo, hi = self.train_keys.get("range", ({}, {}))
        values = range_values(df)
        out = []
        for i in range(len(df)):
            kinds = [
                k
                for k, key in keys.items()
                if k in self.train_keys and key.iloc[i] and key.iloc[i] not in self.train_keys[k]
            ]
            row = df.iloc[i]
            if any(a in lo and not lo[a] <= values[a].iloc[i] <= hi[a] for a in values):
                kinds.append("range")
            if "scale" in self.train_keys:
                flops = float(row[SCALE_COLUMN]) if SCALE_COLUMN in df else float("nan")
                if not np.isfinite(flops):
                    # a frame without the FLOPs its fit was keyed on would be narrowed silently
                    raise ValueError(
                        f"run {i} has no finite {SCALE_COLUMN}: the fit's intervals need it to tell "
                        "a run above the fitted FLOPs per step (tables.proxies_frame computes it)"
                    )
                if flops > self.train_keys["scale"]:
                    kinds.append("scale")
            if kinds and OFF_GRID in self.residuals_by_kind:
                kinds.append(OFF_GRID)  # new in anything: at least as wide as the off-grid runs' errors
            out.append(tuple(kinds))
        return out

    def halfwidth(self, target: str, level: float, kinds: tuple[str, ...] = ()) -> float:
        if target in self.extra_halfwidth:
            return float(self.extra_halfwidth[target])
        # a new mode is a new layout too: the mode width replaces the layout width; an off-grid floor with no
        # residual for this target (e.g. none finite) is no floor, rather than the pooled width
        empty = not len(self.residuals_by_kind.get(OFF_GRID, {}).get(target, []))
        kinds = tuple(
            k for k in kinds if not (k == "layout" and "mode" in kinds) and not (k == OFF_GRID and empty)
        )
        r = self.residuals.get(target)
        pooled = conformal_halfwidth(r, level) if r is not None and len(r) else float("inf")
        if not kinds:
            # new in nothing (a fitted size and layout at another length or batch within the fitted ranges): no
            # harder than a run new in its model size alone, so that width (the pooled one where a fit has no
            # sizes apart). The layouts' errors are of parallel runs only, so they do not bound a single device's
            size = self.residuals_by_kind.get("size", {}).get(target)
            return bounded_halfwidth(size, level) if size is not None and len(size) else pooled
        # each kind of novelty the run has takes the errors of groups of that kind left out in training; a kind
        # none were left out of (one parallel degree in training) takes the pooled width; the widest applies.
        # The pooled width is no floor: a new mode's errors can be smaller than a new size's (docs/decisions.md)
        widths = [
            bounded_halfwidth(r, level)
            if (r := self.residuals_by_kind.get(k, {}).get(target)) is not None and len(r)
            else pooled
            for k in kinds
        ]
        return max(widths)

    def describe(self) -> pd.DataFrame:
        out = self.point.describe()
        out.insert(0, "model", self.model.name)
        return out


def keys_to_json(keys: dict) -> dict:
    lo, hi = keys.get("range", ({}, {}))
    return {
        **{k: sorted(v) for k, v in keys.items() if k not in ("range", "scale")},
        "range": [{a: float(v) for a, v in lo.items()}, {a: float(v) for a, v in hi.items()}],
        **({"scale": float(keys["scale"])} if "scale" in keys else {}),
    }


def keys_from_json(d: dict) -> dict:
    # a fit artifact written before the scale kind has no "scale" key: its runs are never new in scale
    return {
        **{k: set(v) for k, v in d.items() if k not in ("range", "scale")},
        "range": tuple(d.get("range") or ({}, {})),
        **({"scale": float(d["scale"])} if "scale" in d else {}),
    }


def interval_model(residuals: dict, residuals_by_kind: dict | None, train_keys: dict | None) -> Fitted:
    """A stand-in with only what intervals need (stored residuals and training keys): ``halfwidth`` and
    ``novelty`` of a fit read back from its artifact."""
    return Fitted(
        Model(),
        None,
        {k: np.asarray(v, float) for k, v in residuals.items()},
        residuals_by_kind={
            kind: {k: np.asarray(v, float) for k, v in r.items()}
            for kind, r in (residuals_by_kind or {}).items()
        },
        train_keys=keys_from_json(train_keys) if train_keys else {},
    )


def fit_model(
    model: Model, df: pd.DataFrame, intervals: bool = True, off_grid: pd.DataFrame | None = None
) -> Fitted:
    """Fit on ``df``; with ``intervals``, also the held-out-group residuals that set the intervals, and where
    ``off_grid`` (the validation set: configurations off the grid, never fitted on) is given, this fit's
    residuals on them (``OFF_GRID``), which bound the width of every run new to the fit."""
    point = fit_point(model, df)
    if not intervals:
        return Fitted(model, point, {}, len(df))
    by_kind = heldout_residuals_by_kind(model, df)
    if off_grid is not None and len(off_grid):
        by_kind[OFF_GRID] = {
            t: r[np.isfinite(r)]
            for t, r in scaled_log_residuals(point, off_grid, model.uses_measured_time).items()
        }
    pooled = _pooled(by_kind)
    keys = {k: set(v) - {""} for k, v in group_keys(df).items()}
    values = range_values(df)
    keys["range"] = (values.min().to_dict(), values.max().to_dict())
    if SCALE_COLUMN in df:
        keys["scale"] = float(df[SCALE_COLUMN].max())
    return Fitted(model, point, pooled, len(df), residuals_by_kind=by_kind, train_keys=keys)


# ------------------------------------------------------------------------------- the fit artifact's part
def intervals_to_json(fitted: Fitted) -> dict:
    """What a prediction's interval needs of a fit, as JSON: its held-out residuals (pooled and by kind of
    novelty) and the keys it was trained on (read back by ``interval_model``)."""
    return {
        "residuals": {k: v.tolist() for k, v in fitted.residuals.items()},
        "residuals_by_kind": {
            kind: {k: v.tolist() for k, v in r.items()} for kind, r in fitted.residuals_by_kind.items()
        },
        "train_keys": keys_to_json(fitted.train_keys),
        # residuals divided by each run's interval scale: a prediction's width is multiplied by its own
        "residuals_scaled": hasattr(fitted.point, "predict_with_scale"),
    }


def law_intervals(df: pd.DataFrame, laws, off_grid: pd.DataFrame | None = None) -> dict:
    """Held-out-group residuals of every law that predicts before running ({law: intervals_to_json}), so a
    law's prediction interval comes from errors on groups left out of its fit, as the operator roofline's
    does, not from its in-sample residuals. Each left-out fit refits the USL on its own rows, so the
    efficiency model's uncertainty is in these errors. The time law's step-time residuals come with it."""
    out = {}
    for name in laws:
        if LAWS[name].uses_measured_time:
            continue
        model = LawModel(name, LAWS[name].label, law=name, n_boot=0, predicts_time=name == TIME_LAW)
        out[name] = intervals_to_json(fit_model(model, df, off_grid=off_grid))
    return out


def fit_operator(df: pd.DataFrame, dev, off_grid: pd.DataFrame | None = None) -> dict:
    """The operator roofline fitted on ``df`` (fitted tier), its held-out-group residuals (its intervals; with the
    validation set's runs ``off_grid``, their errors as well: ``fit_model``),
    the calibrated tier's errors on the same runs (nothing fitted: held out by construction), the model's
    eta beside the measured one, and the paper's USL fitted per model size."""
    fitted = fit_model(
        OperatorRoofline("operator_roofline", "operator roofline", dev=dev), df, off_grid=off_grid
    )
    point = fitted.point
    face = OperatorRoofline("calibrated", "calibrated", dev=dev, fitted=False)._fit(df)
    t_cal, e_cal = face.predict(df)
    par = df[df.world_size > 1]
    eta_model = point.eta(par) if len(par) else np.array([])
    return {
        # the device the coefficients were fitted under: on a shared CPU node the fit chooses the thread
        # exponent too, so the calibration's exponent with these multipliers would be a model nothing scored
        "operator_model": {
            "dev": point.dev.to_json(),
            "time": point.time,
            "energy": point.energy,
            "layout_scale": point.layout_scale,
            **intervals_to_json(fitted),
            "n_train": len(df),
        },
        "calibrated_tier_residuals": None
        if dev.tier != "calibrated"
        else {
            "step_s": np.log(df.step_s / t_cal).tolist(),
            "energy_per_step_j": np.log(df.energy_per_step_j / e_cal).tolist(),
        },
        "eta_model": [
            {
                "run_id": r.run_id,
                "mode": r.mode,
                "world_size": int(r.world_size),
                "layers": int(r.layers),
                "hidden": int(r.hidden),
                "eta_measured": float(r.eta),
                "eta_model": float(m),
            }
            for r, m in zip(par.itertuples(), eta_model)
        ],
        "usl_per_size": [
            dict(u.to_json(), size=f"L{s[0]}-h{s[1]}-a{s[2]}")
            for s, rows in df.groupby(["layers", "hidden", "heads"])
            for u in fit_usl(rows, n_boot=50).values()
        ],
    }
