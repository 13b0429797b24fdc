"""An op-level count of memory traffic, to check the analytic byte model against.

A TorchDispatchMode adds up the bytes of every tensor each ATen op reads and writes (views skipped: they
move nothing). It assumes no fusion and no cache reuse, so it is an upper bound on real DRAM traffic, where
``companion.energy.proxies.bytes_per_step`` is a lower-level model; their ratio is printed, not forced equal.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class ByteCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in tree_flatten((args, kwargs, out))[0]:
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
        return out


def count_step_bytes(model: torch.nn.Module, batch: dict, optimizer: torch.optim.Optimizer) -> int:
    """Bytes read and written by all ops of one training step (forward, backward, optimizer)."""
    counter = ByteCounter()
    with counter:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return counter.bytes


def count_step_flops(model: torch.nn.Module, batch: dict) -> int:
    """FLOPs of one forward and backward pass as torch's FlopCounterMode counts them (matrix multiplies)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def proxy_check(configs: list[list[int]], seed: int = 0):
    """The proxies against independent counts, for (layers, hidden, heads, seq_len, batch) configs: analytic
    FLOPs per step against FlopCounterMode (eager attention, so the score matmuls are counted), the analytic
    parameter count against the model's numel(), and analytic bytes per step against the op-level count."""
    from dataclasses import replace

    import pandas as pd

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model, parameter_count as counted_parameters
    from companion.energy.proxies import StepShape, bytes_per_step, flops_per_step, parameter_count

    rows = []
    for layers, hidden, heads, seq, batch in configs:
        cfg = ModelConfig(layers=layers, hidden=hidden, heads=heads, vocab=2048, max_positions=512)
        torch.manual_seed(seed)
        model = build_model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(3, cfg.vocab, (batch, seq))
        batch_t = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "labels": torch.zeros(batch, dtype=torch.long),
        }
        shape = StepShape(
            layers,
            hidden,
            heads,
            4 * hidden,
            cfg.vocab,
            cfg.max_positions,
            2,
            batch,
            batch * seq,
            batch * seq * seq,
        )
        torch.manual_seed(seed)
        eager = build_model(
            replace(cfg, dropout=0.0, attn="eager")
        )  # the score matmuls as matmuls, no dropout
        flops = count_step_flops(eager, batch_t)
        count_step_bytes(model, batch_t, opt)  # first step allocates the AdamW state: not a steady step
        counted = count_step_bytes(model, batch_t, opt)
        analytic = bytes_per_step(shape)
        rows.append(
            {
                "config": f"L{layers}-h{hidden}-a{heads}-s{seq}-b{batch}",
                "flops_analytic": flops_per_step(shape),
                "flops_counted": flops,
                "parameters_analytic": parameter_count(shape),
                "parameters_counted": counted_parameters(model),
                "analytic_bytes": analytic,
                "op_level_bytes": counted,
                "ratio": counted / analytic,
            }
        )
    return pd.DataFrame(rows)
