"""Every model the book scores, in one place: its name, its words, its kind and how it is built.

A model is added here and nowhere else: the validation scores every entry that can be built, the tables take
its ``label``, the figures its ``short`` name and its kind's colour, and the verdict finds the pre-run
baselines by kind. The order of ``SPECS`` is the book's order, the primary model first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from companion.energy import models as m
from companion.energy.laws import LAWS

# the kinds of model, in the order figures and tables show them (figures give each kind one colour)
PRIMARY_KIND, LAW_KIND, BASELINE_KIND, AFTER_KIND = (
    "operator roofline",
    "law",
    "baseline",
    "after the fact (measured time)",
)
KINDS = (PRIMARY_KIND, LAW_KIND, BASELINE_KIND, AFTER_KIND)


@dataclass(frozen=True)
class ModelSpec:
    """One model: ``label`` in tables, ``short`` in figures, its ``kind`` (``KINDS``), and ``build`` (device roofs
    -> a ``models.Model``), or None for a law the validation page's laws table fits but no split scores."""

    name: str
    label: str
    short: str
    kind: str
    build: Callable | None = None

    @property
    def uses_measured_time(self) -> bool:
        """Reads each run's measured time when it predicts: not a prediction made before running."""
        return self.kind == AFTER_KIND

    @property
    def pre_run_baseline(self) -> bool:
        return self.kind == BASELINE_KIND


def _law(name: str, **kw):
    return lambda dev: m.LawModel(name, LAWS[name].label, law=name, **kw)


SPECS = (
    ModelSpec(
        "operator_roofline",
        "operator roofline, fitted (primary)",
        "operator roofline",
        PRIMARY_KIND,
        lambda dev: m.OperatorRoofline("operator_roofline", "operator roofline", dev=dev),
    ),
    ModelSpec(
        "calibrated_tier",
        "operator roofline, calibrated tier (nothing fitted)",
        "calibrated tier",
        PRIMARY_KIND,
        lambda dev: m.OperatorRoofline("calibrated_tier", "calibrated tier", dev=dev, fitted=False),
    ),
    ModelSpec(
        "roofline_power_law",
        "paper's law (roofline power law)",
        "paper's law",
        LAW_KIND,
        lambda dev: m.paper_law(),
    ),
    ModelSpec("energy_roofline", "energy roofline", "energy roofline", LAW_KIND),
    ModelSpec(
        "flops_power_law",
        "FLOPs-only power law (baseline)",
        "FLOPs power law",
        BASELINE_KIND,
        _law("flops_power_law", baseline=True),
    ),
    ModelSpec(
        "tokens_linear",
        "tokens-linear, Wang et al. 2023 (baseline)",
        "tokens-linear",
        BASELINE_KIND,
        _law("tokens_linear", baseline=True),
    ),
    ModelSpec(
        "tdp_time",
        "fitted power × measured time (baseline, after the fact)",
        "power × time",
        AFTER_KIND,
        _law("tdp_time", baseline=True, uses_measured_time=True, predicts_time=False),
    ),
    ModelSpec(
        "power_given_time",
        "operator roofline's power model × measured time (energy's error without time's)",
        "roofline power × time",
        AFTER_KIND,
        lambda dev: m.PowerGivenTime(
            "power_given_time",
            "operator roofline's power × measured time",
            dev=dev,
            uses_measured_time=True,
            predicts_time=False,
        ),
    ),
)
REGISTRY = {s.name: s for s in SPECS}
PRIMARY, PAPER = "operator_roofline", "roofline_power_law"
PRE_RUN_BASELINES = tuple(s.name for s in SPECS if s.pre_run_baseline)


def validated_models(dev) -> dict[str, m.Model]:
    """Every model the validation page scores (each spec that can be built), by name, in the book's order."""
    return {s.name: s.build(dev) for s in SPECS if s.build is not None}


def label(name: str) -> str:
    """A model's words in tables (its name with spaces for one the registry does not hold)."""
    return REGISTRY[name].label if name in REGISTRY else str(name).replace("_", " ")


def short(name: str) -> str:
    """A model's words in figures."""
    return REGISTRY[name].short if name in REGISTRY else str(name).replace("_", " ")


def kind(name: str) -> str:
    return REGISTRY[name].kind if name in REGISTRY else BASELINE_KIND
