"""The off-grid profiles: configurations drawn with a fixed seed from ranges wider than the cpu grid.

    python -m companion.runs.holdout holdout > src/companion/runs/profiles/holdout.yaml
    python -m companion.runs.holdout testset > src/companion/runs/profiles/testset.yaml

Two draws, kept apart by what they are used for:

* ``holdout``, the *validation set*: layers 1-8, head_dim 16-64, hidden 64-384 (= heads x head_dim), seq_len
  32-512, batch 1-32, every layout kind (single, TP, FSDP, 2-D on up to 4 ranks). The design constants of the
  models were chosen looking at its scores (docs/decisions.md), so it is a validation set, not a test. Measured
  once each (builds stored up to 2026-11-26T0916 measured it twice, in two passes).
* ``testset``, the *test set*: another seed and other ranges (layers 1-10, head widths 24 and 48 among them,
  hidden 48-448, sequence lengths and batch sizes between and beyond the grid's). Drawn once; nothing is
  chosen by its scores, which are reported apart. Measured twice each, in two passes (2026-11-26T0916 and
  T1318 measured it once), so its score has a replicate noise floor of its own.

Draws whose step would exceed ``MAX_FLOPS_PER_STEP`` are redrawn, so each run stays short on a 2-core machine;
models fitted on the cpu sweep are scored on these runs and never fitted on them. The cpu profile names both in
``measured_with``: their runs share the grid's launches, so all are measured over the same minutes of the machine.
"""

from __future__ import annotations

import random

from dataclasses import dataclass

MAX_FLOPS_PER_STEP = 5e10  # the cpu grid's largest step: at most ~0.5 s per step on 2 cores
LAYOUTS = [(1, 1), (1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)]


@dataclass(frozen=True)
class OffGrid:
    """One off-grid draw: its seed, size, replicates and the ranges it draws from."""

    name: str
    seed: int
    n: int
    replicates: int
    prefix: str
    layers: tuple[int, int]
    head_dims: tuple[int, ...]
    hidden: tuple[int, int]
    seq_lens: tuple[int, ...]
    batches: tuple[int, ...]
    description: str
    heads: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12)
    layouts: tuple[tuple[int, int], ...] = tuple(LAYOUTS)
    max_flops_per_step: float = MAX_FLOPS_PER_STEP
    device: str = "cpu"
    base: str = (
        "{vocab: 4096, max_positions: 512, warmup_steps: 1, min_window_s: 0.2, min_windows: 4,"
        " target_rel_ci: 0.03, max_time_s: 2.0}"
    )


HOLDOUT = OffGrid(
    "holdout",
    seed=8,
    n=14,
    replicates=1,
    prefix="h",
    layers=(1, 8),
    head_dims=(16, 32, 64),
    hidden=(64, 384),
    seq_lens=(32, 48, 64, 96, 128, 192, 256, 384, 512),
    batches=(1, 2, 4, 6, 8, 12, 16, 24, 32),
    description="Off-grid configurations drawn with a fixed seed from ranges wider than the cpu grid (layers 1-8, "
    "hidden 64-384, head_dim 16-64, seq_len 32-512, batch 1-32; single, TP, FSDP and 2-D): the "
    "validation set. Models fitted on the cpu sweep are scored on these runs and never fitted on them; "
    "design constants were chosen looking at their scores. Each run is kept short and measured once, to keep "
    "the sweep's cost bounded.",
)
TEST = OffGrid(
    "testset",
    seed=20261129,
    n=10,
    replicates=2,
    prefix="t",
    layers=(1, 10),
    head_dims=(16, 24, 32, 48, 64),
    hidden=(48, 448),
    seq_lens=(24, 40, 80, 112, 160, 224, 320, 448),
    batches=(1, 3, 5, 10, 20, 28),
    description="The test set: configurations drawn with their own seed from ranges between and beyond the "
    "cpu grid's (layers 1-10, head widths 16-64 including 24 and 48, hidden 48-448, seq_len 24-448, "
    "batch 1-28; single, TP, FSDP and 2-D). Models fitted on the cpu sweep are scored on these runs "
    "and never fitted on them, and no design constant was chosen by their scores. Measured twice each, in two "
    "passes, so the test figure has a replicate noise floor of its own.",
)
GPU_TEST = OffGrid(
    "gpu-test",
    seed=20261127,
    n=6,
    replicates=1,
    prefix="g",
    layers=(2, 24),
    head_dims=(32, 64, 96),
    hidden=(256, 1536),
    seq_lens=(64, 96, 192, 256, 384, 512),
    batches=(4, 12, 16, 24, 48, 64, 96),
    heads=(4, 6, 8, 12, 16),
    layouts=((1, 1),),
    max_flops_per_step=2.5e13,
    device="cuda",
    base="{vocab: 30522, max_positions: 512, warmup_steps: 10, warmup_s: 5.0, min_window_s: 3.0, "
    "min_windows: 3, target_rel_ci: 0.02, max_steps: 1000000, max_time_s: 20.0}",
    description="The GPU test set: single-GPU bf16 configurations drawn once with their own seed from ranges "
    "around and beyond the GPU profiles' (layers 2-24, head widths 32, 64 and 96, hidden 256-1536, seq_len "
    "64-512, batch 4-96), none of them in any other profile. The GPU models are scored on these runs and "
    "never fitted or tuned on them. Run settings as data/reference/H200/gpu-check.yaml (5 s warm-up, at "
    "least 3 windows of 3 s, 20 s cap), energy from the NVML counter. Measured once each.",
)
DRAWS = {d.name: d for d in (HOLDOUT, TEST, GPU_TEST)}
# the validation set's draw, as before the test set existed (its profile file is unchanged)
SEED, N_CONFIGS, REPLICATES = HOLDOUT.seed, HOLDOUT.n, HOLDOUT.replicates


