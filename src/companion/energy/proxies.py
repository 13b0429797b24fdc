"""Lightweight proxies for the cost of one training step: compute (FLOPs), memory traffic (bytes),
communication (bytes), and where the step sits on its device's roofline.

Pure functions of the configuration and the step's token counts, each formula in one place. Symbols:
L layers, h hidden, f FFN width, a heads, C labels, T padded tokens per step (sum over sequences of the
padded length), S2 attention pairs per step (sum over sequences of padded length squared), B sequences.

FLOPs (matrix multiplies, 2 per multiply-add; backward = 2 x forward), tested against
``torch.utils.flop_counter.FlopCounterMode`` with eager attention:

    forward  = L * [T * (8 h^2 + 4 h f) + 4 h S2] + B * (2 h^2 + 2 h C)
    step     = 3 * forward

Memory traffic (the analytic model we chose; an op-level count is larger, it assumes no fusion), in bytes:

    weights      2 * P * w          read in forward and backward (w = 2 for bf16 compute, 4 for fp32)
    gradients    4 * P * (d + 1)    fp32, written in backward on each of d ranks, read once by the optimizer
    optimizer   24 * P              AdamW reads and writes fp32 param, exp_avg, exp_avg_sq
    activations  L * (34 h T + 5 a S2 [eager attention only]) * act / 2 * 2
                 stored in forward and read in backward (Korthikanti et al. 2022; act = 2 or 4 bytes);
                 fused attention (SDPA) does not store the a*s^2 scores

Communication bytes sent per rank (ring collectives), kept apart from memory traffic:

    FSDP (degree d)  (2 w + 4) * P * (d-1)/d      all-gather forward and backward, reduce-scatter grads
    TP (degree t)    4 L * 2 (t-1)/t * (T/d) h act  two all-reduces forward, two backward, per layer
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepShape:
    """What the proxies need to know about a step."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    num_labels: int
    sequences: int  # B: sequences per step (global)
    padded_tokens: float  # T: padded tokens per step (global)
    attention_pairs: float  # S2: sum of padded length^2 over sequences (global)
    tp: int = 1
    dp: int = 1
    precision: str = "fp32"
    fused_attention: bool = True  # SDPA does not materialise the attention scores
    dropout: bool = True  # dropout active (p > 0): its masks are kept for backward (energy.memory)
    eager_attention: bool = False  # BERT's eager attention (not SDPA): its dtypes differ (energy.memory)
    padding_mask: bool = (
        False  # some sequences shorter than the batch's longest: an attention mask (energy.memory)
    )

    @property
    def world_size(self) -> int:
        return self.tp * self.dp


def parameter_count(s: StepShape) -> int:
    """Parameters of BertForSequenceClassification (embeddings, encoder, pooler, classifier)."""
    h, f = s.hidden, s.ffn
    embeddings = (s.vocab + s.max_positions + 2) * h + 2 * h
    return (
        embeddings
        + s.layers * encoder_layer_parameters(h, f)
        + (h * h + h)
        + (h * s.num_labels + s.num_labels)
    )


def encoder_layer_parameters(hidden: int, ffn: int) -> int:
    h, f = hidden, ffn
    return 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h


# ------------------------------------------------------------------------------------------------ FLOPs
def encoder_forward_flops(s: StepShape) -> float:
    h = s.hidden
    return s.layers * (s.padded_tokens * (8 * h * h + 4 * h * s.ffn) + 4 * h * s.attention_pairs)


def head_forward_flops(s: StepShape) -> float:
    """Pooler (on the [CLS] token) and classifier."""
    h = s.hidden
    return s.sequences * (2 * h * h + 2 * h * s.num_labels)


def flops_per_step(s: StepShape) -> float:
    """Useful FLOPs of one training step (forward + backward), as on a single device."""
    return 3.0 * (encoder_forward_flops(s) + head_forward_flops(s))


def flops_per_rank(s: StepShape) -> float:
    """FLOPs each rank executes: the encoder split t*d ways; the small head is replicated across TP ranks."""
    return 3.0 * (encoder_forward_flops(s) / (s.tp * s.dp) + head_forward_flops(s) / s.dp)


# ------------------------------------------------------------------------------------------------ bytes
def _w_bytes(s: StepShape) -> int:
    return 2 if s.precision == "bf16" else 4


