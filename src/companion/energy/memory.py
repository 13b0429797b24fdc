"""Device memory one training step needs per rank: an *estimate* of what torch allocates, never a measurement.

Whether a planned layout fits its devices is part of whether it is valid (``companion plan`` leaves out those
that do not, ``companion predict`` warns, ``companion run`` and ``sweep`` refuse them up front). The peak is the
largest of five moments:

    forward end     weights + optimizer states + saved activations + FSDP-gathered units + backward's first buffers
    root gather     (FSDP) weights + optimizer states + the root unit twice (its all-gather buffer and its
                    unsharded parameters) + two encoder layers: the peak where the embeddings dominate
    FSDP backward   (FSDP) weights + optimizer states + the reduced layers' sharded gradients + the root, two
                    layers gathered and one layer's full fp32 gradient (its reduce-scatter's input)
    root backward   (FSDP) weights + optimizer states + every layer's sharded gradient + the root's full
                    gradient (and its fp32 copy under bf16): the peak of a vocabulary-heavy bf16 model
    optimizer step  weights + gradients + optimizer states (the fused AdamW kernel keeps no temporaries)

Per rank, with P_r = (encoder parameters / t + the rest) / d parameters held (TP splits the encoder layers,
FSDP shards everything): weights 4 P_r (fp32 master weights: bf16 runs under autocast), gradients 4 P_r, AdamW's
two moments 8 P_r.

Saved activations, per layer and per token on a rank (T/d tokens, t-way TP, h hidden, f FFN width, a heads, S2
attention pairs), are the tensors autograd keeps for backward:

    replicated over TP   the projections' input (autocast casts a bf16 copy per projection: 3 x 2 B), the FFN's
                         input, two layer-norm inputs, two hidden dropout masks
    split over TP        q, k, v, the attention output, the FFN's GELU input and output (2 f / h of a token)
    math attention       softmax output, dropped probabilities and their mask: a x S2 x 3 elements (the output
                         alone without dropout; an eager fp32 softmax under bf16, fp32 and a bf16 copy)
    fused attention      its output and a log-sum-exp per head and token, and a padded batch's mask (S2)
    autocast             the bf16 copy of every weight (cached by autocast; FSDP frees its gathered copies)

Dtypes follow the kernels: fp32 everywhere at fp32; under bf16 autocast, linear inputs and outputs in bf16,
layer norms in fp32 (CUDA autocast casts them; CPU autocast runs them in their weight's dtype, which FSDP's bf16
parameters make bf16: ``bf16_norms``), on CPU the attention in fp32 where SDPA falls back to its math kernel
(training with dropout) and in bf16 in its fused kernel and BERT's eager attention; dropout keeps a bool mask
on CUDA and a mask of its input's dtype on CPU, and keeps nothing at p = 0. Backward first adds the gradient of
the hidden stream and the largest op's buffers (``backward_buffer_bytes``).

Checked on CPU against torch's own trackers (``companion.runs.memtrack``: MemTracker, FSDPMemTracker on a
simulated process group) for fp32 and bf16, one device, TP, FSDP and 2-D: tests/energy/test_memory.py, and
``benchmarks/memory_estimate.py`` over a wider grid (estimate / tracked peak printed per configuration). The
CUDA rules are read from the kernels and are not yet checked on a GPU: runs on one record
``torch.cuda.max_memory_allocated`` (``peak_memory_bytes``), which ``benchmarks/memory_estimate.py --records``
compares with this estimate.
"""

from __future__ import annotations

from companion.energy.proxies import StepShape, encoder_layer_parameters, parameter_count

# A layout fits when its estimated peak is at most this share of the device's memory: the rest is left to the
# CUDA context, the caching allocator's fragmentation and the buffers this estimate does not count (an
# assumption, stated as such; not fitted)
USABLE_SHARE = 0.9
# Resident memory of a CPU rank besides its step: an imported torch + transformers process. On the stored cpu sweep
# 2026-11-25T0325 (data/reference/cpu), a rank's max RSS less this estimate of its step is 0.41-1.03 GB (ranks forked
# after the imports hold less); the largest, rounded up (benchmarks/memory_estimate.py --records prints both)
CPU_PROCESS_BASE_BYTES = 1.1e9


def bf16_norms(s: StepShape, on_cuda: bool) -> bool:
    """Whether the hidden stream between the linears is bf16: CPU autocast runs layer norm in its weight's dtype
    (CUDA autocast casts it to fp32), and FSDP's bf16 parameters make those weights bf16. Then every layer norm
    reads and writes bf16, and the projections take that bf16 tensor as it is, with no autocast copy."""
    return s.precision == "bf16" and not on_cuda and s.dp > 1


