"""How a run is split over ranks: process group, device mesh, and the parallelism plan.

The plan lives in :func:`parallelize_bert`, applied in a fixed order (TP inside each encoder layer, then
FSDP2 per encoder layer, then FSDP2 on the root). The Hugging Face model code is never edited: the TP plan
is data (module name -> style), as in torchtitan.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from companion.errors import ConfigError
from companion.runs.config import Layout

# Megatron-style sharding of one BertLayer: Q/K/V and FFN-in split by output features (heads / FFN
# columns), attention-out and FFN-out split by input features, so each sub-block needs one all-reduce forward
# (its output) and one backward (its input's gradient): 4 per layer (opmodel.TP_ALL_REDUCES_PER_LAYER).
TP_PLAN_STYLES = {
    "attention.self.query": "colwise",
    "attention.self.key": "colwise",
    "attention.self.value": "colwise",
    "attention.output.dense": "rowwise",
    "intermediate.dense": "colwise",
    "output.dense": "rowwise",
}


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        """One process per node: the one that owns node-wide meters."""
        return self.local_rank == 0


LAUNCHER_ENV = "COMPANION_LAUNCHER"  # set by companion.runs.launch for the ranks it forks
FORKED_LAUNCHER = "torchrun, ranks forked (companion.runs.launch)"


def launcher_name() -> str:
    """How this rank was started: by ``companion.runs.launch`` (torchrun, forked), torchrun, or alone."""
    if os.environ.get(LAUNCHER_ENV):
        return os.environ[LAUNCHER_ENV]
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "python (one process)"


def forked_rank() -> bool:
    """Whether this process is a rank ``companion.runs.launch`` forked (after torchrun's agent set it up)."""
    return os.environ.get(LAUNCHER_ENV) == FORKED_LAUNCHER


def init_distributed(device_type: str, timeout_s: float = 900.0) -> DistEnv:
    """Join the job torchrun started (nccl on CUDA, gloo on CPU); a plain process is a job of one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA device is visible; use device='cpu' or run on a GPU")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device_type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
            **({"device_id": device} if device_type == "cuda" else {}),
        )
    return DistEnv(rank, world_size, local_rank, device)


def check_world_size(layout: Layout, env: DistEnv) -> None:
    if layout.world_size != env.world_size:
        raise ConfigError(
            f"world size {env.world_size} != tp*dp = {layout.tp}*{layout.dp} = {layout.world_size}; "
            f"launch with torchrun --nproc-per-node {layout.world_size} or change tp/dp"
        )


def build_mesh(layout: Layout, device_type: str):
    """A named device mesh ('dp', 'tp') for the layout, or None for a single device."""
    from torch.distributed.device_mesh import init_device_mesh

    if layout.world_size == 1:
        return None
    if layout.mode == "2d":
        return init_device_mesh(device_type, (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
    name = "tp" if layout.mode == "tp" else "dp"
    return init_device_mesh(device_type, (layout.world_size,), mesh_dim_names=(name,))


def dp_coordinates(layout: Layout, mesh) -> tuple[int, int]:
    """(data-parallel rank, data-parallel degree) of this process: which shard of the batch it takes."""
    if mesh is None or layout.dp == 1:
        return 0, 1
    return mesh["dp"].get_local_rank(), layout.dp


def precision_policy(layout: Layout, precision: str) -> dict:
    """How a layout computes at ``precision`` (dtype names): the same arithmetic in every layout.

    bf16: autocast in every layout (bf16 matmuls, fp32 softmax and layer norm); under FSDP2 the
    mixed-precision policy also gathers parameters in bf16 and reduces gradients in fp32.
    """
    bf16 = precision == "bf16"
    sharded = layout.dp > 1
    return {
        "autocast": "bfloat16" if bf16 else None,
        "fsdp_param_dtype": ("bfloat16" if bf16 else "float32") if sharded else None,
        "fsdp_reduce_dtype": "float32" if sharded else None,
    }


def parallelize_bert(model: torch.nn.Module, layout: Layout, mesh, precision: str) -> torch.nn.Module:
    """Apply the layout to a ``BertForSequenceClassification`` in place and return it.

    Order: (1) TP plan on every encoder layer over mesh['tp']; (2) FSDP2 on every encoder layer, then on
    the root, over mesh['dp'], with a bf16 mixed-precision policy when asked. Embeddings, pooler and
    classifier are replicated across TP ranks (they are small) and sharded by FSDP.
    """
    if layout.tp > 1:
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            parallelize_module,
        )

        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        plan = {name: styles[style]() for name, style in TP_PLAN_STYLES.items()}
        # the self-attention's input enters as one replicated DTensor shared by query, key and value, so their
        # three input gradients are summed before the one all-reduce that makes it whole (Megatron's f
        # operator); each colwise projection would otherwise all-reduce its own (3 backward all-reduces for 1)
        plan["attention.self"] = PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),), use_local_output=False
        )
        for layer in model.bert.encoder.layer:
            parallelize_module(layer, mesh["tp"], plan)
            # transformers 4.x reshapes with these attributes; 5.x infers heads from the tensor. Each rank
            # now holds heads/tp heads, so keep them consistent either way.
            attn = layer.attention.self
            for attr in ("num_attention_heads", "all_head_size"):
                if hasattr(attn, attr):
                    setattr(attn, attr, getattr(attn, attr) // layout.tp)
    if layout.dp > 1:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if precision == "bf16"
            else MixedPrecisionPolicy()
        )
        for layer in model.bert.encoder.layer:
            fully_shard(layer, mesh=mesh["dp"], mp_policy=mp)
        fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
    return model


class SplitOptimizer:
    """Several optimizers stepped as one (``step``, ``zero_grad``, ``param_groups``, ``state_dict``)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}


