"""How close the memory estimate (``companion.energy.memory``) comes to what a training step allocates.

    python benchmarks/memory_estimate.py                      # tracked on CPU: a grid of sizes x layouts x precisions
    python benchmarks/memory_estimate.py --records data/runs/gpu-1   # against the peaks GPU runs recorded
    python benchmarks/memory_estimate.py --device cuda        # one GPU's steps, as its allocator counts them

The default tracks one steady training step of every configuration on a simulated process group
(``companion.runs.memtrack``: torch's MemTracker / FSDPMemTracker) and prints, per configuration, the tracked peak,
the estimate, their ratio and the moment the estimate puts the peak at; then the ratio's range and median.
``--records`` reads run records: on a GPU, ``peak_memory_bytes`` is ``torch.cuda.max_memory_allocated`` and the
estimate is compared with it as it is; on a CPU it is the process's peak RSS during the run (libraries included;
in older records, its max RSS over the launch, earlier runs included), so the estimate plus
``CPU_PROCESS_BASE_BYTES`` is printed beside it as an upper-bound reading, not a check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

# (layers, hidden, heads, seq_len, batch, vocab): activation-bound, scores-bound, state-bound, vocabulary-heavy
SIZES = [
    (2, 128, 4, 128, 8, 2048),
    (4, 256, 8, 128, 16, 2048),
    (6, 384, 12, 64, 32, 2048),
    (2, 128, 4, 512, 4, 2048),
    (2, 128, 2, 512, 4, 2048),
    (3, 192, 6, 256, 4, 2048),
    (1, 128, 4, 32, 4, 2048),
    (2, 256, 4, 16, 2, 2048),
    (2, 256, 4, 32, 8, 30522),
    (4, 256, 4, 64, 8, 30522),
]
LAYOUTS = [(1, 1), (2, 1), (4, 1), (1, 2), (1, 4), (2, 2)]
# (attention, dropout): the sweeps' SDPA with dropout (the math kernel on CPU), and the other kernels a run can use
KERNELS = [("sdpa", 0.1), ("eager", 0.1), ("eager", 0.0), ("sdpa", 0.0)]


def tracked_grid(sizes=SIZES, layouts=LAYOUTS, precisions=("fp32", "bf16"), kernels=KERNELS) -> list[dict]:
    """Every size x layout x precision with the sweeps' kernel; the other kernels, and batches padded to their longest
    sequence (every sequence but the first half as long, with an attention mask), on one device, under TP and under
    FSDP."""
    from itertools import product

    from companion.runs.config import build_run, parse_lengths
    from companion.runs.memtrack import tracked_step_bytes

    rows = []
    for layers, hidden, heads, seq, batch, vocab in sizes:
        for tp, dp in layouts:
            if heads % tp or batch % dp:
                continue
            for precision in precisions:
                others = (tp, dp) in ((1, 1), (2, 1), (1, 2))
                for (attn, dropout), padded in product(
                    kernels if others else kernels[:1], (False, True) if others and batch > 1 else (False,)
                ):
                    lengths = parse_lengths(f"uniform:{max(2, seq // 4)}" if padded else "fixed")
                    cfg = build_run(
                        {
                            "layers": layers,
                            "hidden": hidden,
                            "heads": heads,
                            "vocab": vocab,
                            "seq_len": seq,
                            "batch_size": batch,
                            "tp": tp,
                            "dp": dp,
                            "attn": attn,
                            "dropout": dropout,
                            "precision": precision,
                            "lengths": lengths,
                        }
                    )
                    got = tracked_step_bytes(cfg.model, cfg.layout, batch, seq, precision, padded=padded)
                    rows.append(_compared(cfg, got["peak"], f"-v{vocab} tp{tp}-dp{dp}", padded, "tracked"))
    return rows


def _compared(cfg, measured_bytes: float, where: str, padded: bool, what: str) -> dict:
    """One row: a configuration's measured peak beside the estimate of its longest step, printed as it comes."""
    from companion.energy import memory

    m, d = cfg.model, cfg.data
    est = memory.peak_bytes_per_rank(memory.longest_step_shape(cfg), on_cuda=cfg.device == "cuda")
    r = {
        "config": f"L{m.layers}-h{m.hidden}-a{m.heads}-s{d.seq_len}-b{d.batch_size}{where} {cfg.precision} {m.attn} "
        f"p={m.dropout}{' padded' if padded else ''}",
        "tracked": measured_bytes,
        "estimate": est["peak"],
        "at": est["peak_at"],
    }
    print(
        f"{r['config']:63s} {what} {r['tracked'] / 1e6:10.2f} MB  estimate {r['estimate'] / 1e6:10.2f} MB  "
        f"ratio {r['estimate'] / r['tracked']:.3f}  ({r['at']})",
        flush=True,
    )
    return r


