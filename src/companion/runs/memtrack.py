"""The device memory one training step allocates on one rank, tracked by torch's own memory trackers.

One process plays rank 0 of a simulated process group (torch's ``fake`` backend: collectives return at once and
move nothing), so any TP x FSDP layout is tracked on one CPU, as the step would allocate it on each of its
ranks. Tensors are counted by torch's ``MemTracker`` (``FSDPMemTracker`` under FSDP), which follows every
tensor storage it sees allocated and freed: parameters, gradients, optimizer states, activations, temporaries
and FSDP's gathered buffers. It is what ``companion.energy.memory`` is checked against
(tests/energy/test_memory.py, benchmarks/memory_estimate.py); a real run records its own peak
(``peak_memory_bytes``: ``torch.cuda.max_memory_allocated`` on a GPU, the process's max RSS on a CPU). On a GPU,
``cuda_step_bytes`` measures one device's step with the CUDA allocator's counters.
"""

from __future__ import annotations

import contextlib

from companion.runs.config import Layout, ModelConfig


def _step(net, optimizer, model: ModelConfig, rows: int, seq_len: int, precision: str, padded: bool, device):
    """``(forward, rest)`` of one training step on ``rows`` random sequences on ``device`` (``padded``: all but the
    first half as long, with an attention mask): ``forward() -> loss`` (under bf16 autocast if asked), ``rest(loss)``
    (backward, optimizer step, gradients freed)."""
    import torch

    ids = torch.randint(0, model.vocab, (rows, seq_len), device=device)
    labels = torch.randint(0, model.num_labels, (rows,), device=device)
    extra = {}
    if padded:
        mask = torch.ones(rows, seq_len, dtype=torch.long, device=device)
        mask[1:, seq_len // 2 :] = 0
        extra["attention_mask"] = mask

    def forward():
        ctx = (
            torch.autocast(device.type, dtype=torch.bfloat16)
            if precision == "bf16"
            else contextlib.nullcontext()
        )
        with ctx:
            return net(input_ids=ids, labels=labels, **extra).loss

    def rest(loss):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, rest


def cuda_step_bytes(
    model: ModelConfig, batch_size: int, seq_len: int, precision: str = "bf16", padded: bool = False
) -> dict:
    """On one CUDA GPU, the bytes a steady training step of ``model`` allocates, as the caching allocator counts
    them (``torch.cuda.max_memory_allocated``, what a GPU run records as ``peak_memory_bytes``, less what the
    process held before): ``peak``, ``forward_end`` and ``before``, as ``tracked_step_bytes`` gives them on CPU.
    The optimizer is the runs' own (``parallel.make_optimizer``: fused AdamW on CUDA)."""
    import gc

    import torch

    from companion.runs import parallel
    from companion.runs.model import build_model

    if not torch.cuda.is_available():
        raise RuntimeError("cuda_step_bytes needs a CUDA GPU; on CPU use tracked_step_bytes")
    device = torch.device("cuda", torch.cuda.current_device())
    gc.collect()  # what earlier calls left (a reference cycle holding a model) is freed, and the rest subtracted
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    net = build_model(model).to(device)
    net.train()
    optimizer = parallel.make_optimizer(net, Layout(1, 1), 1e-4)
    forward, rest = _step(net, optimizer, model, batch_size, seq_len, precision, padded, device)
    rest(forward())  # AdamW makes its states in the first step
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    loss = forward()
    forward_end = torch.cuda.memory_allocated(device)
    rest(loss)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return {
        "peak": int(peak - base),
        "forward_end": int(forward_end - base),
        "before": int(before - base),
        "peak_parts": {},
    }


def tracked_step_bytes(
    model: ModelConfig,
    layout: Layout,
    batch_size: int,
    seq_len: int,
    precision: str = "fp32",
    padded: bool = False,
) -> dict:
    """Bytes rank 0 holds in a steady training step (the optimizer's states already made by a first step) of
    ``model`` under ``layout``, on sequences of ``seq_len`` tokens (``batch_size`` in all, split over the FSDP
    ranks; ``padded``: all but the first of each rank's sequences half as long, with an attention mask):
    ``peak`` (the step's highest), ``forward_end`` (just after the forward pass) and ``before`` (between steps),
    with the tracker's categories at the peak under ``peak_parts``."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from companion.runs import parallel
    from companion.runs.model import build_model

    if dist.is_initialized():
        raise RuntimeError(
            "a process group is already initialised in this process; track memory in a fresh one"
        )
    if batch_size % layout.dp:
        raise ValueError(f"batch_size={batch_size} does not split over dp={layout.dp} ranks")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=layout.world_size)
    try:
        torch.manual_seed(0)
        net = parallel.parallelize_bert(
            build_model(model), layout, parallel.build_mesh(layout, "cpu"), precision
        )
        net.train()
        optimizer = parallel.make_optimizer(net, layout, 1e-4)
        optimizers = getattr(optimizer, "optimizers", [optimizer])  # a SplitOptimizer's parts (TP alone)
        forward, rest = _step(
            net, optimizer, model, batch_size // layout.dp, seq_len, precision, padded, torch.device("cpu")
        )
        rest(forward())  # AdamW makes its states in the first step
        cpu = torch.device("cpu")
        if layout.dp > 1:
            from torch.distributed._tools import FSDPMemTracker

            tracker = FSDPMemTracker(net, optimizers[0])
        else:
            from torch.distributed._tools import MemTracker

            tracker = MemTracker()
            tracker.track_external(net, *optimizers)
        with tracker:
            before = tracker.get_tracker_snapshot()[cpu]["Total"]
            loss = forward()
            forward_end = tracker.get_tracker_snapshot()[cpu]["Total"]
            rest(loss)
        peak = tracker.get_tracker_snapshot("peak")[cpu]
    finally:
        dist.destroy_process_group()
    return {
        "peak": int(peak["Total"]),
        "forward_end": int(forward_end),
        "before": int(before),
        "peak_parts": {
            str(k).rsplit(".", 1)[-1].lower(): int(v) for k, v in peak.items() if k != "Total" and v
        },
    }