def activation_bytes_per_step(s: StepShape, tp: int = 1) -> float:
    """Activations written in forward and read in backward, all ranks together.

    Under TP (without sequence parallelism) part of each layer's activations is replicated on every TP
    rank: per layer s*b*h*(10 + 24/t + 5as/(ht)) bytes at 16-bit on each of t ranks (Korthikanti et al.).
    """
    act = _w_bytes(s)
    scores = 0.0 if s.fused_attention else 5 * s.heads * s.attention_pairs
    per_rank_linear = s.padded_tokens * s.hidden * (10 + 24 / tp)
    stored_16bit = s.layers * (tp * per_rank_linear + scores)  # summed over the t replicas
    return 2.0 * stored_16bit * act / 2


def state_bytes_per_step(s: StepShape) -> dict:
    """Weights, gradients and optimizer traffic, all ranks together (FSDP gathers full weights per rank)."""
    p = parameter_count(s)
    enc = s.layers * encoder_layer_parameters(s.hidden, s.ffn)
    replicated = p - enc  # embeddings, pooler, classifier: replicated across TP ranks
    per_tp_group = enc + s.tp * replicated  # parameter copies within one TP group
    return {
        "weights": 2.0 * per_tp_group * _w_bytes(s) * s.dp,  # every data-parallel rank reads full weights
        # each rank writes its full (unsharded) gradient in backward; the optimizer reads its shard
        "gradients": 4.0 * per_tp_group * (s.dp + 1),
        "optimizer": 24.0 * per_tp_group,
    }


def bytes_per_step(s: StepShape) -> float:
    """Memory traffic of one step, all ranks together (the analytic model in the module docstring)."""
    return sum(state_bytes_per_step(s).values()) + activation_bytes_per_step(s, tp=s.tp)


def bytes_per_rank(s: StepShape) -> float:
    return bytes_per_step(s) / s.world_size


def comm_bytes_per_rank(s: StepShape) -> dict:
    """Bytes each rank sends per step in collectives (ring algorithms), by kind. FSDP gathers each encoder
    layer twice (forward, and backward after resharding) and reduce-scatters its fp32 gradients; the root unit
    (embeddings, pooler, head: replicated over TP ranks) stays gathered from forward to backward, so it is
    gathered once. Checked against the tensors the plan hands its collectives (tests/runs/test_parallel_plan)."""
    p = parameter_count(s)
    enc = s.layers * encoder_layer_parameters(s.hidden, s.ffn)
    w = _w_bytes(s)
    fsdp = ((2 * w + 4) * enc / s.tp + (w + 4) * (p - enc)) * (s.dp - 1) / s.dp if s.dp > 1 else 0.0
    tp = 4 * s.layers * 2 * (s.tp - 1) / s.tp * (s.padded_tokens / s.dp) * s.hidden * w if s.tp > 1 else 0.0
    return {"fsdp": fsdp, "tp": tp}


# ---------------------------------------------------------------------------------------------- roofline
def arithmetic_intensity(flops: float, bytes_: float) -> float:
    """FLOPs per byte of memory traffic."""
    return flops / bytes_


def roofline_time_s(
    flops: float, bytes_: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """Lower bound on a step's time on one device: max(compute time, memory time)."""
    return max(flops / peak_flops_per_s, bytes_ / bandwidth_bytes_per_s)


def attainable_flops_per_s(intensity: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    return min(peak_flops_per_s, intensity * bandwidth_bytes_per_s)


def mfu(flops_per_rank_: float, step_s: float, peak_flops_per_s: float) -> float:
    """Model FLOP utilisation: useful FLOP/s each rank achieves over its device's dense peak."""
    return flops_per_rank_ / step_s / peak_flops_per_s


def step_proxies(s: StepShape) -> dict:
    """Every proxy of one step, as a flat dict (units in the keys)."""
    f, q = flops_per_step(s), bytes_per_step(s)
    comm = comm_bytes_per_rank(s)
    return {
        "parameters": parameter_count(s),
        "flops_per_step": f,
        "flops_per_rank": flops_per_rank(s),
        "bytes_per_step": q,
        "bytes_per_rank": bytes_per_rank(s),
        "comm_bytes_per_rank": comm["fsdp"] + comm["tp"],
        "comm_bytes_fsdp_per_rank": comm["fsdp"],
        "comm_bytes_tp_per_rank": comm["tp"],
        "intensity_flops_per_byte": arithmetic_intensity(f, q),
    }