def optimizer_groups(model: torch.nn.Module) -> list[list[torch.nn.Parameter]]:
    """Trainable parameters split by kind: DTensors (sharded by TP/FSDP) and plain tensors, empty kinds dropped.

    The fused AdamW kernel takes one kind per call; TP alone leaves embeddings, pooler and
    classifier plain beside the sharded encoder.
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad]
    kinds = ([p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)])
    return [k for k in kinds if k]


def adamw_kernel(device_type: str) -> dict:
    """AdamW's keyword for its kernel, the same for training and the calibration's benchmarks, on every device:
    the fused kernel (one operator a step for all of a group's parameters). On CPU it steps a 4-layer, h=128 BERT
    in about a quarter of the foreach kernel's time, and under TP and FSDP its first step's sharding propagation
    is one operator's, not a dozen foreach operators' over the whole parameter list (docs/decisions.md).
    ``device_type`` ('cpu' or 'cuda', both of which have it, torch >= 2.4) does not change the choice."""
    return {"fused": True}


def make_optimizer(model: torch.nn.Module, layout: Layout, lr: float):
    """AdamW with its fused kernel (``adamw_kernel``); one instance per parameter kind.

    Under TP alone the parameters mix DTensors and plain tensors, which one fused call rejects: two
    instances (one per kind) keep the multi-tensor kernels instead of a per-parameter loop (~144 small
    updates per step at BERT-base). AdamW updates every parameter independently, so the split changes no
    arithmetic. ``layout`` is kept for the caller's symmetry; the split follows the parameters themselves.
    """
    kernel = adamw_kernel(next(model.parameters()).device.type)
    groups = optimizer_groups(model)
    if len(groups) == 1:
        return torch.optim.AdamW(groups[0], lr=lr, **kernel)
    return SplitOptimizer([torch.optim.AdamW(g, lr=lr, **kernel) for g in groups])


def describe_optimizer(optimizer) -> dict:
    """What the record says about the optimizer: instances, kernel (fused / foreach / for-loop), parameters each."""
    opts = optimizer.optimizers if isinstance(optimizer, SplitOptimizer) else [optimizer]

    def kernel(o):
        d = o.defaults
        return "fused" if d.get("fused") else "foreach" if d.get("foreach") else "for-loop"

    return {
        "kind": type(opts[0]).__name__,
        "instances": len(opts),
        "kernel": sorted({kernel(o) for o in opts}),
        "parameters_per_instance": [sum(len(g["params"]) for g in o.param_groups) for o in opts],
    }


def all_reduce_(tensor: torch.Tensor, op=None) -> torch.Tensor:
    """In-place all-reduce when running distributed; identity otherwise."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM)
    return tensor


def all_gather_object(obj):
    """List of ``obj`` from every rank (a one-element list when not distributed)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


def broadcast_object(obj, src: int = 0):
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]
    return obj


def shutdown() -> None:
    """Tear the process group down. Results must already be on disk: teardown can abort rarely."""
    if dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
