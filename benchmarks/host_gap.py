"""Where a run's step time parts from a bare training loop's, for one configuration: the same model and step
timed as a bare loop (with and without an attention mask), with the runner's own batch pool and loss list, with
the garbage collector off, and as ``companion run`` itself (its meter, and no meter). Prints one line per
variant and writes them as JSON.

    python benchmarks/host_gap.py --device cuda --out host_gap.json
    python benchmarks/host_gap.py --device cpu --layers 2 --hidden 64 --heads 2 --seq-len 32 --batch-size 4
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.runs.config import build_run  # noqa: E402
from companion.runs.data import collate, make_task, shard  # noqa: E402
from companion.runs.model import build_model  # noqa: E402
from companion.runs.parallel import adamw_kernel  # noqa: E402
from companion.runs.train import POOL_BATCHES, make_train_step, without_full_mask  # noqa: E402


def _loop_s(fn, device, seconds: float) -> float:
    """Mean time per call over ``seconds`` of back-to-back calls, synchronised at the ends only."""
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        n += 10
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0, help="per variant and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--run-s", type=float, default=10.0, help="companion run's time cap (0: skip the runs)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    device = torch.device("cuda:0" if a.device == "cuda" else "cpu")
    bf16 = device.type == "cuda"
    fields = {
        "layers": a.layers,
        "hidden": a.hidden,
        "heads": a.heads,
        "vocab": a.vocab,
        "max_positions": max(64, a.seq_len),
        "seq_len": a.seq_len,
        "batch_size": a.batch_size,
        "device": a.device,
        "device_name": a.device,
        "precision": "bf16" if bf16 else "fp32",
    }
    rows = _bare_rows(build_run(fields), device, bf16, a)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if a.run_s > 0:
        rows += _run_rows(fields, a.run_s)
    base = rows[0]["step_s"]
    for r in rows:
        print(f"{r['variant']:32s} {r['step_s'] * 1e3:8.2f} ms/step  x{r['step_s'] / base:.2f}")
    if a.out:
        a.out.write_text(json.dumps({"config": fields, "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


def _bare_rows(cfg, device, bf16: bool, a) -> list[dict]:
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **adamw_kernel(device.type))
    step = make_train_step(model, opt, bf16_autocast=bf16)
    task = make_task(cfg.data, cfg.model.vocab, cfg.model.num_labels, cfg.seed, cfg.model.checkpoint)
    pool = []
    for i in range(POOL_BATCHES):
        batch = collate(
            shard(task.global_batch(i), 0, 1), getattr(task, "pad_id", 0), cfg.data.pad_multiple, a.seq_len
        )
        pool.append({k: v.to(device) for k, v in without_full_mask(batch.tensors).items()})
    masked = {**pool[0], "attention_mask": torch.ones_like(pool[0]["input_ids"])}
    losses: list = []
    index = [0]

    def runner_step():
        losses.append(step(pool[index[0] % POOL_BATCHES]))
        index[0] += 1

    def no_gc_step():
        gc.disable()
        try:
            runner_step()
        finally:
            gc.enable()

    variants = {
        "bare, mask": lambda: step(masked),
        "bare, no mask": lambda: step(pool[0]),
        "runner's pool and loss list": runner_step,
        "same, collector off": no_gc_step,
    }
    times = {k: float("inf") for k in variants}
    for _ in range(a.rounds):
        for name, fn in variants.items():
            times[name] = min(times[name], _loop_s(fn, device, a.seconds))
    return [{"variant": k, "step_s": v} for k, v in times.items()]


def _run_rows(fields: dict, run_s: float) -> list[dict]:
    rows = []
    for meter in ("auto", "none"):
        with tempfile.TemporaryDirectory() as tmp:
            args = [f"--{k.replace('_', '-')}={v}" for k, v in fields.items()]
            cmd = [
                sys.executable,
                "-m",
                "companion.cli",
                "run",
                *args,
                f"--meter={meter}",
                "--warmup-s=3",
                "--min-window-s=3",
                "--min-windows=3",
                f"--max-time-s={run_s}",
                "--out",
                tmp,
            ]
            res = subprocess.run(cmd, capture_output=True, text=True)
            recs = list(Path(tmp).glob("*.json"))
            if not recs:
                print(res.stdout[-2000:], res.stderr[-2000:])
                continue
            t = json.loads(recs[0].read_text())["time"]
            rows.append(
                {
                    "variant": f"companion run, meter {meter}",
                    "step_s": t["step_mean_s"],
                    "windows_s": t["per_window_step_s"],
                    "probe_step_s": t.get("probe_step_s"),
                }
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