def _dtype_bytes(s: StepShape, on_cuda: bool) -> dict:
    bf16 = s.precision == "bf16"
    # CPU autocast runs SDPA's math kernel in fp32; its fused kernel and BERT's eager attention run in bf16
    attn = 2 if bf16 and (on_cuda or s.eager_attention or s.fused_attention) else 4
    norm = 2 if bf16_norms(s, on_cuda) else 4
    drop = 1 if s.dropout else 0
    return {
        "linear": 2 if bf16 else 4,  # a linear layer's saved input (and the GELU's, which follow it)
        "residual": norm,  # layer-norm inputs (fp32 where autocast runs layer norm in fp32)
        "attention": attn,  # q, k, v and the scores as the attention kernel saves them
        "mask_hidden": drop * (1 if on_cuda else (2 if bf16 else 4)),  # dropout on a linear's output
        "mask_embedding": drop * (1 if on_cuda else norm),  # dropout on the embedding layer norm's output
        "mask_scores": drop * (1 if on_cuda else 4 if fp32_softmax(s, on_cuda) else attn),
    }


def fp32_softmax(s: StepShape, on_cuda: bool) -> bool:
    """Whether BERT's eager attention takes its softmax in fp32 under bf16 autocast: always on CUDA (autocast casts
    softmax), and on CPU where an fp32 padding mask (the model's dtype, fp32 unless FSDP's bf16 parameters) is
    added to the bf16 scores and promotes them."""
    return s.precision == "bf16" and s.eager_attention and (on_cuda or (s.padding_mask and s.dp == 1))


def score_bytes(s: StepShape, on_cuda: bool) -> float:
    """Bytes a materialised attention score keeps for backward: the softmax's output and, with dropout, its mask
    and the dropped probabilities; an fp32 softmax (``fp32_softmax``) keeps its output and the bf16 copy the next
    matmul reads, with the mask between."""
    b = _dtype_bytes(s, on_cuda)
    if fp32_softmax(s, on_cuda):
        return 4 + b["mask_scores"] + 2
    return b["attention"] * (2 if s.dropout else 1) + b["mask_scores"]


def parameters_per_rank(s: StepShape) -> float:
    """Parameters a rank holds between steps: the encoder split t ways, all of it sharded d ways by FSDP."""
    enc = s.layers * encoder_layer_parameters(s.hidden, s.ffn)
    return (enc / s.tp + (parameter_count(s) - enc)) / s.dp


def saved_activation_bytes(s: StepShape, on_cuda: bool) -> float:
    """Bytes autograd keeps for backward on one rank after a forward pass (the module docstring's table)."""
    b = _dtype_bytes(s, on_cuda)
    bf16 = s.precision == "bf16"
    h, f, t = s.hidden, s.ffn, s.tp
    tokens = s.padded_tokens / s.dp  # tokens on one data-parallel rank
    pairs = s.attention_pairs / s.dp
    # under autocast each of q, k and v casts its fp32 input to a bf16 copy of its own, unless that input is bf16
    copies = 3 if bf16 and not bf16_norms(s, on_cuda) else 1
    replicated = (copies * b["linear"] + b["linear"] + 2 * b["residual"] + 2 * b["mask_hidden"]) * h
    split = (3 * b["attention"] + b["linear"]) * h + 2 * b["linear"] * f
    per_layer = tokens * (replicated + split / t)
    if (
        s.fused_attention
    ):  # its output (the output projection's input, unless autocast copies it) and log-sum-exp
        per_layer += tokens * ((b["attention"] * h if b["attention"] != b["linear"] else 0) + 4 * s.heads) / t
        if (
            s.padding_mask
        ):  # and the padding mask, expanded to every query in the query's dtype, in every layer
            per_layer += pairs * b["attention"]
    else:
        per_layer += pairs * s.heads * score_bytes(s, on_cuda) / t
    if bf16 and s.dp == 1:  # autocast's cached bf16 weights; FSDP frees its gathered copies after use
        per_layer += 2 * (4 * h * h + 2 * h * f) / t
    embeddings = tokens * h * (b["residual"] + b["mask_embedding"])
    # the pooler keeps its [CLS] slice, a view that holds the whole last hidden state alive, unless autocast casts
    # it to a bf16 copy of its own (an fp32 hidden stream under bf16); its output, the classifier's input and the
    # logits are small
    whole = not bf16 or bf16_norms(s, on_cuda)
    head = (tokens * h * b["residual"] if whole else 0.0) + s.sequences / s.dp * h * 3 * 4
    return s.layers * per_layer + embeddings + head


