"""The ``companion`` command.

    companion run ...          one configuration (also under torchrun: ``torchrun -m companion.runs.train``)
    companion sweep --profile  a named grid of runs, resumable; or --emit torchrun|slurm for a cluster
    companion profiles         the profiles and how many runs each holds
    companion predict ...      a planned fine-tune's energy, time and CO2, with intervals, before running it
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from companion.errors import ConfigError


def _cmd_run(argv: list[str]) -> int:
    from companion.runs import train

    return train.main(argv)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from companion.paths import build_dir, runs_dir
    from companion.runs.profiles import load_profile
    from companion.runs.sweep import emit_launch, run_sweep

    profile = load_profile(args.profile, device_name=args.device_name)
    out_dir = args.out or runs_dir(profile.name)
    if args.emit and profile.device == "cuda" and args.device_name is None and profile.runs[0].device_name == "cuda":
        raise ConfigError(f"no GPU is visible here to name the hardware of profile {profile.name!r}'s runs; "
                          "pass --device-name with the cluster's GPU type, e.g. --device-name H100")
    if args.emit:
        emit_dir = args.emit_dir or build_dir() / "launch" / profile.name
        for path in emit_launch(profile, args.emit, emit_dir, out_dir, gpus_per_node=args.gpus_per_node):
            print(path)
        return 0
    print(f"profile {profile.name}: {len(profile.runs)} runs -> {out_dir}", flush=True)
    try:
        result = run_sweep(profile, out_dir, retry_failed=args.retry_failed, progress=not args.quiet)
    except KeyboardInterrupt:
        kept = len(list(Path(out_dir).glob("*.json")))
        print(f"interrupted: {kept} records kept in {out_dir}; the run in flight has none. Re-run the same "
              "command to resume", file=sys.stderr)
        return 130
    print(result.summary())
    if result.failed:
        print("failed: " + ", ".join(result.failed), file=sys.stderr)
    return 0 if not result.failed else 1


def _cmd_profiles(_: argparse.Namespace) -> int:
    from companion.runs.profiles import available_profiles, load_profile

    for name in available_profiles():
        p = load_profile(name, device_name="GPU" if name.startswith("gpu") else None)
        sizes = ", ".join(f"{len(r)}x ws{ws}" for ws, r in p.by_world_size().items())
        print(f"{name:10s} {len(p.runs):3d} runs ({sizes}) on {p.device}: {' '.join(p.description.split())}")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from companion.energy.fit import FittedModel
    from companion.energy.predict import find_fit, format_prediction, make_plan, predict
    from companion.runs.records import strict_dumps

    if args.model is not None:
        clash = [f"--{n.replace('_', '-')}" for n in ("layers", "hidden", "heads", "ffn") if getattr(args, n)]
        if clash:
            raise ConfigError(f"--model {args.model} fixes the architecture, so {', '.join(clash)} would be ignored; "
                              "drop --model or drop " + ", ".join(clash))
    plan = make_plan(model=args.model, layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=args.ffn,
                     vocab=args.vocab, max_positions=args.max_positions, seq_len=args.seq_len,
                     lengths=args.lengths, batch_size=args.batch_size, tokens=args.tokens, examples=args.examples,
                     epochs=args.epochs, tp=args.tp, dp=args.dp, device=args.device, devices=args.devices,
                     precision=args.precision, country=args.country)
    fitted = FittedModel.load(args.fit or find_fit(plan.device_name))
    result = predict(plan, fitted, law=args.law, level=args.level)
    if args.json:
        print(strict_dumps(result, indent=1))  # strict JSON: a non-finite number is written as null
    else:
        print(format_prediction(result, warnings=False))
    for w in result["warnings"]:  # one line each, on stderr, whatever the output format
        print(f"warning: {w}", file=sys.stderr)
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
    pr = sub.add_parser("predict", help="predict a planned fine-tune's energy, time and CO2 (with intervals)",
                        description="Predict energy (kWh), time (h) and CO2 (kg) of a planned fine-tune from a "
                                    "law fitted on runs of the same device type (data/derived/<profile>/fit.json).")
    pr.add_argument("--model", help="named size: bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large")
    for name in ("layers", "hidden", "heads"):
        pr.add_argument(f"--{name}", type=int, help="architecture (instead of --model)")
    pr.add_argument("--ffn", type=int, default=0, help="FFN width (default 4*hidden)")
    pr.add_argument("--vocab", type=int, default=30522)
    pr.add_argument("--max-positions", type=int, default=512)
    pr.add_argument("--seq-len", type=int, default=128, help="longest (padded) sequence, tokens")
    pr.add_argument("--lengths", help="length distribution: fixed | uniform:MIN | hist:LEN=W,...")
    pr.add_argument("--batch-size", type=int, default=32, help="sequences per optimizer step (global)")
    pr.add_argument("--tokens", type=float, help="real tokens to train on (instead of --examples)")
    pr.add_argument("--examples", type=float, help="training examples (with --epochs)")
    pr.add_argument("--epochs", type=float, default=1.0)
    pr.add_argument("--tp", type=int, default=1)
    pr.add_argument("--dp", type=int, default=1)
    pr.add_argument("--device", default="cpu", help="device type from the hardware table (cpu, A100, H100, ...)")
    pr.add_argument("--devices", type=int, help="device count (must equal tp*dp)")
    pr.add_argument("--precision", choices=["fp32", "bf16"])
    pr.add_argument("--country", default="USA", help="ISO alpha-3 code for the carbon intensity")
    pr.add_argument("--law", default="roofline_power_law", help="roofline_power_law (default) or energy_roofline")
    pr.add_argument("--level", type=float, default=0.9, help="prediction-interval level (default 0.9)")
    pr.add_argument("--fit", type=Path, help="fit artifact (default: the one for --device under data/derived/)")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        return _cmd_run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return {"sweep": _cmd_sweep, "profiles": _cmd_profiles, "predict": _cmd_predict}[args.command](args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
