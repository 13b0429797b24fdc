"""companion: measure, model and predict the energy of transformer fine-tuning.

The package is the paper's pipeline, one subpackage per stage; each imports only from the stages before it
(and from the top-level ``errors`` and ``paths``):

* ``companion.runs``   -- measure: what a run is, the fine-tune on one or many devices, energy meters,
  immutable run records, resumable sweeps.
* ``companion.energy`` -- model: run records -> proxies (FLOPs, bytes, communication), the efficiency factor,
  the scaling laws and their baselines, validation on held-out groups, prediction.
* ``companion.report`` -- publish: figures, papermill stages, the offline book and its browser check.
* ``companion.cli``    -- the ``companion`` command, over all three.
"""

__version__ = "0.1.0"

# Stage order: a module may import from its own stage and the ones before it, never after (tested).
STAGES = ("runs", "energy", "report")
