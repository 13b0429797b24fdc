"""Meter overhead: step time with the meter running / without it, interleaved in one process.

    python benchmarks/meter_overhead.py                      # CPU: CodeCarbon meter, tiny BERT
    python benchmarks/meter_overhead.py --device cuda        # GPU: NVML meter, BERT-base bf16

Three arms are interleaved in rotating order: the meter, no meter, and no meter again. The first ratio is
the overhead (target <= 1.01); the second (no meter / no meter, an A/A control) is the noise floor of the
machine, the resolution of the first. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from companion.runs.config import build_run
from companion.runs.data import SyntheticTask, collate
from companion.runs.meters import NullMeter, make_meter
from companion.runs.model import build_model
from companion.runs.train import make_train_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=16, help="rounds of (meter, no meter, no meter) windows")
    ap.add_argument("--window-s", type=float, default=1.0, help="target window length, seconds")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    shape = (
        {"layers": 12, "hidden": 768, "heads": 12, "vocab": 30522, "seq_len": 512, "batch_size": 32}
        if cuda
        else {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 128, "batch_size": 8}
    )
    cfg = build_run({**shape, "device": args.device, "precision": "bf16" if cuda else "fp32"})
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    meter = make_meter("auto", args.device, 0, True, "USA", sync=sync if cuda else None)
    bare = NullMeter(sync if cuda else None)
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = {
        k: v.to(device)
        for k, v in collate(SyntheticTask(cfg.data, cfg.model.vocab, 2, 0).global_batch(0)).tensors.items()
    }
    train_step = make_train_step(model, opt, bf16_autocast=cuda)
    step = lambda: train_step(batch)  # noqa: E731

    for _ in range(5):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    sync()
    steps = max(1, round(args.window_s / ((time.perf_counter() - t0) / 3)))
    control = NullMeter(sync if cuda else None)
    arms = [("metered", meter), ("bare", bare), ("control", control)]
    per_step = {label: [] for label, _ in arms}
    for k in range(args.rounds):
        for label, m in arms[k % 3 :] + arms[: k % 3]:  # rotate the order: no arm always runs first
            m.begin_window(f"{label}{k}")
            for _ in range(steps):
                step()
            per_step[label].append(m.end_window(f"{label}{k}").time_s / steps)
    meter.close()
    med = {k: statistics.median(v) for k, v in per_step.items()}
    print(f"device: {args.device}, meter: {meter.source} (measured={meter.measured})")
    print(f"config: {cfg.run_id}; {args.rounds} rounds of 3 windows of {steps} steps")
    print(f"median step time with meter:    {med['metered'] * 1e3:.3f} ms")
    print(f"median step time without meter: {med['bare'] * 1e3:.3f} ms")
    print(f"overhead ratio (with / without): {med['metered'] / med['bare']:.4f}  (target <= 1.01)")
    print(f"noise floor (A/A, without / without): {med['control'] / med['bare']:.4f}")


if __name__ == "__main__":
    main()
