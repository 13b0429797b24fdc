"""The TP plan's communication, counted on a simulated process group (one process, no gloo ranks)."""

import pytest
import torch


def test_the_tp_plan_all_reduces_as_often_as_the_operator_model_counts():
    """Megatron's 2 all-reduces forward and 2 backward per layer: the query, key and value projections share
    one input gradient all-reduce (3 when each colwise projection converted its own input)."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import BertConfig, BertForSequenceClassification

    from companion.energy.opmodel import TP_ALL_REDUCES_PER_LAYER
    from companion.runs import parallel
    from companion.runs.config import Layout

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        layout, layers = Layout(tp=2, dp=1), 3
        cfg = BertConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=256,
                         vocab_size=512, max_position_embeddings=64, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)
        model = parallel.parallelize_bert(BertForSequenceClassification(cfg), layout,
                                          parallel.build_mesh(layout, "cpu"), "fp32")
        ids, labels = torch.randint(0, 512, (4, 32)), torch.randint(0, 2, (4,))
        with CommDebugMode() as forward:
            loss = model(input_ids=ids, labels=labels).loss
        with CommDebugMode() as backward:
            loss.backward()
        counts = [{str(op): n for op, n in mode.get_comm_counts().items()} for mode in (forward, backward)]
        assert counts == [{"c10d_functional.all_reduce": 2 * layers}] * 2
        assert forward.get_total_counts() + backward.get_total_counts() == TP_ALL_REDUCES_PER_LAYER * layers
    finally:
        dist.destroy_process_group()