def _flops(layers, hidden, seq, batch) -> float:
    tokens = seq * batch
    return 3 * layers * (tokens * 24 * hidden * hidden + 4 * hidden * tokens * seq)


def draw(seed: int = SEED, n: int = N_CONFIGS, spec: OffGrid = HOLDOUT) -> list[dict]:
    """``n`` configurations (flat run fields plus a layout) from ``spec``'s ranges, reproducible from ``seed``."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        head_dim = rng.choice(spec.head_dims)
        heads = rng.choice([h for h in spec.heads if spec.hidden[0] <= h * head_dim <= spec.hidden[1]] or [1])
        hidden = heads * head_dim
        layers = rng.randint(*spec.layers)
        seq = rng.choice(spec.seq_lens)
        tp, dp = spec.layouts[len(out) % len(spec.layouts)]
        batch = rng.choice([b for b in spec.batches if b % dp == 0] or [dp])
        if (
            heads % tp
            or not spec.hidden[0] <= hidden <= spec.hidden[1]
            or _flops(layers, hidden, seq, batch) > spec.max_flops_per_step
        ):
            continue
        out.append(
            {
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "seq_len": seq,
                "batch_size": batch,
                "layout": f"tp{tp}-dp{dp}",
            }
        )
    return out


def _wrapped(text: str, width: int = 110) -> list[str]:
    import textwrap

    return ["  " + line for line in textwrap.wrap(text, width - 2)]


def profile_yaml(seed: int | None = None, n: int | None = None, spec: OffGrid = HOLDOUT) -> str:
    seed = spec.seed if seed is None else seed
    n = spec.n if n is None else n
    lines = [
        f"# Generated by `python -m companion.runs.holdout {spec.name}` (seed {seed}): do not edit by hand.",
        "description: >",
        *_wrapped(spec.description),
        f"device: {spec.device}",
        f"base: {spec.base}",
        f"replicates: {spec.replicates}",
        "groups:",
    ]
    for i, c in enumerate(draw(seed, n, spec)):
        fields = ", ".join(f"{k}: {c[k]}" for k in ("layers", "hidden", "heads", "seq_len", "batch_size"))
        lines += [
            f"  - name: {spec.prefix}{i:02d}",
            f"    set: {{{fields}}}",
            f"    layouts: [{c['layout']}]",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    which = sys.argv[1] if len(sys.argv) > 1 else "holdout"
    if which not in DRAWS:
        raise SystemExit(f"error: unknown draw {which!r}; use one of {', '.join(DRAWS)}")
    print(profile_yaml(spec=DRAWS[which]), end="")
