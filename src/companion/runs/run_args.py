"""The arguments of ``companion run`` (and of ``python -m companion.runs.train`` under torchrun), checked without
importing torch: a bad flag or configuration is one ``error:`` line before seconds of imports."""

from __future__ import annotations

import argparse
from pathlib import Path

from companion.errors import ConfigError, OneLineParser
from companion.runs.config import RunConfig, build_run


def run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="companion run",
        description="The per-rank runner: fine-tune, measure, write one record per configuration.",
    )
    parser.add_argument("--plan", type=Path, help="JSON plan written by `companion sweep` (a list of runs)")
    parser.add_argument(
        "--serve",
        type=Path,
        metavar="QUEUE",
        help="run the plans `companion sweep` writes to QUEUE (0.json, 1.json, ...) in turn, each as --plan, "
        "writing <k>.done after each, until QUEUE/stop appears: one launch serves a world size's every pass",
    )
    parser.add_argument("--out", type=Path, help="record folder (default: data/runs/<profile>)")
    parser.add_argument("--profile-name", default="manual", help="profile name stored in the records")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="run the configuration again if its record is "
        "'failed' (the failed record is moved to failed/, not deleted)",
    )
    parser.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even when the estimated peak memory "
        "exceeds the device's (`companion run` refuses it by default)",
    )
    add_config_arguments(parser)
    return parser


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every flat config field (``--layers``, ``--seq-len``, ``--tp``, ...)."""
    g = parser.add_argument_group("run configuration (defaults from companion.runs.config)")
    ints = [
        "layers",
        "hidden",
        "heads",
        "ffn",
        "vocab",
        "max_positions",
        "num_labels",
        "seq_len",
        "batch_size",
        "pad_multiple",
        "tp",
        "dp",
        "warmup_steps",
        "window_steps",
        "min_windows",
        "max_steps",
        "seed",
        "threads",
        "replicate",
    ]
    floats = ["dropout", "lr", "warmup_s", "min_window_s", "target_rel_ci", "max_time_s"]
    strs = [
        "attn",
        "checkpoint",
        "source",
        "text_field",
        "label_field",
        "tokenizer",
        "device",
        "device_name",
        "precision",
        "meter",
        "country",
        "execution",
        "engine",
    ]
    from companion.runs.config import field_help

    described = field_help()
    for kind, names in ((int, ints), (float, floats), (str, strs)):
        for name in names:
            g.add_argument(
                f"--{name.replace('_', '-')}",
                dest=name,
                type=kind,
                help=described.get(name, "").replace("%", "%%") or None,
            )
    g.add_argument(
        "--lengths",
        type=str,
        help="token lengths of the examples: fixed (all seq_len) | uniform:MIN "
        "(uniform from MIN to seq_len) | hist:LEN=W,LEN=W,... (a histogram of lengths and weights)",
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    from companion.runs.config import (
        DATA_FIELDS,
        LAYOUT_FIELDS,
        MODEL_FIELDS,
        PROTOCOL_FIELDS,
        RUN_FIELDS,
        parse_lengths,
    )
    from companion.runs.provenance import canonical_device_name, device_tag

    names = set(MODEL_FIELDS) | set(DATA_FIELDS) | set(LAYOUT_FIELDS) | set(PROTOCOL_FIELDS) | set(RUN_FIELDS)
    flat = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if isinstance(flat.get("lengths"), str):
        flat["lengths"] = parse_lengths(flat["lengths"])
    device = flat.get("device", "cpu")
    flat["device_name"] = canonical_device_name(flat.get("device_name") or device_tag(device))
    flat.setdefault("precision", "bf16" if device == "cuda" else "fp32")
    return build_run(flat)


def check_run_args(argv: list[str]) -> tuple[argparse.Namespace, RunConfig | None]:
    """What ``companion run`` can reject before training: its flags (argparse exits 2 with one line), a plan that
    does not exist, and a configuration its flags describe (ConfigError naming the field). Returns the parsed
    flags and that configuration (None for a plan)."""
    args = run_parser().parse_args(argv)
    if args.plan:
        if not args.plan.is_file():
            raise ConfigError(
                f"plan {str(args.plan)!r} does not exist; write one with `companion sweep --emit`"
            )
        return args, None
    return args, config_from_args(args)
