"""Measure: the fine-tunes themselves and what they record.

Reading order: ``config`` (what a run is) -> ``profiles`` (named grids of runs) -> ``data``, ``checkpoints``
and ``model`` (what is trained) -> ``parallel`` (how it is split over devices) -> ``meters`` and ``stats``
(how energy and time are measured) -> ``train`` (the per-rank runner) -> ``records``, ``provenance`` and
``carbon`` (what is written) -> ``sweep`` (orchestration, resume, cluster launch scripts).
"""
