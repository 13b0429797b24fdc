"""Record a meter log for replay tests: real windows of a tiny fine-tune, measured by this machine's meter.

    python benchmarks/record_meter_log.py --meter codecarbon --out tests/fixtures/meter_logs/codecarbon_cpu.jsonl
    python benchmarks/record_meter_log.py --meter nvml --device cuda --out data/reference/H100/nvml_windows.jsonl
    python benchmarks/record_meter_log.py --counter-trace 20 --device cuda --out tests/fixtures/meter_logs/nvml_counter_H100.jsonl

Each line is one window as ``companion.runs.meters.Measurement`` JSON, with its source and measured/estimated label.
``--counter-trace SECONDS`` instead polls the raw NVML energy counter every millisecond while BERT-base trains
in bf16 and writes each change as ``{"t_s", "energy_mj"}`` (``companion.runs.meters.CounterReplay`` plays it
back; tests/runs/test_gpu_dry_run.py replays every ``nvml_counter_*.jsonl`` fixture through the runner's windows).
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
    ap.add_argument(
        "--counter-trace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="record the raw NVML counter under load for this long instead of windows",
    )
    args = ap.parse_args()
    if args.counter_trace:
        return record_counter_trace(args.counter_trace, args.out)
    cfg = build_run(
        {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 64, "batch_size": 8, "device": args.device}
    )
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


def record_counter_trace(seconds: float, out: str) -> None:
    """Poll cuda:0's NVML energy counter (~1 kHz) while a bf16 BERT-base trains in a background stream."""
    import json
    import threading
    import time

    from companion.runs.meters import nvml_energy_counter
    from companion.runs.train import make_train_step

    read_mj, name = nvml_energy_counter(0)
    cfg = build_run(
        {
            "layers": 12,
            "hidden": 768,
            "heads": 12,
            "vocab": 30522,
            "seq_len": 512,
            "batch_size": 32,
            "device": "cuda",
            "precision": "bf16",
        }
    )
    torch.manual_seed(0)
    model = build_model(cfg.model).cuda()
    step = make_train_step(
        model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), bf16_autocast=True
    )
    batch = {
        k: v.cuda()
        for k, v in collate(SyntheticTask(cfg.data, cfg.model.vocab, 2, 0).global_batch(0)).tensors.items()
    }
    stop = threading.Event()

    def load():
        while not stop.is_set():
            step(batch)
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(5.0)  # warm: clocks and temperature settle before the trace
    samples, t0, last = [], time.perf_counter(), None
    while (t := time.perf_counter() - t0) < seconds:
        e = read_mj()
        if e != last:
            samples.append({"t_s": round(t, 6), "energy_mj": e})
            last = e
        time.sleep(0.001)
    stop.set()
    worker.join()
    with open(out, "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in samples))
    ticks = [b["t_s"] - a["t_s"] for a, b in zip(samples, samples[1:])]
    print(
        f"{name}: {len(samples)} counter changes in {seconds} s, median tick {sorted(ticks)[len(ticks) // 2] * 1e3:.1f} ms"
        f", mean power {(samples[-1]['energy_mj'] - samples[0]['energy_mj']) / 1e3 / (samples[-1]['t_s'] - samples[0]['t_s']):.0f} W"
        f" -> {out}"
    )


if __name__ == "__main__":
    main()