# one GPU: BERT-base at two lengths, a small model at 512 tokens, BERT-large (layers, hidden, heads, seq_len, batch)
CUDA_SIZES = [(12, 768, 12, 128, 32), (12, 768, 12, 512, 16), (4, 256, 4, 512, 32), (24, 1024, 16, 512, 8)]


def cuda_grid(sizes=CUDA_SIZES, precisions=("bf16", "fp32"), kernels=KERNELS) -> list[dict]:
    """On one CUDA GPU: every size x precision x kernel, of one length or padded, measured by the CUDA allocator
    (``memtrack.cuda_step_bytes``) beside the estimate's CUDA rules."""
    from itertools import product

    from companion.runs.config import build_run, parse_lengths
    from companion.runs.memtrack import cuda_step_bytes

    rows = []
    for (layers, hidden, heads, seq, batch), precision, (attn, dropout), padded in product(
        sizes, precisions, kernels, (False, True)
    ):
        cfg = build_run(
            {
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "vocab": 30522,
                "seq_len": seq,
                "batch_size": batch,
                "attn": attn,
                "dropout": dropout,
                "precision": precision,
                "device": "cuda",
                "device_name": "cuda",
                "lengths": parse_lengths(f"uniform:{seq // 4}" if padded else "fixed"),
            }
        )
        got = cuda_step_bytes(cfg.model, batch, seq, precision, padded=padded)
        rows.append(_compared(cfg, got["peak"], "", padded, "allocated"))
    return rows


def from_records(folder: Path) -> list[dict]:
    """Each finished run's recorded peak beside the estimate of its longest step (``longest_step_shape`` of the
    run's own configuration: its kernel, dropout and lengths)."""
    from companion.energy import memory
    from companion.runs.config import RunConfig
    from companion.runs.records import load_records

    rows = []
    for rec in load_records(folder, status="ok"):
        cfg = RunConfig.from_dict({k: v for k, v in rec["config"].items() if k not in ("world_size", "mode")})
        on_cuda = cfg.device == "cuda"
        est = memory.peak_bytes_per_rank(memory.longest_step_shape(cfg), on_cuda)["peak"]
        est += 0 if on_cuda else memory.CPU_PROCESS_BASE_BYTES
        got = float(rec["memory"]["peak_bytes_max_rank"])
        rows.append({"config": cfg.run_id, "tracked": got, "estimate": est, "at": ""})
        print(
            f"{cfg.run_id:60s} recorded {got / 1e6:9.1f} MB  estimate{'' if on_cuda else ' + base'} "
            f"{est / 1e6:9.1f} MB  ratio {est / got:.3f}",
            flush=True,
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--records", type=Path, help="a folder of run records to compare with instead of tracking"
    )
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: one GPU's steps, measured by the CUDA allocator, against the estimate's CUDA rules",
    )
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")  # FSDP2 on the simulated group and the trackers' module hooks warn
    if args.device == "cuda" and not args.records:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(
                "error: --device cuda needs a CUDA GPU and none is visible; run it on a GPU machine"
            )
    t0 = time.perf_counter()
    rows = (
        from_records(args.records)
        if args.records
        else cuda_grid()
        if args.device == "cuda"
        else tracked_grid()
    )
    if not rows:
        print("no configurations", file=sys.stderr)
        return 1
    ratios = sorted(r["estimate"] / r["tracked"] for r in rows)
    what = "recorded" if args.records else "allocated" if args.device == "cuda" else "tracked"
    print(
        f"\nestimate / {what} peak over {len(ratios)} configurations: min {ratios[0]:.3f}, median "
        f"{statistics.median(ratios):.3f}, max {ratios[-1]:.3f}; within 0.9-1.1: "
        f"{sum(0.9 <= x <= 1.1 for x in ratios)} ({time.perf_counter() - t0:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
