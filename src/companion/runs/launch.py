"""The local launcher of a CPU sweep's multi-rank launches: torchrun, with ranks forked from a process that
has already imported what they run.

    python -m companion.runs.launch --nproc-per-node 4 --plan build/plans/cpu-ws4.json --out data/runs/cpu

is ``torchrun --standalone --nproc-per-node 4 --start-method fork --run-path .../train.py --plan ...``: the
same elastic agent, rendezvous, environment (RANK, WORLD_SIZE, LOCAL_RANK, OMP_NUM_THREADS=1 ...), exit codes
and signal handling as the ``torchrun -m companion.runs.train`` of a cluster, with one difference: the ranks
are forked instead of started as new interpreters, after this process imported torch, transformers' BERT,
DTensor's tensor parallelism and FSDP. A rank started afresh spends about 8 s of CPU on those imports, several
ranks at once on the same cores; forked, they start with them loaded. Nothing a rank measures changes: the
imports happen before any run, and every run's windows start after its warm-up steps.

CUDA launches keep torchrun's new interpreters (``companion.runs.sweep.worker_command``): a CUDA context must
not cross a fork, and a GPU run's seconds of start-up are small beside its minutes of training.
"""

from __future__ import annotations

import os
import sys


def preload() -> None:
    """Import what every rank imports before its first run (the forked ranks inherit the modules)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401
    from transformers import BertConfig, BertForSequenceClassification  # noqa: F401

    import companion.runs.train  # noqa: F401


def torchrun_args(nproc: int, train_args: list[str], log_dir: str | None = None) -> list[str]:
    """torchrun's arguments for ``nproc`` forked ranks running ``companion.runs.train`` with ``train_args``;
    ``log_dir``: the folder for the agent's files on its ranks (error files), else a new one of its own."""
    from companion.runs import train

    return [
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--start-method=fork",
        # the agent looks at its ranks once a second (torchrun's default, 0.1 s, costs it about 0.4 % of a core
        # while a sweep's launch waits between its passes; a rank's exit is noticed within a second all the same)
        "--monitor-interval=1",
        *([f"--log-dir={log_dir}"] if log_dir else []),
        "--run-path",
        train.__file__,
        *train_args,
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or not argv[0].startswith("--nproc-per-node="):
        print(
            "error: usage: python -m companion.runs.launch --nproc-per-node=N <companion.runs.train arguments>",
            file=sys.stderr,
        )
        return 2
    try:
        nproc = int(argv[0].split("=", 1)[1])
    except ValueError:
        nproc = 0
    if nproc < 1:
        print(
            f"error: {argv[0]!r} must name a positive number of ranks, e.g. --nproc-per-node=2",
            file=sys.stderr,
        )
        return 2
    # torchrun sets this for more than one rank unless it is set; libgomp reads it when torch loads it, which
    # preload() does here, before torchrun runs: set it first
    if nproc > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    from companion.runs.parallel import FORKED_LAUNCHER, LAUNCHER_ENV

    os.environ[LAUNCHER_ENV] = (
        FORKED_LAUNCHER  # the ranks' records say so (companion.runs.parallel.launcher_name)
    )
    preload()
    import tempfile

    from torch.distributed import run as torchrun

    # without a log folder the agent makes a torchelastic_* folder in the temporary directory and leaves it
    # there, one per launch (hundreds over a test session); this one is removed when the launch exits, a rank
    # failing or the launch stopped included (a launch killed outright, SIGKILL, leaves it)
    with tempfile.TemporaryDirectory(prefix="companion-launch-") as logs:
        # raises (exit code 1) when a rank fails, as torchrun does
        torchrun.main(torchrun_args(nproc, argv[1:], log_dir=logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
