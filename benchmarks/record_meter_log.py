"""Record a meter log for replay tests: real windows of a tiny fine-tune, measured by this machine's meter.

    python benchmarks/record_meter_log.py --meter codecarbon --out tests/fixtures/meter_logs/codecarbon_cpu.jsonl
    python benchmarks/record_meter_log.py --meter nvml --device cuda --out data/reference/H100/nvml_windows.jsonl

Each line is one window as ``companion.runs.meters.Measurement`` JSON, with its source and measured/estimated label.
"""

from __future__ import annotations

import argparse

import torch

from companion.runs.config import build_run
from companion.runs.meters import RecordingMeter, make_meter
from companion.runs.model import build_model
from companion.runs.data import SyntheticTask, collate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meter", default="codecarbon", choices=["codecarbon", "nvml"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--steps-per-window", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = build_run({"layers": 2, "hidden": 128, "heads": 4, "seq_len": 64, "batch_size": 8, "device": args.device})
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else None
    meter = RecordingMeter(make_meter(args.meter, args.device, 0, True, "USA", sync), args.out)
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    task = SyntheticTask(cfg.data, cfg.model.vocab, 2, 0)
    batch = {k: v.to(device) for k, v in collate(task.global_batch(0)).tensors.items()}
    for k in range(args.windows):
        meter.begin_window(f"w{k}")
        for _ in range(args.steps_per_window):
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
        m = meter.end_window(f"w{k}")
        print(f"w{k}: {m.time_s:.3f} s, {m.total_energy_j:.3f} J ({m.source}, measured={m.measured})")
    meter.close()


if __name__ == "__main__":
    main()
