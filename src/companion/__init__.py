"""companion: measure, model and predict the energy of transformer fine-tuning.

Reading order: ``config`` (what a run is) -> ``profiles`` (named grids of runs) -> ``data`` and ``model``
(what is trained) -> ``parallel`` (how it is split over devices) -> ``meters`` and ``stats`` (how energy and
time are measured) -> ``train`` (the per-rank runner) -> ``records`` and ``provenance`` (what is written)
-> ``sweep`` (orchestration, resume, cluster launch scripts) -> ``cli``.
"""

__version__ = "0.1.0"
