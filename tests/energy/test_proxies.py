"""Proxies against independent counts: FlopCounterMode for FLOPs, numel() for parameters."""

import itertools

import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from companion.energy import opmodel
from companion.runs.config import ModelConfig
from companion.runs.model import build_model, parameter_count as counted_parameters
from companion.energy.proxies import (
    StepShape,
    arithmetic_intensity,
    bytes_per_step,
    comm_bytes_per_rank,
    encoder_layer_parameters,
    flops_per_rank,
    flops_per_step,
    parameter_count,
    roofline_time_s,
)


def _shape(layers, hidden, heads, ffn, seq, batch, **kw):
    return StepShape(
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn=ffn,
        vocab=500,
        max_positions=256,
        num_labels=2,
        sequences=batch,
        padded_tokens=batch * seq,
        attention_pairs=batch * seq * seq,
        **kw,
    )


GRID = list(itertools.product([1, 3], [32, 96], [64, 128], [2, 4]))  # layers, hidden, seq, batch


@pytest.mark.parametrize("layers, hidden, seq, batch", GRID)
def test_step_flops_match_flop_counter(layers, hidden, seq, batch):
    heads = hidden // 16
    model = build_model(
        ModelConfig(
            layers=layers, hidden=hidden, heads=heads, vocab=500, max_positions=256, dropout=0.0, attn="eager"
        )
    )
    ids = torch.randint(3, 500, (batch, seq))
    labels = torch.randint(0, 2, (batch,))
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss.backward()
    shape = _shape(layers, hidden, heads, 4 * hidden, seq, batch)
    assert flops_per_step(shape) == pytest.approx(counter.get_total_flops(), rel=0.01)
    assert parameter_count(shape) == counted_parameters(model)
    # the operator model's own count of the same step (the FLOPs its GEMM, attention and energy terms charge)
    row = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "ffn": 4 * hidden,
        "vocab": 500,
        "max_positions": 256,
        "num_labels": 2,
        "batch_size": batch,
        "padded_tokens": batch * seq,
        "attention_pairs": batch * seq * seq,
        "tp": 1,
        "dp": 1,
        "world_size": 1,
        "precision": "fp32",
        "attention_kernel": "math",
        "metered_units": 1.0,
    }
    dev = opmodel.DeviceRoofs(
        "test", gemm_peak_flops_per_s=1e11, gemm_half_dim=32, bandwidth_bytes_per_s=1e10, launch_s=5e-6
    )
    op_flops = opmodel.operator_frame(pd.DataFrame([row]), dev).op_flops.iloc[0]
    assert op_flops == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_per_rank_flops_split_the_work():
    s = _shape(12, 768, 12, 3072, 512, 32)
    assert flops_per_rank(s) == flops_per_step(s)
    for tp, dp in [(2, 1), (1, 4), (2, 4)]:
        sharded = _shape(12, 768, 12, 3072, 512, 32, tp=tp, dp=dp)
        # the encoder splits t*d ways; only the tiny replicated head keeps per-rank work above 1/(t*d)
        assert flops_per_rank(sharded) * tp * dp == pytest.approx(flops_per_step(s), rel=1e-3)
        assert flops_per_rank(sharded) * tp * dp >= flops_per_step(s)


def test_bert_base_numbers_against_known_counts():
    s = _shape(12, 768, 12, 3072, 128, 32)
    s = StepShape(**{**s.__dict__, "vocab": 30522, "max_positions": 512})
    assert parameter_count(s) == 109_483_778  # bert-base-uncased with a 2-class head
    n_encoder = 12 * 12 * 768**2
    # 6*N*T rule of thumb for the encoder matmuls, plus the attention term 12*L*T*s*h
    approx = 6 * n_encoder * 32 * 128 + 12 * 12 * 32 * 128**2 * 768
    assert flops_per_step(s) == pytest.approx(approx, rel=0.01)


def test_memory_and_communication_models():
    s = _shape(2, 128, 4, 512, 128, 8)
    p = parameter_count(s)
    assert bytes_per_step(s) > 36 * p  # at least weights, gradients and AdamW state
    eager = StepShape(**{**s.__dict__, "fused_attention": False})
    assert bytes_per_step(eager) > bytes_per_step(s)  # materialised attention scores cost traffic
    assert comm_bytes_per_rank(s) == {"fsdp": 0.0, "tp": 0.0}
    fsdp = StepShape(**{**s.__dict__, "dp": 4})
    enc = 2 * encoder_layer_parameters(
        128, 512
    )  # gathered twice and reduce-scattered; the root gathered once
    assert comm_bytes_per_rank(fsdp)["fsdp"] == pytest.approx((12 * enc + 8 * (p - enc)) * 3 / 4)
    tp = StepShape(**{**s.__dict__, "tp": 2})
    assert comm_bytes_per_rank(tp)["tp"] == pytest.approx(4 * 2 * 1 * 8 * 128 * 128 * 4)


def test_roofline():
    assert arithmetic_intensity(1e12, 1e10) == 100
    assert roofline_time_s(1e12, 1e9, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e9) == 1.0
    assert roofline_time_s(1e12, 1e10, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e9) == 10.0


def test_mfu():
    from companion.energy.proxies import mfu

    assert mfu(989e12 * 0.5, 1.0, 989e12) == pytest.approx(0.5)


def test_the_books_proxy_check_counts_independently():
    from companion.energy.opcount import proxy_check

    row = proxy_check([[1, 32, 2, 16, 2]]).iloc[0]
    assert row.flops_counted == pytest.approx(
        row.flops_analytic, rel=0.01
    )  # FlopCounterMode, eager attention
    assert row.parameters_counted == row.parameters_analytic  # numel() of the built model
    assert row.op_level_bytes > row.analytic_bytes  # an op-level count with no fusion or reuse is larger
