"""Which attention kernels a compiled BERT step runs: torch.profiler's device kernels for training steps of BERT-base
(batch 32, 512 tokens) eager, compiled whole with the runs' attention dropout (0.1), compiled whole without it, and
compiled with SDPA left out of the graphs (``attn: sdpa-nocompile``). Per variant: the step time and the device time
in fused attention kernels (names with flash, fmha or attention) against the rest.

    python benchmarks/compiled_attention.py                      # on a CUDA GPU, ~1.5 min (three compilations)
    python benchmarks/compiled_attention.py --device cpu --layers 1 --seq-len 64 --batch-size 2   # a dry run

Its batches carry no attention mask, as the runner's did before it fed compiled steps one (``train.step_inputs``):
it shows the math path such a graph runs, with dropout or without (``data/reference/H100/compiled_attention.json``);
``benchmarks/compiled_sdpa.py`` says which set-up keeps the fused kernel. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time

FUSED = (
    "flash",
    "fmha",
    "attention",
)  # fused attention kernels' names (FlashAttention, memory-efficient, cuDNN)
VARIANTS = (  # (execution, attn, dropout)
    ("eager", "sdpa", 0.1),
    ("compile", "sdpa", 0.1),
    ("compile", "sdpa", 0.0),
    ("compile", "sdpa-nocompile", 0.1),
)


def measure(device: str, execution: str, attn: str, dropout: float, args) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model
    from companion.runs.parallel import adamw_kernel
    from companion.runs.train import compiled, make_train_step

    torch.manual_seed(0)
    config = ModelConfig(
        layers=args.layers, hidden=768, heads=12, vocab=30522, dropout=dropout, attn=attn, max_positions=512
    )
    model = build_model(config).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **adamw_kernel(torch.device(device).type))
    step = make_train_step(compiled(model, execution), opt, bf16_autocast=device == "cuda")
    batch = {
        "input_ids": torch.randint(0, 30522, (args.batch_size, args.seq_len), device=device),
        "labels": torch.randint(0, 2, (args.batch_size,), device=device),
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(3):  # compiles on the first
        step(batch)
    sync()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(batch)
    sync()
    step_ms = (time.perf_counter() - t0) / args.steps * 1e3
    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(2):
            step(batch)
        sync()
    kernels: dict[str, float] = {}
    for e in prof.key_averages():
        us = e.device_time_total if device == "cuda" else e.self_cpu_time_total
        if us > 0:
            kernels[e.key] = kernels.get(e.key, 0.0) + us / 2  # per step
    fused = {k: v for k, v in kernels.items() if any(w in k.lower() for w in FUSED)}
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "execution": execution,
        "attn": attn,
        "dropout": dropout,
        "warmup_s": round(first_s, 1),
        "step_ms": round(step_ms, 2),
        "fused_attention_ms": round(sum(fused.values()) / 1e3, 2),
        "all_kernels_ms": round(sum(kernels.values()) / 1e3, 2),
        "fused_attention_kernels": sorted(fused, key=fused.get, reverse=True)[:4],
        "top_kernels": [
            [k[:90], round(v / 1e3, 2)] for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:6]
        ],
    }


def step_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The BERT step both attention benchmarks time (this one and compiled_sdpa.py): device, shape, steps, output."""
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    ap.add_argument("--out", help="also write the figures here (JSON)")
    return ap


def main(argv=None) -> int:
    args = step_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    rows = []
    for execution, attn, dropout in VARIANTS:
        row = measure(args.device, execution, attn, dropout, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "device": args.device,
                    "layers": args.layers,
                    "seq_len": args.seq_len,
                    "batch_size": args.batch_size,
                    "variants": rows,
                },
                f,
                indent=1,
            )
    print(f"{'variant':<34} {'step ms':>8} {'fused attention ms':>19} {'all kernels ms':>15}")
    for r in rows:
        name = f"{r['execution']}, {r['attn']}, dropout {r['dropout']}"
        print(
            f"{name:<34} {r['step_ms']:>8.2f} {r['fused_attention_ms']:>19.2f} {r['all_kernels_ms']:>15.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
