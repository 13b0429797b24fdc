"""The parallelism plan's communication, counted on a simulated process group (one process, no gloo ranks),
against the collectives the operator model charges for: how many, and how many bytes go on the wire."""

import pytest
import torch

LAYERS = 3
# CommDebugMode tracks modules with backward hooks, which warn on Hugging Face's output classes. On the fake
# process group FSDP2 also warns that a wrapped module returned a view tensor; the same model sharded over two
# gloo ranks does not (the sweep's parallel runs), and test_sweep checks their loss curves against one process
pytestmark = [
    pytest.mark.filterwarnings("ignore:For backward hooks to be called"),
    pytest.mark.filterwarnings("ignore:Full backward hook is firing"),
    pytest.mark.filterwarnings("ignore:FSDP2-wrapped module .* returned a view tensor"),
]


def _sizing_mode():
    """CommDebugMode that also logs, per collective, the bytes of each tensor it was handed."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops

    class Sizing(CommDebugMode):
        def __init__(self):
            super().__init__()
            self.sizes: list[tuple[str, list[int]]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = getattr(func, "_overloadpacket", None)
            if packet is not None and (packet in self.comm_registry or packet in c10d_collective_ops):
                flat = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else [arg])]
                self.sizes.append(
                    (
                        str(packet).rsplit(".", 1)[-1],
                        [t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor)],
                    )
                )
            return super().__torch_dispatch__(func, types, args, kwargs)

    return Sizing


def _ring_wire_bytes(sizes: list[tuple[str, list[int]]], tp: int) -> float:
    """Bytes one rank puts on the wire for the logged collectives, by the ring algorithm: an all-reduce of B
    bytes over t ranks 2 (t-1)/t B; an all-gather or reduce-scatter whose full buffer is B over g ranks
    (g-1)/g B (g read from the full buffer over the shard)."""
    total = 0.0
    for name, nbytes in sizes:
        if name == "all_reduce":
            total += 2 * (tp - 1) / tp * nbytes[0]
        else:
            full, shard = max(nbytes), min(nbytes)
            g = round(full / shard)
            total += (g - 1) / g * full
    return total


def _counts(layout, sizes: list | None = None) -> list[dict[str, int]]:
    """Collectives of one training step's forward and backward under ``layout`` (simulated ranks); with
    ``sizes``, the bytes of each collective's tensors are appended to it (one step)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import BertConfig, BertForSequenceClassification

    from companion.runs import parallel

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=layout.world_size)
    try:
        cfg = BertConfig(
            hidden_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=4,
            intermediate_size=256,
            vocab_size=512,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = parallel.parallelize_bert(
            BertForSequenceClassification(cfg), layout, parallel.build_mesh(layout, "cpu"), "fp32"
        )
        ids, labels = torch.randint(0, 512, (4, 32)), torch.randint(0, 2, (4,))
        out, mode = [], _sizing_mode()
        for step in range(2):  # the second step as the first: nothing stays gathered between steps
            with mode() as forward:
                loss = model(input_ids=ids, labels=labels).loss
            with mode() as backward:
                loss.backward()
            out.append(
                [
                    {str(op).rsplit(".", 1)[-1]: n for op, n in m.get_comm_counts().items()}
                    for m in (forward, backward)
                ]
            )
            if step == 0 and sizes is not None:
                sizes.extend(forward.sizes + backward.sizes)
        assert out[0] == out[1]
        return out[0]
    finally:
        dist.destroy_process_group()


def test_the_tp_plan_all_reduces_as_often_as_the_operator_model_counts():
    """Megatron's 2 all-reduces forward and 2 backward per layer: the query, key and value projections share
    one input gradient all-reduce (3 when each colwise projection converted its own input)."""
    from companion.energy.opmodel import TP_ALL_REDUCES_PER_LAYER
    from companion.runs.config import Layout

    forward, backward = _counts(Layout(tp=2, dp=1))
    assert forward == backward == {"all_reduce": 2 * LAYERS}
    assert forward["all_reduce"] + backward["all_reduce"] == TP_ALL_REDUCES_PER_LAYER * LAYERS


def test_fsdp_gathers_and_scatters_as_often_as_the_operator_model_counts():
    """Per layer an all-gather forward, another backward and a reduce-scatter; the root unit is gathered once."""
    from companion.energy.opmodel import FSDP_COLLECTIVES_PER_LAYER, FSDP_COLLECTIVES_ROOT
    from companion.runs.config import Layout

    forward, backward = _counts(Layout(tp=1, dp=2))
    assert forward == {"_allgather_base_": LAYERS + 1}
    assert backward == {"_allgather_base_": LAYERS, "_reduce_scatter_base_": LAYERS + 1}
    assert (
        sum(forward.values()) + sum(backward.values())
        == FSDP_COLLECTIVES_PER_LAYER * LAYERS + FSDP_COLLECTIVES_ROOT
    )


@pytest.mark.parametrize("tp, dp", [(2, 1), (4, 1), (1, 2), (1, 4), (2, 2)])
def test_the_operator_model_puts_as_many_bytes_on_the_wire_as_the_plan_does(tp, dp):
    """The operator model's collective bytes (its ``op_comm_bytes``: every rank's wire bytes) against the
    tensors the plan hands its collectives. Within 1 %: FSDP pads each flat buffer to a multiple of the
    degree, and under 2-D a layer's layer norms and row-parallel biases are replicated over the TP ranks
    (not divided by t, as the model takes every parameter of a layer to be)."""
    import pandas as pd

    from companion.energy import opmodel
    from companion.energy.proxies import StepShape, comm_bytes_per_rank
    from companion.runs.config import Layout

    sizes = []
    _counts(Layout(tp=tp, dp=dp), sizes)
    # every rank of the simulated group is fed the same 4 x 32 batch: 128 tokens per data-parallel rank
    row = {
        "layers": LAYERS,
        "hidden": 64,
        "heads": 4,
        "ffn": 256,
        "vocab": 512,
        "max_positions": 64,
        "num_labels": 2,
        "batch_size": 4 * dp,
        "padded_tokens": 128 * dp,
        "attention_pairs": 4 * dp * 32 * 32,
        "tp": tp,
        "dp": dp,
        "world_size": tp * dp,
        "precision": "fp32",
        "attention_kernel": "math",
        "metered_units": 1.0,
        "threads_per_rank": 1,
    }
    dev = opmodel.DeviceRoofs(
        "test",
        gemm_peak_flops_per_s=1e11,
        gemm_half_dim=32,
        bandwidth_bytes_per_s=1e10,
        launch_s=5e-6,
        collective_alpha_s=1e-4,
        collective_beta_bytes_per_s=1e9,
    )
    per_rank = opmodel.operator_frame(pd.DataFrame([row]), dev).op_comm_bytes.iloc[0] / (tp * dp)
    assert per_rank == pytest.approx(_ring_wire_bytes(sizes, tp), rel=0.01)
    # the paper's law reads the same count in its memory-traffic proxy
    shape = StepShape(LAYERS, 64, 4, 256, 512, 64, 2, 4 * dp, 128 * dp, 4 * dp * 32 * 32, tp, dp, "fp32")
    assert sum(comm_bytes_per_rank(shape).values()) == pytest.approx(per_rank, rel=1e-9)
