"""The ``companion`` command.

companion run ...          one configuration (also under torchrun: ``torchrun -m companion.runs.train``)
companion sweep --profile  a named grid of runs, resumable; or --emit torchrun|slurm|accelerate for a cluster
companion profiles         the profiles and how many runs each holds
companion predict ...      a planned fine-tune's energy, time and CO2, with intervals, before running it
companion plan ...         every TP x FSDP layout and batch size of a fine-tune, ranked, with the Pareto front
companion calibrate        microbenchmarks of this device for the operator roofline (data/devices/<name>.json)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from companion.errors import (
    ConfigError,
    OneLineParser,
    Terminated,
    raise_interrupted,
    raise_terminated,
    raise_if_stopped,
)
from companion.runs.config import ATTENTION_KERNELS


def _cmd_run(argv: list[str]) -> int:
    from companion.runs.run_args import check_run_args

    try:
        args, cfg = check_run_args(argv)  # before the runner's imports (torch, transformers: seconds)
        _check_cpu_is_not_named_a_gpu(cfg)
        if cfg is not None and not args.no_memory_check:
            _check_fits_memory([cfg])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from companion.runs import train

    return train.main(argv)


def _check_cpu_is_not_named_a_gpu(cfg) -> None:
    """A CPU run tagged with a GPU's name from the hardware table would be analysed as that GPU's run."""
    if cfg is None or cfg.device != "cpu" or cfg.device_name == "cpu":
        return
    from companion.energy.hardware import device_table

    if cfg.device_name in device_table():
        raise ConfigError(
            f"device_name={cfg.device_name!r} names a GPU of the hardware table, but device='cpu': the "
            "records would be tagged as that GPU's; name the CPU (e.g. 'cpu') or run with --device cuda"
        )


def _check_fits_memory(configs) -> None:
    """Refuse, before any launch, runs whose estimated peak memory exceeds their device's (``energy.memory``): on a
    CPU node the kernel would kill the launch, on a GPU the run would fail after its model was built."""
    from companion.energy.memory import misfit_message, runs_that_do_not_fit

    misfits = runs_that_do_not_fit(configs)
    if not misfits:
        return
    cfg, check = misfits[0]
    n = len(misfits) - 1
    more = (
        f" ({n} more run{'s' if n > 1 else ''} too: {', '.join(c.run_id for c, _ in misfits[1:4])}"
        f"{', ...' if n > 3 else ''})"
        if n
        else ""
    )
    raise ConfigError(
        f"run {cfg.run_id}: {misfit_message(check, cfg.device_name, fixes='run')}{more}. The estimate "
        "may be off by a tenth or so: --no-memory-check runs it anyway"
    )


def _cmd_sweep(args: argparse.Namespace) -> int:
    from companion.paths import build_dir, runs_dir
    from companion.runs.records import check_writable
    from companion.runs.profiles import load_profile
    from companion.runs.sweep import emit_launch, measured_alongside, run_sweep

    if args.emit and args.emit_dir is not None:
        check_writable(args.emit_dir, "--emit-dir")
    profile = load_profile(args.profile, device_name=args.device_name)
    out_dir = args.out or runs_dir(profile.name)
    if (
        args.emit
        and profile.device == "cuda"
        and args.device_name is None
        and profile.runs[0].device_name == "cuda"
    ):
        raise ConfigError(
            f"no GPU is visible here to name the hardware of profile {profile.name!r}'s runs; "
            "pass --device-name with the cluster's GPU type, e.g. --device-name H100"
        )
    alongside = [] if args.alone else measured_alongside(profile, out_dir)
    if not args.no_memory_check:
        _check_fits_memory([*profile.runs, *(r for other, _ in alongside for r in other.runs)])
    if args.emit:
        emit_dir = args.emit_dir or build_dir() / "launch" / profile.name
        for other, folder in alongside:
            print(
                f"measured with profile {other.name}: {len(other.runs)} runs -> {folder} (in the same plans)"
            )
        for path in emit_launch(
            profile, args.emit, emit_dir, out_dir, gpus_per_node=args.gpus_per_node, alongside=alongside
        ):
            print(path)
        return 0
    print(f"profile {profile.name}: {len(profile.runs)} runs -> {out_dir}", flush=True)
    for other, folder in alongside:
        print(
            f"  measured with profile {other.name}: {len(other.runs)} runs -> {folder} (in the same launches)",
            flush=True,
        )
    try:
        result = run_sweep(
            profile, out_dir, retry_failed=args.retry_failed, progress=not args.quiet, alongside=alongside
        )
    except KeyboardInterrupt as exc:
        kept = " and ".join(
            f"{len(list(Path(folder).glob('*.json')))} records kept in {folder}"
            for folder in [out_dir, *(f for _, f in alongside)]
        )
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(
            f"{how}: {kept}; the run in flight has none. Re-run the same command to resume", file=sys.stderr
        )
        return 143 if isinstance(exc, Terminated) else 130
    results = [result, *result.alongside]
    failed = [run_id for r in results for run_id in r.failed]
    for r in results:
        print(r.summary())
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 0 if not failed else 1


def _cmd_profiles(_: argparse.Namespace) -> int:
    from companion.runs.profiles import available_profiles, load_profile

    for name in available_profiles():
        p = load_profile(name, device_name="GPU" if name.startswith("gpu") else None)
        sizes = ", ".join(f"{len(r)}x ws{ws}" for ws, r in p.by_world_size().items())
        alongside = f" [measured with {', '.join(p.measured_with)}]" if p.measured_with else ""
        print(
            f"{name:10s} {len(p.runs):3d} runs ({sizes}) on {p.device}{alongside}: {' '.join(p.description.split())}"
        )
    return 0


def _plan_request(args: argparse.Namespace) -> dict:
    if args.model is not None:
        clash = [f"--{n.replace('_', '-')}" for n in ("layers", "hidden", "heads", "ffn") if getattr(args, n)]
        if clash:
            raise ConfigError(
                f"--model {args.model} fixes the architecture, so {', '.join(clash)} would be ignored; "
                "drop --model or drop " + ", ".join(clash)
            )
    return {
        "model": args.model,
        "layers": args.layers,
        "hidden": args.hidden,
        "heads": args.heads,
        "ffn": args.ffn,
        "vocab": args.vocab,
        "max_positions": args.max_positions,
        "seq_len": args.seq_len,
        "lengths": args.lengths,
        "tokens": args.tokens,
        "examples": args.examples,
        "epochs": args.epochs,
        "device": args.device,
        "precision": args.precision,
        "country": args.country,
        "execution": args.execution,
        "engine": args.engine,
        "attn": args.attn,
    }


def _cmd_predict(args: argparse.Namespace) -> int:
    from companion.energy.predict import format_prediction, format_tiered, make_plan, predict, predict_tiered
    from companion.runs.records import strict_dumps

    plan = make_plan(
        **_plan_request(args), batch_size=args.batch_size, tp=args.tp, dp=args.dp, devices=args.devices
    )
    if args.law or args.fit:  # the paper's law (or a baseline) as fitted on this device's sweep, or in --fit
        from companion.energy.fit import FittedModel
        from companion.energy.predict import find_fit

        if args.execution != "eager" or args.engine != "native":
            raise ConfigError(
                "--law/--fit read a law fitted on eager runs of the native engine; drop --law/--fit to predict "
                f"--execution {args.execution} --engine {args.engine} with the operator model"
            )
        if args.tier not in (None, "fitted"):
            raise ConfigError(
                f"--law/--fit read a fitted law; --tier {args.tier} has none: drop them or use --tier fitted"
            )
        law = args.law or "roofline_power_law"
        from companion.energy.laws import LAWS

        if law not in LAWS:
            raise ConfigError(f"--law {law!r} is not a law; use one of {', '.join(LAWS)}")
        result = predict(
            plan, FittedModel.load(args.fit or find_fit(plan.device_name)), law=law, level=args.level
        )
        result["tier"] = "fitted"
        text = format_prediction(result, warnings=False)
    else:
        result = predict_tiered(plan, tier=args.tier, level=args.level)
        text = format_tiered(result)
    print(strict_dumps(result, indent=1) if args.json else text)  # strict JSON: non-finite numbers as null
    for w in result["warnings"]:  # one line each, on stderr, whatever the output format
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from companion.energy.predict import format_plan, plan_layouts
    from companion.runs.records import strict_dumps

    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        raise ConfigError(
            f"batch_sizes={args.batch_sizes!r} must be integers separated by commas, e.g. 16,32,64"
        ) from None
    result = plan_layouts(args.devices, batch_sizes, tier=args.tier, level=args.level, **_plan_request(args))
    print(strict_dumps(result, indent=1) if args.json else format_plan(result))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import time

    from companion.energy.calibration import calibration_names, check_calibrate_args, check_calibration
    from companion.paths import devices_dir
    from companion.runs.provenance import canonical_device_name

    if args.device_name is not None:
        args.device_name = canonical_device_name(args.device_name)
    executions = [m for m in (args.executions or "").split(",") if m]
    # bad input is said before torch is imported (seconds) and before any benchmark
    check_calibrate_args(args.device, args.device_name, args.out, args.budget_s, executions)
    from companion.runs.calibrate import calibrate, write_calibration

    t0 = time.perf_counter()
    try:
        rec = calibrate(
            args.device,
            budget_s=args.budget_s,
            device_name=args.device_name,
            check=check_calibration,
            executions=executions,
        )
        raise_if_stopped()  # a stop that a library caught is still a stop
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the ranks are stopped, nothing is written
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"calibrate {how}: no calibration file written", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    out = args.out or devices_dir() / calibration_names(rec["device_name"])[0]
    write_calibration(rec, out)
    g, p = rec["gemm"], rec["power"]
    print(
        f"{rec['device_name']}: GEMM peak {g['peak_flops_per_s'] / 1e9:.4g} GFLOP/s (k0 {g['half_dim']:.3g}), "
        f"bandwidth {rec['bandwidth']['bandwidth_bytes_per_s'] / 1e9:.4g} GB/s, launch "
        f"{rec['launch']['launch_s'] * 1e6:.3g} us, power idle {p.get('idle_w') or float('nan'):.4g} W / loaded "
        f"{p.get('loaded_w') or float('nan'):.4g} W ({'measured' if p.get('measured') else 'estimated'}), "
        f"{time.perf_counter() - t0:.1f} s -> {out}"
    )
    for w in rec.get("warnings") or []:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _add_plan_arguments(pr: argparse.ArgumentParser) -> None:
    pr.add_argument(
        "--model", help="named size: bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large"
    )
    for name in ("layers", "hidden", "heads"):
        pr.add_argument(f"--{name}", type=int, help="architecture (instead of --model)")
    pr.add_argument("--ffn", type=int, default=0, help="FFN width (default 4*hidden)")
    pr.add_argument("--vocab", type=int, default=30522)
    pr.add_argument("--max-positions", type=int, default=512)
    pr.add_argument("--seq-len", type=int, default=128, help="longest (padded) sequence, tokens")
    pr.add_argument("--lengths", help="length distribution: fixed | uniform:MIN | hist:LEN=W,...")
    pr.add_argument("--tokens", type=float, help="real tokens to train on (instead of --examples)")
    pr.add_argument("--examples", type=float, help="training examples (with --epochs)")
    pr.add_argument("--epochs", type=float, help="passes over --examples (default 1)")
    pr.add_argument(
        "--device", default="cpu", help="device type from the hardware table (cpu, A100, H100, ...)"
    )
    pr.add_argument("--precision", choices=["fp32", "bf16"])
    pr.add_argument("--country", default="USA", help="ISO alpha-3 code for the carbon intensity")
    pr.add_argument(
        "--execution",
        default="eager",
        choices=["eager", "compile", "cudagraphs"],
        help="how the step runs: eager, torch.compile or CUDA graphs (needs the calibration's execution probe)",
    )
    pr.add_argument(
        "--engine", default="native", choices=["native", "accelerate"], help="native or HF Accelerate"
    )
    pr.add_argument(
        "--attn",
        default="sdpa",
        choices=list(ATTENTION_KERNELS),
        help="attention kernel: sdpa, eager, or sdpa-nocompile (SDPA left out of a compiled step's graphs)",
    )
    pr.add_argument(
        "--tier",
        choices=["fitted", "calibrated", "prior"],
        help="fitted (this device's sweep), calibrated (its calibration file) or prior (spec sheet); "
        "default: the best this device has",
    )
    pr.add_argument("--level", type=float, default=0.9, help="prediction-interval level (default 0.9)")
    pr.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="companion", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "run", help="fine-tune and measure one configuration (see `companion run --help`)", add_help=False
    )
    sw = sub.add_parser(
        "sweep",
        help="run a profile's grid of configurations, resuming where it stopped",
        description="Run every configuration of a profile and write one record per run. "
        "Finished runs are skipped; a failed run becomes a 'failed' record.",
    )
    sw.add_argument(
        "--profile", required=True, help="profile name (ci, cpu, gpu-1, gpu-node) or a .yaml path"
    )
    sw.add_argument("--out", type=Path, help="record folder (default data/runs/<profile>)")
    sw.add_argument(
        "--retry-failed",
        action="store_true",
        help="run failed configurations again (their earlier records are moved to failed/, not deleted)",
    )
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument(
        "--alone",
        action="store_true",
        help="leave out the profiles the profile is measured with "
        "(measured_with: their runs otherwise share its launches)",
    )
    sw.add_argument(
        "--emit",
        choices=["torchrun", "slurm", "accelerate"],
        help="write multi-node launch scripts and plans instead of running",
    )
    sw.add_argument("--emit-dir", type=Path, help="where --emit writes (default build/launch/<profile>)")
    sw.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        help="GPUs per node for --emit (on a CPU profile: processes per node; default 8)",
    )
    sw.add_argument("--device-name", help="hardware tag in run IDs, e.g. H100 (default: detected)")
    sw.add_argument(
        "--no-memory-check",
        action="store_true",
        help="launch runs whose estimated peak memory exceeds their device's (refused by default)",
    )
    sub.add_parser("profiles", help="list the profiles")
    pr = sub.add_parser(
        "predict",
        help="predict a planned fine-tune's energy, time and CO2 (with intervals)",
        description="Predict energy (kWh), time (h) and CO2 (kg) of a planned fine-tune with the "
        "operator roofline in a tier (fitted, calibrated, prior), or with a fitted law.",
    )
    _add_plan_arguments(pr)
    pr.add_argument("--batch-size", type=int, default=32, help="sequences per optimizer step (global)")
    pr.add_argument("--tp", type=int, default=1)
    pr.add_argument("--dp", type=int, default=1)
    pr.add_argument("--devices", type=int, help="device count (must equal tp*dp)")
    pr.add_argument(
        "--law",
        help="use a law fitted on this device's sweep instead: roofline_power_law (the paper's), "
        "energy_roofline, tokens_linear, flops_power_law",
    )
    pr.add_argument(
        "--fit",
        type=Path,
        help="predict with the law (--law, default the paper's) in this fit artifact (default: the one for --device under data/derived/)",
    )
    pl = sub.add_parser(
        "plan",
        help="rank the TP x FSDP layouts and batch sizes of a fine-tune by energy and time",
        description="Every valid layout of a fine-tune on --devices devices, ranked by predicted "
        "energy, with the Pareto front of energy and time and the tier used.",
    )
    _add_plan_arguments(pl)
    pl.add_argument("--devices", type=int, required=True, help="devices to use (tp * dp)")
    pl.add_argument(
        "--batch-sizes", default="8,16,32,64,128", help="global batch sizes to consider (comma-separated)"
    )
    ca = sub.add_parser(
        "calibrate",
        help="microbenchmark this device for the operator roofline",
        description="GEMM roofs, attention kernels, bandwidth, launch overhead, collectives (p = 2, 4) "
        "and idle/loaded power, written to data/devices/<device-name>.json.",
    )
    ca.add_argument("--device", default="cpu", help="cpu or cuda")
    ca.add_argument(
        "--device-name", help="name of the file and device (default: cpu, or the GPU's model, e.g. H100)"
    )
    ca.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="time for the single-process benchmarks and the collectives, seconds (default 30; the layout "
        "probes and the ranks' start add about as much again)",
    )
    ca.add_argument("--out", type=Path, help="output file (default data/devices/<device-name>.json)")
    ca.add_argument(
        "--executions",
        help="also probe these execution modes' host time and kernels (comma-separated: compile, cudagraphs, "
        "and either with +sdpa-nocompile for attention left out of the compiled graphs; the operator model "
        "predicts them from it)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] in (
        ["run"],
        ["sweep"],
        ["calibrate"],
    ):  # the command, not a caller's process
        import signal

        signal.signal(signal.SIGTERM, raise_terminated)
        signal.signal(signal.SIGINT, raise_interrupted)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        return _cmd_run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return {
            "sweep": _cmd_sweep,
            "profiles": _cmd_profiles,
            "predict": _cmd_predict,
            "plan": _cmd_plan,
            "calibrate": _cmd_calibrate,
        }[args.command](args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `companion plan | head`: the reader closed its end; nothing left to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
