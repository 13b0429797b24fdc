"""What is trained: a BERT sequence classifier, randomly initialised from a shape or loaded locally."""

from __future__ import annotations

import os

from companion.runs.config import ModelConfig


def build_model(cfg: ModelConfig):
    """``BertForSequenceClassification`` on the CPU, in fp32; the caller moves and parallelises it.

    Seed the RNG before calling: every rank must build identical weights before they are sharded.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.utils import logging as hf_logging

    if cfg.attn == "sdpa-nocompile":
        _register_uncompiled_sdpa()
    hf_logging.set_verbosity_error()  # "newly initialised classifier" is expected for fine-tuning
    hf_logging.disable_progress_bar()  # one bar per checkpoint load would flood sweep logs
    common = dict(
        num_labels=cfg.num_labels,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        attn_implementation=cfg.attn,
    )
    if cfg.checkpoint:
        return BertForSequenceClassification.from_pretrained(str(cfg.checkpoint), **common)
    config = BertConfig(
        vocab_size=cfg.vocab,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.ffn_size,
        max_position_embeddings=cfg.max_positions,
        **{k: v for k, v in common.items() if k != "attn_implementation"},
    )
    return BertForSequenceClassification._from_config(config, attn_implementation=cfg.attn)


def _register_uncompiled_sdpa() -> None:
    """Make ``attn_implementation="sdpa-nocompile"`` known to transformers: its SDPA attention, run outside
    torch.compile's graphs (a graph break around each layer's attention), so a compiled step runs the fused kernel
    eager runs and compiles everything else. It was the way around the math path a graph traced without the
    attention mask runs (``train.step_inputs`` now feeds compiled steps the mask); its breaks cost host time."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("sdpa-nocompile", torch.compiler.disable(sdpa_attention_forward))
    # and SDPA's padding mask: a name without a mask function gets none, and padded batches would attend to pads
    AttentionMaskInterface.register("sdpa-nocompile", sdpa_mask)


def parameter_count(model) -> int:
    """Total parameters (global, even when sharded: DTensor.numel() is the global size)."""
    return sum(p.numel() for p in model.parameters())
