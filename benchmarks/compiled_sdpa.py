"""Which attention kernel torch.compile keeps in a BERT training step, and why: the forward graph's attention
operator as AOTAutograd traced it (a 1-layer BERT at the runs' shapes) with the padding mask the runner passes
and without one, with the bf16 autocast outside the compiled module (as the runner runs it) and inside it, and
with SDPA limited to one fused backend (its refusal reasons kept); then BERT-base (batch 32, 512 tokens) timed
eager and compiled in each set-up whose graph kept a fused kernel, with its MFU.

    python benchmarks/compiled_sdpa.py --out build/compiled_sdpa.json         # on a CUDA GPU, ~2-4 min
    python benchmarks/compiled_sdpa.py --device cpu --layers 1 --seq-len 64 --batch-size 2 --skip-timing
    python benchmarks/compiled_sdpa.py --modes max-autotune-no-cudagraphs      # also that mode, the runner's set-up

On an H100 and an H200 the whole-model compile ran SDPA's math path (fp32 matrix products, Inductor's softmax)
where eager ran cuDNN's flash kernel (``data/reference/H100/compiled_attention.json``); this says which of the
set-ups the runner could use keeps the fused kernel. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import warnings

ATTENTION_OPS = ("scaled_dot_product", "_safe_softmax", "_softmax.")  # forward-graph operators of attention


def _model(layers: int, dropout: float, device: str):
    import torch

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(layers=layers, hidden=768, heads=12, vocab=30522, dropout=dropout, max_positions=512)
    return build_model(cfg).to(device).train()


def _batch(device: str, batch_size: int, seq_len: int, mask: bool) -> dict:
    import torch

    from companion.runs.train import step_inputs

    batch = {
        "input_ids": torch.randint(0, 30522, (batch_size, seq_len), device=device),
        "labels": torch.randint(0, 2, (batch_size,), device=device),
    }
    # with the mask: what the runner feeds a compiled step of an unpadded batch (all ones)
    return step_inputs(batch, "compile") if mask else batch


RUNNER = (
    "mask, autocast inside"  # the set-up the runner's compiled steps use (train.step_inputs, AutocastForward)
)


def _setups(device: str):
    """(name, mask passed, autocast inside the compiled module, SDPA backends allowed or None)"""
    from torch.nn.attention import SDPBackend

    rows = [
        ("mask, autocast outside", True, False, None),
        ("no mask, autocast outside", False, False, None),
        (RUNNER, True, True, None),
    ]
    if device == "cuda":
        for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            rows.append((f"mask, only {b.name}", True, False, [b]))
            rows.append((f"no mask, only {b.name}", False, False, [b]))
    return rows


def _compiled(model, device: str, inside: bool, backend=None, mode: str = "default"):
    """``model`` compiled afresh, with the bf16 autocast inside its forward as the runner's (``inside``)."""
    import torch

    from companion.runs.train import AutocastForward

    torch._dynamo.reset()
    if inside:
        model = AutocastForward(model, device)
    return torch.compile(model, backend=backend) if backend else torch.compile(model, mode=mode)


def trace(args) -> list[dict]:
    """The attention operators of each set-up's compiled forward graph (1 layer, dropout 0.1)."""
    import torch
    from functorch.compile import aot_module_simplified, make_boxed_func
    from torch.nn.attention import sdpa_kernel

    out = []
    for name, mask, inside, backends in _setups(args.device):
        ops: list[str] = []

        def fw(gm, _inputs, ops=ops):
            for n in gm.graph.nodes:
                t = str(n.target)
                if n.op == "call_function" and any(w in t for w in ATTENTION_OPS):
                    val = n.meta.get("val")
                    first = val[0] if isinstance(val, (tuple, list)) else val
                    ops.append(f"{t} {str(getattr(first, 'dtype', '')).replace('torch.', '')}")
            return make_boxed_func(gm.forward)

        def backend(gm, inputs, fw=fw):
            return aot_module_simplified(gm, inputs, fw_compiler=fw)

        model = _model(1, 0.1, args.device)
        step = _compiled(model, args.device, inside, backend=backend)
        ctx = sdpa_kernel(backends) if backends else contextlib.nullcontext()
        outer = torch.autocast(args.device, dtype=torch.bfloat16) if not inside else contextlib.nullcontext()
        row = {"setup": name}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with ctx, outer:
                    step(**_batch(args.device, 4, args.seq_len, mask)).loss.backward()
                row["ops"] = sorted(set(ops))
            except Exception as e:  # a backend that refuses: its reasons are in the warnings
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        reasons = [
            str(w.message).splitlines()[0][:200] for w in caught if "attention" in str(w.message).lower()
        ]
        if reasons:
            row["reasons"] = sorted(set(reasons))[:6]
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def _fused(row: dict) -> bool:
    return any(
        "flash" in o or "efficient" in o or "cudnn" in o for o in row.get("ops", ()) if "scaled_dot" in o
    )


