"""An op-level count of memory traffic, to check the analytic byte model against.

A TorchDispatchMode adds up the bytes of every tensor each ATen op reads and writes (views skipped: they
move nothing). It assumes no fusion and no cache reuse, so it is an upper bound on real DRAM traffic, where
``companion.proxies.bytes_per_step`` is a lower-level model; their ratio is printed, not forced equal.
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