def backward_buffer_bytes(s: StepShape, on_cuda: bool) -> float:
    """What backward allocates first, on top of the saved activations: the gradient of the hidden stream (in the
    layer norms' dtype, replicated over TP) and the largest op's buffers, the GELU's (the gradients of its input
    and output, 2 x tokens x f) or the softmax's (one gradient of the scores)."""
    b = _dtype_bytes(s, on_cuda)
    tokens, pairs = s.padded_tokens / s.dp, s.attention_pairs / s.dp
    ffn = 2 * tokens * s.ffn * b["linear"] / s.tp
    # an fp32 softmax's backward holds fp32 buffers: its gradient, and with dropout the dropped one's too
    grad = (8 if s.dropout else 4) if fp32_softmax(s, on_cuda) else b["attention"]
    scores = 0.0 if s.fused_attention else pairs * s.heads * grad / s.tp
    return tokens * s.hidden * b["residual"] + max(ffn, scores)


def peak_bytes_per_rank(s: StepShape, on_cuda: bool) -> dict:
    """The estimated peak of one training step on one rank, with its parts (bytes)."""
    p = parameters_per_rank(s)
    enc_layer = encoder_layer_parameters(s.hidden, s.ffn)
    param_bytes = 2 if s.precision == "bf16" else 4  # as FSDP gathers them (its mixed-precision policy)
    # FSDP keeps the root unit (embeddings, pooler, classifier) gathered from forward to backward, and holds one
    # encoder layer in use and the next one prefetched
    root = (parameter_count(s) - s.layers * enc_layer) * param_bytes if s.dp > 1 else 0.0
    layers = 2 * enc_layer / s.tp * param_bytes if s.dp > 1 else 0.0
    activations = saved_activation_bytes(s, on_cuda)
    backward_buffers = backward_buffer_bytes(s, on_cuda)
    # in the first layer's backward (the last to run), FSDP holds beside the sharded states and the other layers'
    # sharded gradients the root, the layer in use and the next one gathered, and the layer's full fp32 gradient
    # that its reduce-scatter reads
    layer_grad = 4 * enc_layer / s.tp if s.dp > 1 else 0.0
    reduced = 4 * (s.layers - 1) * enc_layer / s.tp / s.dp
    # then the root's own backward: every layer's sharded gradient, the root's full gradient in the compute dtype
    # and, under bf16, its fp32 copy for the reduce-scatter (FSDP reduces in fp32)
    root_params = parameter_count(s) - s.layers * enc_layer
    root_grad = root_params * (param_bytes + (4 if param_bytes != 4 else 0)) if s.dp > 1 else 0.0
    moments = {
        "forward end": 12 * p + root + layers + activations + backward_buffers,
        "root gather": 12 * p + 2 * root + layers,
        "FSDP backward": 12 * p + reduced + root + layers + layer_grad,
        "root backward": 12 * p + reduced + 4 * enc_layer / s.tp / s.dp + root_grad,
        "optimizer step": 16 * p,
    }
    at = max(moments, key=moments.get)
    return {
        "weights": 4 * p,
        "optimizer_states": 8 * p,
        "gradients": 4 * p,
        "fsdp_gathered": root + layers,
        "activations": activations,
        "backward_buffers": backward_buffers,
        "peak": moments[at],
        "peak_at": at,
    }


def memory_check(s: StepShape, device_name: str) -> dict:
    """Whether a step fits its devices, by the estimate: on a GPU its peak per rank against ``USABLE_SHARE`` of
    one GPU's memory; on a CPU node every rank's process (``CPU_PROCESS_BASE_BYTES`` and its peak) against that
    share of the node's memory, which the ranks share. ``fits`` is False when the estimate exceeds it."""
    from companion.energy.hardware import memory_bytes

    on_cuda = device_name != "cpu"
    est = peak_bytes_per_rank(s, on_cuda)
    capacity = memory_bytes(device_name)
    need = est["peak"] if on_cuda else s.world_size * (CPU_PROCESS_BASE_BYTES + est["peak"])
    return {
        "kind": "estimated",
        "peak_bytes_per_rank": est["peak"],
        "peak_at": est["peak_at"],
        "scope": "device" if on_cuda else "node",
        "need_bytes": need,
        "capacity_bytes": capacity,
        "usable_share": USABLE_SHARE,
        "fits": need <= USABLE_SHARE * capacity,
    }


def gb(n_bytes: float) -> str:
    """Bytes as GB (10^9 B), as the hardware table and datasheets size memory."""
    v = n_bytes / 1e9
    return f"{v:,.0f} GB" if v >= 100 else f"{v:.3g} GB"


