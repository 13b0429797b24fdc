"""The parallelism plan's communication, counted on a simulated process group (one process, no gloo ranks),
against the collectives the operator model charges for."""

import pytest
import torch

LAYERS = 3
# CommDebugMode tracks modules with backward hooks, which warn on Hugging Face's output classes. On the fake
# process group FSDP2 also warns that a wrapped module returned a view tensor; the same model sharded over two
# gloo ranks does not (the sweep's parallel runs), and test_sweep checks their loss curves against one process
pytestmark = [pytest.mark.filterwarnings("ignore:For backward hooks to be called"),
              pytest.mark.filterwarnings("ignore:Full backward hook is firing"),
              pytest.mark.filterwarnings("ignore:FSDP2-wrapped module .* returned a view tensor")]


def _counts(layout) -> list[dict[str, int]]:
    """Collectives of one training step's forward and backward under ``layout`` (2 simulated ranks)."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import BertConfig, BertForSequenceClassification

    from companion.runs import parallel

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=layout.world_size)
    try:
        cfg = BertConfig(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=256,
                         vocab_size=512, max_position_embeddings=64, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)
        model = parallel.parallelize_bert(BertForSequenceClassification(cfg), layout,
                                          parallel.build_mesh(layout, "cpu"), "fp32")
        ids, labels = torch.randint(0, 512, (4, 32)), torch.randint(0, 2, (4,))
        out = []
        for _ in range(2):  # the second step as the first: nothing stays gathered between steps
            with CommDebugMode() as forward:
                loss = model(input_ids=ids, labels=labels).loss
            with CommDebugMode() as backward:
                loss.backward()
            out.append([{str(op).rsplit(".", 1)[-1]: n for op, n in m.get_comm_counts().items()}
                        for m in (forward, backward)])
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
    assert sum(forward.values()) + sum(backward.values()) == FSDP_COLLECTIVES_PER_LAYER * LAYERS + FSDP_COLLECTIVES_ROOT
