"""The ``companion`` command.

    companion run ...          one configuration (also under torchrun: ``torchrun -m companion.train``)
    companion sweep --profile  a named grid of runs, resumable; or --emit torchrun|slurm for a cluster
    companion profiles         the profiles and how many runs each holds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from companion.config import ConfigError


def _cmd_run(argv: list[str]) -> int:
    from companion import train

    return train.main(argv)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from companion.paths import build_dir, runs_dir
    from companion.profiles import load_profile
    from companion.sweep import emit_launch, run_sweep

    profile = load_profile(args.profile, device_name=args.device_name)
    out_dir = args.out or runs_dir(profile.name)
    if args.emit:
        emit_dir = args.emit_dir or build_dir() / "launch" / profile.name
        for path in emit_launch(profile, args.emit, emit_dir, out_dir, gpus_per_node=args.gpus_per_node):
            print(path)
        return 0
    print(f"profile {profile.name}: {len(profile.runs)} runs -> {out_dir}", flush=True)
    result = run_sweep(profile, out_dir, retry_failed=args.retry_failed, progress=not args.quiet)
    print(result.summary())
    if result.failed:
        print("failed: " + ", ".join(result.failed), file=sys.stderr)
    return 0 if not result.failed else 1


def _cmd_profiles(_: argparse.Namespace) -> int:
    from companion.profiles import available_profiles, load_profile

    for name in available_profiles():
        p = load_profile(name, device_name="GPU" if name.startswith("gpu") else None)
        sizes = ", ".join(f"{len(r)}x ws{ws}" for ws, r in p.by_world_size().items())
        print(f"{name:10s} {len(p.runs):3d} runs ({sizes}) on {p.device}: {' '.join(p.description.split())}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="companion", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="fine-tune and measure one configuration (see `companion run --help`)",
                   add_help=False)
    sw = sub.add_parser("sweep", help="run a profile's grid of configurations, resuming where it stopped",
                        description="Run every configuration of a profile and write one record per run. "
                                    "Finished runs are skipped; a failed run becomes a 'failed' record.")
    sw.add_argument("--profile", required=True, help="profile name (ci, cpu, gpu-1, gpu-node) or a .yaml path")
    sw.add_argument("--out", type=Path, help="record folder (default data/runs/<profile>)")
    sw.add_argument("--retry-failed", action="store_true", help="run failed configurations again "
                    "(their earlier records are moved to failed/, not deleted)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--emit", choices=["torchrun", "slurm"],
                    help="write multi-node launch scripts and plans instead of running")
    sw.add_argument("--emit-dir", type=Path, help="where --emit writes (default build/launch/<profile>)")
    sw.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node for --emit (default 8)")
    sw.add_argument("--device-name", help="hardware tag in run IDs, e.g. H100 (default: detected)")
    sub.add_parser("profiles", help="list the profiles")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        return _cmd_run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return {"sweep": _cmd_sweep, "profiles": _cmd_profiles}[args.command](args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