# what to change, by where the check is made: the flags of `companion predict`, of `companion plan`, a run's
FIXES = {
    "predict": (
        "lower --batch-size or --seq-len, or shard over more devices (--dp for FSDP, --tp for TP)",
        "lower --batch-size or --seq-len, or use a node with more memory (its ranks share this one's)",
    ),
    "plan": (
        "lower --batch-sizes or --seq-len, or plan on more --devices",
        "lower --batch-sizes or --seq-len, or use a node with more memory (its ranks share this one's)",
    ),
    "run": (
        "lower the batch size or the sequence length, or shard over more devices (FSDP dp, TP tp)",
        "lower the batch size or the sequence length, or use a node with more memory (its ranks share "
        "this one's)",
    ),
}


def misfit_message(check: dict, device_name: str, fixes: str = "predict") -> str:
    """One sentence naming the estimate, the memory and the fixes (``FIXES[fixes]``), for a check that does not fit."""
    where = (
        f"{gb(check['need_bytes'])} per {device_name} GPU"
        if check["scope"] == "device"
        else f"{gb(check['need_bytes'])} on the node for its ranks' processes together"
    )
    fix = FIXES[fixes][0 if check["scope"] == "device" else 1]
    return (
        f"the estimated peak memory, {where} at the {check['peak_at']}, exceeds {check['usable_share']:.0%} of "
        f"its {gb(check['capacity_bytes'])}: it would run out of memory; {fix}"
    )


def longest_padded_length(data) -> int:
    """The longest a batch of ``data`` (``runs.config.DataConfig``) is padded to: its longest possible example
    (``seq_len``, or a histogram's longest bin; any example of a text file), rounded up as batches are."""
    from companion.runs.data import padded_length

    longest = (
        data.seq_len if data.source != "synthetic" else min(data.lengths.max_len(data.seq_len), data.seq_len)
    )
    return padded_length(longest, data.pad_multiple, data.seq_len)


def varies_in_length(data, dp: int = 1) -> bool:
    """Whether a rank's batch of ``data`` can hold sequences shorter than its longest (padded, with an attention
    mask): more than one sequence per rank, and lengths that differ (a text file's, or a distribution's)."""
    if data.batch_size // dp < 2:
        return False  # one sequence: never padded, and the runner drops an all-ones mask
    if data.source != "synthetic":
        return True
    lengths = data.lengths
    if lengths.kind == "uniform":
        return lengths.min_len < data.seq_len
    if lengths.kind == "histogram":
        return len({min(n, data.seq_len) for n, w in lengths.bins if w > 0}) > 1
    return False


def with_longest_batch(s: StepShape, length: int) -> StepShape:
    """``s`` with every sequence of its batch padded to ``length``: the step that needs the most memory."""
    from dataclasses import replace

    return replace(s, padded_tokens=s.sequences * length, attention_pairs=s.sequences * length**2)


def longest_step_shape(cfg) -> StepShape:
    """The most memory a configured run's step can take (``runs.config.RunConfig``): every sequence of the batch
    padded to ``longest_padded_length``, with the attention kernel the run will use (the math kernel for eager
    attention, and on CPU when training with dropout, as ``runs.train.attention_kernel`` records it)."""
    m, d, lay = cfg.model, cfg.data, cfg.layout
    fused = m.attn != "eager" and not (cfg.device == "cpu" and m.dropout > 0)
    shape = StepShape(
        m.layers,
        m.hidden,
        m.heads,
        m.ffn_size,
        m.vocab,
        m.max_positions,
        m.num_labels,
        d.batch_size,
        0,
        0,
        lay.tp,
        lay.dp,
        cfg.precision,
        fused_attention=fused,
        dropout=m.dropout > 0,
        eager_attention=m.attn == "eager",
        padding_mask=varies_in_length(d, lay.dp),
    )
    return with_longest_batch(shape, longest_padded_length(d))


def runs_that_do_not_fit(configs) -> list[tuple[object, dict]]:
    """(configuration, check) of every run whose longest step's estimate exceeds its device's memory; runs tagged
    with a device the hardware table does not size are not checked."""
    from companion.energy.hardware import device_table

    table, out = device_table(), []
    for cfg in configs:
        name = "cpu" if cfg.device == "cpu" else cfg.device_name
        if table.get(name, {}).get("memory_gb") is None:
            continue
        check = memory_check(longest_step_shape(cfg), name)
        if not check["fits"]:
            out.append((cfg, check))
    return out