def time_setup(
    args, name: str, mask: bool, inside: bool, backends, execution: str, mode: str = "default"
) -> dict:
    """Step time (10 steps after 3), fused-attention kernel time (torch.profiler, 2 steps) and MFU."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    from companion.energy import hardware, proxies
    from companion.runs.parallel import adamw_kernel
    from companion.runs.provenance import short_gpu_name
    from companion.runs.train import make_train_step

    model = _model(args.layers, 0.1, args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **adamw_kernel(torch.device(args.device).type))
    fwd = model if execution == "eager" else _compiled(model, args.device, inside, mode=mode)
    batch = _batch(args.device, args.batch_size, args.seq_len, mask)
    sdpa = (lambda: sdpa_kernel(backends)) if backends else contextlib.nullcontext
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    # the runner's step: bf16 autocast around the model unless its compiled forward holds it (AutocastForward)
    # (modes that capture CUDA graphs begin a replay each step, as the runner's cudagraphs execution does)
    graphs = execution != "eager" and args.device == "cuda" and mode in ("reduce-overhead", "max-autotune")
    train = make_train_step(fwd, opt, bf16_autocast=True, graphs=graphs)

    def step():
        with sdpa():
            train(batch)

    t0 = time.perf_counter()
    for _ in range(3):
        step()
    sync()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    step_s = (time.perf_counter() - t0) / args.steps
    activity = ProfilerActivity.CUDA if args.device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(2):
            step()
        sync()
    fused_us = all_us = 0.0
    for e in prof.key_averages():
        us = e.device_time_total if args.device == "cuda" else e.self_cpu_time_total
        all_us += us / 2
        if any(w in e.key.lower() for w in ("flash", "fmha", "attention")):
            fused_us += us / 2
    s = args.seq_len
    shape = proxies.StepShape(
        args.layers,
        768,
        12,
        3072,
        30522,
        512,
        2,
        args.batch_size,
        args.batch_size * s,
        args.batch_size * s * s,
        1,
        1,
        "bf16",
    )
    name_dev = short_gpu_name(torch.cuda.get_device_name(0)) if args.device == "cuda" else "cpu"
    try:
        peak = hardware.peak_flops_per_s(name_dev, "bf16")
    except Exception:  # a device without a datasheet entry: no MFU
        peak = None
    flops = proxies.flops_per_step(shape)
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return {
        "setup": name,
        "execution": execution,
        "torch_compile_mode": None if execution == "eager" else mode,
        "first_steps_s": round(first_s, 1),
        "step_ms": round(step_s * 1e3, 2),
        "fused_attention_ms": round(fused_us / 1e3, 2),
        "all_kernels_ms": round(all_us / 1e3, 2),
        "mfu": None if peak is None else round(proxies.mfu(flops, step_s, peak), 4),
    }


def main(argv=None) -> int:
    from compiled_attention import step_arguments  # this script's folder is on sys.path when it runs

    ap = step_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    ap.add_argument("--max-compiled", type=int, default=3, help="compiled set-ups timed, at most")
    ap.add_argument("--skip-timing", action="store_true", help="only the traces")
    ap.add_argument(
        "--modes",
        type=lambda v: [m for m in v.split(",") if m],
        default=[],
        help="further torch.compile modes to time the runner's set-up in, e.g. max-autotune-no-cudagraphs "
        "(minutes of autotuning each)",
    )
    args = ap.parse_args(argv)
    import torch

    result = {"device": args.device, "torch": torch.__version__, "seq_len": args.seq_len}
    if args.device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)

    def save() -> None:  # after each set-up: a failure later keeps what was measured
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    result["traces"] = traces = trace(args)
    save()
    if args.skip_timing:
        return 0
    setups = {s[0]: s for s in _setups(args.device)}
    result["timed"] = timed = [time_setup(args, "eager, mask", True, False, None, "eager")]
    print(json.dumps(timed[-1]), flush=True)
    save()
    fused = [t["setup"] for t in traces if _fused(t)][: args.max_compiled]
    # each fused set-up in Inductor's default mode, then the runner's set-up in each further mode asked for
    runs = [(name, "default") for name in fused] + [(RUNNER, m) for m in args.modes if m != "default"]
    for name, mode in runs:
        _, mask, inside, backends = setups[name]
        try:
            timed.append(time_setup(args, name, mask, inside, backends, "compile", mode))
        except Exception as e:
            timed.append(
                {"setup": name, "execution": "compile", "torch_compile_mode": mode, "error": f"{e}"[:300]}
            )
        print(json.dumps(timed[-1]), flush=True)
        save()
    for t in timed:
        print(
            f"{t['setup']:<40} {t['execution']:<8} {t.get('torch_compile_mode') or '':<26} "
            f"{t.get('step_ms', float('nan')):>8} ms  MFU {t.get('mfu')}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
