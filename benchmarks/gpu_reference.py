"""Reference measurements on one NVIDIA GPU: idle and hot-idle power, NVML vs CodeCarbon on the same window,
and the MFU and FLOP/J of BERT-base at seq_len 512 in bf16.

    python benchmarks/gpu_reference.py --out data/reference/H100/gpu_reference.json

Idle: the board's NVML energy counter over a window with no CUDA context in this process. Hot idle: the same
with a CUDA context and memory allocated but no kernel running. Both are averages of the counter (energy /
time), never single power samples. Prints the figures and writes them, with provenance, as one JSON file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _nvml_reader(index: int = 0):
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return lambda: float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--window-steps", type=int, default=50)
    args = ap.parse_args()

    from companion.runs.meters import counter_mean_power
    from companion.energy.proxies import mfu

    read = _nvml_reader(0)
    idle = counter_mean_power(read, args.idle_s)  # before this process creates a CUDA context

    import torch

    from companion.energy import hardware, proxies
    from companion.runs.config import build_run
    from companion.runs.data import SyntheticTask, collate
    from companion.runs.meters import CodeCarbonMeter, NvmlMeter
    from companion.runs.model import build_model
    from companion.runs.provenance import device_tag, static_provenance, utc_now
    from companion.energy import memory
    from companion.runs.train import make_train_step, without_full_mask

    device = torch.device("cuda", 0)
    ballast = torch.empty(int(8 * 2**30), dtype=torch.uint8, device=device)  # 8 GiB held, no kernels
    torch.cuda.synchronize()
    hot_idle = counter_mean_power(read, args.idle_s)
    del ballast
    torch.cuda.empty_cache()

    cfg = build_run(
        {
            "layers": 12,
            "hidden": 768,
            "heads": 12,
            "vocab": 30522,
            "seq_len": 512,
            "batch_size": 32,
            "device": "cuda",
            "device_name": device_tag("cuda"),
            "precision": "bf16",
            "dropout": 0.1,
        }
    )
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    # as the runner feeds it: an all-ones attention mask dropped (it changes no result)
    batch = {
        k: v.to(device)
        for k, v in without_full_mask(
            collate(SyntheticTask(cfg.data, cfg.model.vocab, 2, 0).global_batch(0)).tensors
        ).items()
    }

    train_step = make_train_step(model, opt, bf16_autocast=True)
    step = lambda: train_step(batch)  # noqa: E731

    for _ in range(10):
        step()
    sync = torch.cuda.synchronize
    sync()
    torch.cuda.reset_peak_memory_stats(device)  # the window's steps: the optimizer's states already made
    nvml = NvmlMeter(0, sync=sync)
    cc = CodeCarbonMeter("USA", sync=sync)
    cc.begin_window("same")
    nvml.begin_window("same")
    for _ in range(args.window_steps):
        step()
    m_nvml = nvml.end_window("same")
    m_cc = cc.end_window("same")
    cc.close()
    shape = proxies.StepShape(12, 768, 12, 3072, 30522, 512, 2, 32, 32 * 512, 32 * 512 * 512, 1, 1, "bf16")
    flops = proxies.flops_per_step(shape)
    step_s = m_nvml.time_s / args.window_steps
    peak = hardware.peak_flops_per_s(cfg.device_name, "bf16")
    spec = hardware.device_spec(cfg.device_name)
    gflop_per_j = flops * args.window_steps / m_nvml.total_energy_j / 1e9
    result = {
        "device": cfg.device_name,
        "measured_at": utc_now(),
        "idle": {**idle, "method": "NVML energy counter, no CUDA context in the process"},
        "hot_idle": {**hot_idle, "method": "NVML energy counter, CUDA context + 8 GiB allocated, no kernels"},
        "bert_base_s512_bf16": {
            "run_id": cfg.run_id,
            "step_s": step_s,
            "flops_per_step": flops,
            "mfu": mfu(flops, step_s, peak),  # one GPU: per-rank FLOPs = step FLOPs
            "gflop_per_j": gflop_per_j,
            "peak_gflop_per_j": peak / spec["tdp_w"] / 1e9,
            "nvml": m_nvml.to_json(),
            "codecarbon": m_cc.to_json(),
            "codecarbon_gpu_over_nvml": m_cc.components.get("gpu", {}).get("energy_j", float("nan"))
            / m_nvml.total_energy_j,
            # the caching allocator's peak over the window (measured) beside companion.energy.memory's estimate
            "memory": {
                "max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
                "estimated_peak_bytes": memory.peak_bytes_per_rank(memory.longest_step_shape(cfg), True)[
                    "peak"
                ],
                "estimate_kind": "estimated (companion.energy.memory)",
            },
        },
        "provenance": static_provenance("cuda"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    b = result["bert_base_s512_bf16"]
    print(
        f"idle {idle['mean_power_w']:.1f} W, hot idle {hot_idle['mean_power_w']:.1f} W (NVML counter averages)"
    )
    print(
        f"BERT-base s512 bf16: {step_s * 1e3:.1f} ms/step, MFU {b['mfu'] * 100:.1f} %, "
        f"{gflop_per_j:.0f} GFLOP/J (peak/TDP {b['peak_gflop_per_j']:.0f})"
    )
    print(
        f"same window: NVML {m_nvml.total_energy_j:.1f} J, CodeCarbon GPU part "
        f"{m_cc.components.get('gpu', {}).get('energy_j', float('nan')):.1f} J (ratio {b['codecarbon_gpu_over_nvml']:.3f})"
    )
    mem = b["memory"]
    print(
        f"memory: {mem['max_allocated_bytes'] / 1e9:.2f} GB allocated at peak (CUDA allocator), estimate "
        f"{mem['estimated_peak_bytes'] / 1e9:.2f} GB (ratio {mem['estimated_peak_bytes'] / mem['max_allocated_bytes']:.3f})"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
