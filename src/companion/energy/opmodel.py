"""The operator-level roofline: step time and energy as sums over the operators a BERT training step runs.

For one rank and one optimizer step, each operator class k has FLOPs F_k and bytes B_k; its time is its own
roofline, max(F_k / R_k, B_k / bw), where R_k is the achieved GEMM roof *for that shape* and bw the memory
bandwidth of the device (both from a calibration file or from spec-sheet priors, see ``DeviceRoofs``):

    class            FLOPs (per rank, fwd + bwd)                 bytes (per rank, fwd + bwd)
    gemm             3 * L * T_r * (8 h^2 + 4 h f) / t          3 * L * GEMM operands
    attention        3 * L * 4 h S2_r / t                        math kernel only: 12 (a/t) S2_r w per layer
    elementwise      -                                           3 * L * T_r * (8 h + 2 f / t) * w
    state            -                                           (2 w + 8) P_tp + 36 P_tp / d (weights, grads, AdamW)

(T_r = padded tokens per data-parallel rank, S2_r its attention pairs, t TP degree, d FSDP degree, w bytes per
activation, P_tp parameters per TP shard.) To these come fixed costs and communication:

    T_step = s * [ sum_k c_k * max(F_k / R_k, B_k / bw) ]  +  (c_step * n_step  +  c_layer * L * n_layer) * launch * o
             + c_tp * [t > 1] * L * n_layer * launch * o  +  c_fsdp * [d > 1] * 4 (L + 1) * launch * o
             + c_alpha * sum_collectives (g - 1) alpha(g) * q  +  c_beta * wire bytes / beta * q

where s is the compute share of one rank (on a CPU node: node cores over the cores the rank gets, so a
1-thread run on a 2-core node computes at half the node's roof, and p ranks split the node), o = max(1, p /
cores) the oversubscription of the node's cores (1 on GPUs), alpha(g) the latency per ring hop measured for a
group of g ranks, q = o / max(1, g / cores) the extra contention of a group whose node runs more ranks than the
group has (the TP groups of a 2-D layout). The TP term is the per-operator cost of DTensor dispatch and the
FSDP term the cost of FSDP's four hooks per unit (unshard and reshard, forward and backward), both counted in
eager-launch equivalents; where the calibration probed the layout (a tiny BERT trained under it,
``layout_overheads``), its measured overhead per unit (``layout_units``: each layer, and the root where FSDP
shards it) replaces that guess, and the fitted tier
pulls their multipliers towards 1 (``PRIOR_TIME_TERMS``), so a mode the sweep never ran keeps the measurement.
The collectives are one latency and one bandwidth term shared by TP all-reduces and FSDP
all-gathers/reduce-scatters (the same transport), so a layout whose mode the sweep never ran is predicted from
what the other modes taught about the transport, its bandwidth multiplier weakly pulled towards the
calibration's (``PRIOR_COMM_BYTES``) where few runs pin it down; FSDP collectives count only their exposed
part where the device runs them beside compute (GPUs). The weights' and optimizer state's multiplier is pulled
towards the calibration's timed AdamW step (``PRIOR_STATE_BYTES``): in a grid it grows with the parameter count as
the GEMMs do, and a run of few tokens, mostly this term, must not inherit what it absorbed there. The ``c_k`` are
1 in the calibrated and prior tiers; the fitted tier fits every c and fixed cost (non-negative least squares on
relative errors), so its coefficients read as "the roofline is off by this factor"; it then gives each parallel
layout it has runs of one more factor on that layout's overhead and collective terms, pulled towards 1
(``fit_layout_scales``): the sweep's own runs correct the probe's ratio between layouts. Where host and device do
not overlap (a CPU node, whose ranks share its cores) it fits, with those factors, one more on the compute terms
of every run of several ranks (``SIDE_BY_SIDE``): ranks that share a node's cores slow each other's compute.

Energy per step, all metered units together:

    E = P_static * units * T_step  +  P_core * busy * T_step  +  e_F * F  +  e_B * B  +  e_C * C

(F, B, C: FLOPs, bytes and bytes communicated over all ranks; busy: on a shared CPU node, the cores the run
keeps busy, ranks x threads per rank up to the node's cores, 0 on GPUs). A CPU's power follows its busy
cores: ranks waiting on a collective or a time slice still hold their core, so a 4-rank run on 2 cores draws
the 2-core power for its whole, longer step. The mean power per unit, E / (units x T_step), is capped at the
device's loaded power (``DeviceRoofs.power_ceiling_w``): the power side of the roofline. Parallel efficiency
and the change of mean power across layouts are outputs: eta(p) = T_1 / (p T_p) and P = E / T follow from the
terms above.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from companion.energy.intervals import INTERVAL_OVERHEAD_WEIGHT, interval_scale_of_share  # noqa: F401 (the weight: stage 04)

from companion.energy import proxies
from companion.runs.config import ISLAND_ATTN
from companion.runs.records import dtype_precision


# ----------------------------------------------------------------------------------------- the device
@dataclass(frozen=True)
class DeviceRoofs:
    """What the operator model needs to know about a device (units in the names)."""

    name: str
    gemm_peak_flops_per_s: float  # asymptotic GEMM throughput of one device at the run's precision
    gemm_half_dim: float  # k0 in R(M, N, K) = peak / (1 + k0/M + k0/N + k0/K): small dims lose throughput
    bandwidth_bytes_per_s: float
    launch_s: float  # fixed cost of one operator launch (host side)
    ops_per_layer: float = 80.0  # operators one encoder layer launches, forward + backward + optimizer
    ops_per_step: float = 60.0  # operators outside the layers (embeddings, head, loss, optimizer, zero_grad)
    collective_alpha_s: float = 50e-6  # latency per collective per ring hop
    collective_alpha_by_world_s: dict = field(
        default_factory=dict
    )  # measured per group size {"2": s, "4": s}
    collective_beta_bytes_per_s: float = 1e9  # ring bandwidth per rank
    # devices per node (0: one node holds any layout) and the bandwidth per rank of a collective whose group spans
    # nodes (the network's, not the node's links): a ring over several nodes runs at its slowest link
    gpus_per_node: int = 0
    internode_beta_bytes_per_s: float | None = None
    # devices one collective reaches over the board's fast links (0: every device of a node, as NVSwitch or a
    # CPU's memory joins them; 2 or 4 for PCIe boards joined by NVLink bridges) and the bandwidth per rank of a
    # collective whose group leaves such a group within one node (PCIe between the bridged groups)
    link_group: int = 0
    cross_link_beta_bytes_per_s: float | None = None
    shared_node: bool = False  # ranks share one device's cores (CPU ranks on one node)
    node_cores: int = (
        1  # cores the ranks of a shared node run on (launch and latency costs overlap up to this)
    )
    thread_exponent: float = 1.0  # node_cores threads compute node_cores ** exponent times one thread (CPU)
    # measured attention forward + backward per score element (one head, one query-key pair), by kernel:
    # {"fused": [s, s per head_dim], "math": [...]}; empty: the attention GEMMs' roofline instead
    attention_s_per_score: dict = field(default_factory=dict)
    elementwise_bytes_per_s: float | None = (
        None  # achieved by norms, dropout, GELU, residuals (None: bandwidth)
    )
    optimizer_bytes_per_s: float | None = None  # achieved by the AdamW step (None: bandwidth)
    # measured overhead of each parallel layout beyond one process's own costs, collectives' latency excluded
    # (``layout_overheads``): {"tp2-dp1": s per unit (``layout_units``), ...}; empty: the eager-launch model
    layout_overhead_s: dict = field(default_factory=dict)
    overlap: bool = True  # FSDP collectives run asynchronously, beside compute
    # A device of its own (a GPU) runs kernels while its host dispatches the next ones: the step is the soft
    # maximum (host^p + device^p)^(1/p) of the two, not their sum (0: they add, as on a CPU node, whose cores do
    # both). host = host_step_s + operators x launch_s; device = the roofline terms + the tiny kernels' floor.
    host_device_overlap_p: float = 0.0
    host_step_s: float = 0.0  # host time per step outside its operators (Python, data, the loop)
    kernels_per_op: float = 0.0  # device kernels per dispatched operator (many aten operators launch none)
    kernel_floor_s: float = 0.0  # device time of one tiny kernel, whatever its size
    ops_counted_autocast: bool = False  # op counts taken under bf16 autocast (its casts included)
    # each compiled execution mode's host time (s per step and per layer, measured) and kernels (per step and
    # per layer, as ratios to eager), from the calibration's execution probe (``execution_scales``):
    # {"compile": {"host_step_s": s, "host_layer_s": s, "kernels_step": r, "kernels_layer": r}, ...}; a mode
    # missing here is predicted as eager (``unprobed``)
    execution_scale: dict = field(default_factory=dict)
    idle_w: float = 0.0  # static power per metered unit (W)
    loaded_w: float = 0.0  # power of a unit running GEMMs (W)
    power_measured: bool = False  # whether the powers come from a counter
    tier: str = "calibrated"  # 'calibrated' (from a calibration file) or 'prior' (spec sheet)
    sources: dict = field(default_factory=dict)
    # quantities of the calibration that failed its checks, each with what took its place
    # ({"gemm": "... -> datasheet"}; ``companion.energy.calibration``): never used silently
    fallbacks: dict = field(default_factory=dict)

    def gemm_roof(self, m, n, k) -> np.ndarray:
        """Achieved FLOP/s of an (m x k) @ (k x n) GEMM: saturating in every dimension."""
        m, n, k = (np.asarray(v, float) for v in (m, n, k))
        return self.gemm_peak_flops_per_s / (1.0 + self.gemm_half_dim * (1 / m + 1 / n + 1 / k))

    def spans_nodes(self, ranks):
        """Whether a collective group of ``ranks`` ranks (a count or an array of them) spans nodes: never where
        ``gpus_per_node`` is 0 (one node holds any layout)."""
        return (self.gpus_per_node > 0) & (np.asarray(ranks) > self.gpus_per_node)

    def group_beta_bytes_per_s(self, span) -> np.ndarray:
        """Bandwidth per rank of a collective whose group spans ``span`` consecutive ranks (a count or an array;
        a TP group spans its degree, an FSDP group striding over TP groups the whole layout): a ring runs at its
        slowest link, the network's where the span leaves a node, PCIe's where it leaves a bridged group of
        ``link_group`` devices, else the node's own links."""
        span = np.asarray(span)
        beta = np.full(span.shape, float(self.collective_beta_bytes_per_s))
        if self.cross_link_beta_bytes_per_s:
            cross = min(float(self.cross_link_beta_bytes_per_s), float(self.collective_beta_bytes_per_s))
            beta = np.where(self.leaves_link_group(span), cross, beta)
        network = self.network_beta_bytes_per_s()
        if network is not None:
            beta = np.where(self.spans_nodes(span), np.minimum(network, beta), beta)
        return beta

    def leaves_link_group(self, ranks):
        """Whether a collective group spanning ``ranks`` consecutive ranks leaves the devices joined by the
        board's fast links (``link_group``) within a node: never where ``link_group`` is 0."""
        return (self.link_group > 0) & (np.asarray(ranks) > self.link_group)

    def network_beta_bytes_per_s(self) -> float | None:
        """Bandwidth per rank of a collective whose group spans nodes: the slower of the network and the node's
        own links; None where the device has no node boundary (``gpus_per_node`` 0) or no network figure."""
        if not (self.gpus_per_node and self.internode_beta_bytes_per_s):
            return None
        return min(self.internode_beta_bytes_per_s, self.collective_beta_bytes_per_s)

    def alpha_s(self, group: int) -> float:
        """Latency per ring hop of a collective over ``group`` ranks: measured for that group size where the
        calibration has it, else the nearest measured size below (above for groups smaller than any), else the
        single figure ``collective_alpha_s``."""
        measured = {int(k): float(v) for k, v in (self.collective_alpha_by_world_s or {}).items()}
        if not measured:
            return self.collective_alpha_s
        below = [g for g in measured if g <= group]
        return measured[max(below)] if below else measured[min(measured)]

    @property
    def power_ceiling_w(self) -> float | None:
        """Most a metered unit draws: its loaded power (every core or SM running GEMMs), where it is known."""
        return self.loaded_w if self.loaded_w > self.idle_w > 0 else None

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict) -> "DeviceRoofs":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


# ------------------------------------------------------------------------------------- operator counts
TIME_TERMS = (
    "gemm_s",
    "attention_s",
    "elementwise_s",
    "state_s",
    "kernel_s",
    "step_fixed_s",
    "layer_fixed_s",
    "tp_dispatch_s",
    "fsdp_hooks_s",
    "comm_latency_s",
    "comm_bytes_s",
)
# where host and device overlap (``DeviceRoofs.host_device_overlap_p``): what the host does, what the device
# does, and what neither hides (collectives)
HOST_TERMS = ("step_fixed_s", "layer_fixed_s", "tp_dispatch_s", "fsdp_hooks_s")
DEVICE_TERMS = ("gemm_s", "attention_s", "elementwise_s", "state_s", "kernel_s")
# the compute terms: a GPU's throughput time (draws power above idle), the part of a step whose share does not
# widen its interval
COMPUTE_TERMS = ("gemm_s", "attention_s", "elementwise_s", "state_s")
GPU_ONLY_TERMS = ("kernel_s",)
# bf16 autocast adds casts: every linear's input and weight, counted at the aten level (``op_count_benchmark``
# under CPU autocast: 1- and 2-layer BERT, 136 -> 168 per layer, 73 -> 85 per step)
AUTOCAST_OPS_PER_LAYER, AUTOCAST_OPS_PER_STEP = 32, 12
# Element-wise bytes per tensor element of the memory-bound operators (layer norms, dropout, GELU, residuals)
# by precision. Under bf16 autocast they are not 2: layer norms run and return fp32, residuals add fp32, every
# linear's input is cast. An op-level count of one BERT layer under CPU autocast (``opcount.ByteCounter``; GEMMs,
# attention, the optimizer and views removed, CPU dropout's four operators replaced by CUDA's fused one) gave
# 240 bytes per token x hidden x layer, against the model's 3 x (8 h + 2 f) = 48 elements: 5 bytes each.
ELEMENTWISE_BYTES = {"fp32": 4.0, "bf16": 5.0}


def elementwise_rate(part: dict | None, dtype: str | None) -> float | None:
    """The element-wise benchmark's rate in the operator model's bytes: the elements it timed (3 x tokens x
    (8 h + 2 x 4 h)) x ``ELEMENTWISE_BYTES`` of the calibration's precision, over its time. The file's own
    ``bytes_per_s`` counts the tensors' element size (2 bytes in bf16, where the model counts 5: autocast keeps
    norms and residuals in fp32), so the model never divides by it directly; fp32 counts 4 either way."""
    part = part or {}
    tokens, hidden, time_s = part.get("tokens"), part.get("hidden"), part.get("time_s")
    if not (tokens and hidden and time_s):
        return part.get("bytes_per_s")
    elements = part.get("elements") or 3 * float(tokens) * 16 * float(hidden)
    # 2-byte types (bf16, fp16) count as bf16 does; a file without a dtype as fp32
    two_bytes = dtype_precision(dtype) in ("bf16", "fp16")
    return float(elements) * ELEMENTWISE_BYTES["bf16" if two_bytes else "fp32"] / float(time_s)


TIME_UNITS = {
    "gemm_s": "x roofline",
    "kernel_s": "x tiny kernels' floor",
    "attention_s": "x measured cost per score (else its GEMMs' roofline)",
    "elementwise_s": "x measured element-wise bandwidth (else the memory roof)",
    "state_s": "x measured AdamW bandwidth (else the memory roof)",
    "step_fixed_s": "x launch model",
    "layer_fixed_s": "x launch model",
    "tp_dispatch_s": "x TP overhead (calibration's probe; else eager launches per TP operator)",
    "fsdp_hooks_s": "x FSDP overhead (calibration's probe; else eager launches per hook)",
    "comm_latency_s": "x alpha",
    "comm_bytes_s": "x 1/beta",
}
HELD_TIME_TERMS = ("comm_latency_s",)  # taken as calibrated, never fitted (fit_time_coefficients)
# fitted, but pulled towards the calibration (multiplier 1): a multiplier off by x costs as much as a run off by
# 0.5 x. A layout's overhead is identified only by runs of that layout; with none of them (a mode the sweep never
# ran) the calibration's measurement stands instead of an arbitrary value. (How the weight was chosen:
# docs/decisions.md.)
PRIOR_TIME_TERMS = {"tp_dispatch_s": 0.5, "fsdp_hooks_s": 0.5}
# The collective bandwidth's multiplier is pulled too, ten times more weakly: a training step's collectives run at
# a fraction of the calibration's isolated bandwidth, which the pull barely moves where the sweep's runs pin it
# down; where they do not (only TP runs, whose bytes are a tenth of a step), it keeps the multiplier from running
# off and being applied to FSDP's parameter gathers. (The weight's choice: docs/decisions.md.)
PRIOR_COMM_BYTES = {"comm_bytes_s": 0.05}
# The weights, gradients and AdamW state term is pulled at the layout overheads' weight where the calibration timed
# the optimizer step itself (AdamW over the model's byte count). In a sweep grid its bytes grow with the parameter
# count, as the GEMMs' FLOPs do, so a free multiplier is weakly identified and absorbs other costs, which a run of
# few tokens (mostly this term) then pays. (The weight's choice: docs/decisions.md.)
PRIOR_STATE_BYTES = {"state_s": 0.5}
FSDP_HOOKS_PER_UNIT = 4  # unshard + reshard, forward and backward, per FSDP unit (each layer and the root)
# FSDP collectives of one step: per encoder layer two parameter all-gathers (forward, and backward after the
# reshard) and one gradient reduce-scatter; the root unit is not resharded after forward: one gather, one scatter
FSDP_COLLECTIVES_PER_LAYER, FSDP_COLLECTIVES_ROOT = 3, 2
# activation all-reduces of one encoder layer under TP (T_r x h each): attention-out and FFN-out forward, the
# attention's and the FFN's input gradients backward (the plan in companion.runs.parallel; its test counts them)
TP_ALL_REDUCES_PER_LAYER = 4


# the columns of a run that its operator terms read (``operator_frame``); the last four have defaults
OPERATOR_COLUMNS = (
    "execution",
    "attn",
    "layers",
    "hidden",
    "ffn",
    "heads",
    "tp",
    "dp",
    "vocab",
    "max_positions",
    "padded_tokens",
    "attention_pairs",
    "batch_size",
    "num_labels",
    "precision",
    "attention_kernel",
    "threads_per_rank",
)
COLUMN_DEFAULTS = {
    "execution": "eager",
    "attn": "sdpa",
    "num_labels": 2,
    "precision": "fp32",
    "attention_kernel": "math",
    "threads_per_rank": np.nan,
}


def operator_columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns ``operator_frame`` reads, as arrays (a default where the frame has none): read once for a
    fit that builds the terms of the same runs for every thread-exponent candidate."""
    return {
        name: df[name].to_numpy() if name in df else np.full(len(df), COLUMN_DEFAULTS.get(name))
        for name in OPERATOR_COLUMNS
    }


def operator_frame(df: pd.DataFrame, dev: DeviceRoofs, columns: dict | None = None) -> pd.DataFrame:
    """The roofline time of each operator class and the fixed and communication costs of one step (s), plus
    the step's FLOPs, bytes and communicated bytes over all ranks (for the energy terms): one row per run,
    same index as ``df``. Computed on whole columns (a fit profiles many devices over the same runs);
    ``columns``: ``operator_columns(df)``, where the caller has them."""
    col = operator_columns(df) if columns is None else columns
    f64 = lambda name: np.asarray(col[name], float)  # noqa: E731
    L, h, f, a = f64("layers"), f64("hidden"), f64("ffn"), f64("heads")
    t, d = f64("tp"), f64("dp")
    vocab, max_pos, labels = f64("vocab"), f64("max_positions"), f64("num_labels")
    w = np.where(col["precision"] == "bf16", 2.0, 4.0)
    fused = col["attention_kernel"] == "fused"
    T_r, S2_r, B_r = f64("padded_tokens") / d, f64("attention_pairs") / d, f64("batch_size") / d
    seq = np.maximum(S2_r / np.maximum(T_r, 1.0), 1.0)  # mean padded length (S2 / T)
    p_ranks = t * d
    if dev.shared_node:
        # The ranks share one node's cores: a rank computes at the node's roof times the share of the cores it
        # gets (its threads, at most its fair share of the node); fixed costs do not split (every rank launches
        # every operator) and run side by side on up to node_cores cores.
        cores = max(dev.node_cores, 1)
        threads = _threads_per_rank(col["threads_per_rank"], cores, p_ranks)
        share = _compute_share(np.minimum(threads, cores / p_ranks), cores, dev.thread_exponent)
        oversub = np.maximum(1.0, p_ranks / cores)
        busy = np.minimum(p_ranks * threads, cores)  # cores the run keeps busy (ranks x threads, at most all)
    else:
        cores, share, oversub = p_ranks, np.ones(len(df)), np.ones(len(df))
        busy = np.zeros(len(df))  # one rank per metered unit: its activity is in the static and dynamic terms
    bw = dev.bandwidth_bytes_per_s

    def op(flops, bytes_, roof):
        return np.maximum(flops / roof, bytes_ / bw)

    def contention(group: np.ndarray) -> np.ndarray:
        """Extra slow-down of a collective over ``group`` ranks when its node runs more ranks than the group."""
        return oversub / np.maximum(1.0, group / cores) if dev.shared_node else np.ones(len(df))

    def alpha(group: np.ndarray) -> np.ndarray:
        by_size = {g: dev.alpha_s(int(g)) for g in np.unique(group)}
        return np.array([by_size[g] for g in group])

    # GEMMs: QKV + output projection (4 of T_r x h x h/t), FFN up and down (T_r x h x f/t); fwd + 2 bwd
    proj_f, ffn_f = 3 * L * 8 * T_r * h * h / t, 3 * L * 4 * T_r * h * f / t
    proj_b = 3 * L * 4 * (T_r * h + h * h / t + T_r * h / t) * w
    ffn_b = 3 * L * 2 * (T_r * h + h * f / t + T_r * f / t) * w
    head_f = 3 * (2 * B_r * h * h + 2 * B_r * h * labels)
    gemm = (
        op(proj_f, proj_b, dev.gemm_roof(T_r, h / t, h))
        + op(ffn_f, ffn_b, dev.gemm_roof(T_r, f / t, h))
        + head_f / dev.gemm_roof(np.maximum(B_r, 1), h, h)
    )
    # attention scores: QK^T and PV per head (M = N = seq, K = head_dim); the math kernel writes the scores
    att_f = 3 * L * 4 * h * S2_r / t
    att_b = np.where(fused, 0.0, 3 * L * 4 * (a / t) * S2_r * w)
    attention = op(att_f, att_b, dev.gemm_roof(seq, seq, h / a))
    costs = dev.attention_s_per_score or {}
    for kernel, is_kernel in (("fused", fused), ("math", ~fused)):
        if costs.get(kernel):  # the kernel's measured cost per score element (calibration), fwd + bwd
            u, v = costs[kernel][:2]
            attention = np.where(is_kernel, L * (a / t) * S2_r * (u + v * h / a), attention)
    # layer norms, GELU, dropout, residuals, biases: memory-bound (bytes per element: ``ELEMENTWISE_BYTES``)
    w_elem = np.where(col["precision"] == "bf16", ELEMENTWISE_BYTES["bf16"], ELEMENTWISE_BYTES["fp32"])
    elem_b = 3 * L * T_r * (8 * h + 2 * f / t) * w_elem
    elementwise = elem_b / (dev.elementwise_bytes_per_s or bw)
    # weights read (fwd + bwd), gradients written and read, AdamW on the local shard
    enc = L * proxies.encoder_layer_parameters(h, f)
    p = (
        (vocab + max_pos + 2) * h + 2 * h + enc + (h * h + h) + (h * labels + labels)
    )  # proxies.parameter_count
    p_tp = enc / t + (p - enc)
    state_b = (2 * w + 8) * p_tp + 36 * p_tp / d
    state = state_b / (dev.optimizer_bytes_per_s or bw)
    # fixed per-step and per-layer costs (operator launches); under TP every layer operator goes through
    # DTensor dispatch, FSDP runs four hooks per unit
    step_fixed = dev.ops_per_step * dev.launch_s * oversub
    layer_fixed = dev.ops_per_layer * L * dev.launch_s * oversub
    tp_dispatch = np.where(t > 1, dev.ops_per_layer * L * dev.launch_s * oversub, 0.0)
    kernels = np.zeros(len(df))
    # each row's execution mode: a compiled mode's host time is the calibration's probe's for it (per step and per
    # layer, a host's cost not growing with the tokens), its kernels the eager count times the mode's ratio;
    # eager rows, and modes the probe lacks, keep the eager terms (ratios 1)
    mode = execution_scale_columns(col["execution"], dev, col["attn"])
    if dev.host_device_overlap_p > 0:
        # a device of its own: the host's fixed cost per step, bf16 autocast's casts where the counts lack them,
        # and the device time of the kernels the operators launch, however small (queued behind the host)
        cast = (w == 2.0) & (not dev.ops_counted_autocast)
        ops_step = dev.ops_per_step + np.where(cast, AUTOCAST_OPS_PER_STEP, 0.0)
        ops_layer = dev.ops_per_layer + np.where(cast, AUTOCAST_OPS_PER_LAYER, 0.0)
        step_fixed = dev.host_step_s + ops_step * dev.launch_s
        layer_fixed = ops_layer * L * dev.launch_s
        kernels = (
            dev.kernels_per_op
            * (ops_step * mode["kernels_step"] + ops_layer * L * mode["kernels_layer"])
            * dev.kernel_floor_s
        )
    step_fixed = np.where(mode["compiled"], mode["host_step_s"] * oversub, step_fixed)
    layer_fixed = np.where(mode["compiled"], mode["host_layer_s"] * L * oversub, layer_fixed)
    fsdp_hooks = np.where(d > 1, FSDP_HOOKS_PER_UNIT * (L + 1) * dev.launch_s * oversub, 0.0)
    if dev.layout_overhead_s:
        # a layout the calibration probed: its measured overhead per unit (``layout_units``) replaces the launch
        # model (a 2-D layout's is split between the two terms in the launch model's proportion)
        for name, per_unit_s in dev.layout_overhead_s.items():
            tp_k, dp_k = layout_degrees(name)
            rows = (t == tp_k) & (d == dp_k)
            if not rows.any():
                continue
            total = per_unit_s * layout_units(L[rows], dp_k)
            launch = tp_dispatch[rows] + fsdp_hooks[rows]
            share_tp = np.where(launch > 0, tp_dispatch[rows] / np.where(launch > 0, launch, 1.0), 0.0)
            tp_dispatch[rows], fsdp_hooks[rows] = total * share_tp, total * (1 - share_tp)
    # TP: 2 all-reduces forward and 2 backward per layer (TP_ALL_REDUCES_PER_LAYER, the plan's: companion.runs.
    # parallel) over the t ranks of a TP group, ring: 2 (t-1)/t of the activation each on the wire
    tp_on = t > 1
    tp_lat = np.where(tp_on, TP_ALL_REDUCES_PER_LAYER * L * (t - 1) * alpha(t) * contention(t), 0.0)
    tp_wire = np.where(tp_on, TP_ALL_REDUCES_PER_LAYER * L * 2 * (t - 1) / t * T_r * h * w, 0.0)
    # TP groups are the innermost ranks (parallel.build_mesh): they leave a node (or a bridged group of devices)
    # only when larger than one; an FSDP group strides over the TP groups, so it leaves one as soon as the whole
    # layout does
    tp_bytes = tp_wire / dev.group_beta_bytes_per_s(t) * contention(t)
    # FSDP: per layer all-gather forward, all-gather backward (resharded after forward) and reduce-scatter of the
    # gradients (fp32); the root (embeddings, pooler, head), kept gathered from forward to backward, is gathered
    # once (FSDP_COLLECTIVES_PER_LAYER, FSDP_COLLECTIVES_ROOT: companion.runs.parallel's plan, counted by its test)
    dp_on = d > 1
    fsdp_wire = np.where(dp_on, (d - 1) / d * ((2 * w + 4) * enc / t + (w + 4) * (p - enc)), 0.0)
    n_fsdp = FSDP_COLLECTIVES_PER_LAYER * L + FSDP_COLLECTIVES_ROOT
    fsdp_lat = np.where(dp_on, n_fsdp * (d - 1) * alpha(d) * contention(d), 0.0)
    fsdp_bytes = fsdp_wire / dev.group_beta_bytes_per_s(t * d) * contention(d)
    comm = fsdp_lat + fsdp_bytes
    if dev.overlap:
        # where collectives run beside compute only what compute cannot hide is exposed (the first gather always
        # is); the exposed fraction scales the latency and the bandwidth part alike
        compute = share * (gemm + attention + elementwise)
        safe = np.where(comm > 0, comm, 1.0)
        exposed = np.where(comm > 0, np.maximum(comm - compute, comm / (L + 1)) / safe, 1.0)
    else:
        exposed = np.ones(len(df))
    flops_total = (proj_f + ffn_f + att_f + head_f) * t * d
    bytes_total = (proj_b + ffn_b + att_b + elem_b + state_b) * t * d
    comm_total = (tp_wire + fsdp_wire) * t * d
    own_device = 0.0 if dev.shared_node else 1.0
    return _float_frame(
        {
            "gemm_s": share * gemm,
            "attention_s": share * attention,
            "elementwise_s": share * elementwise,
            "state_s": share * state,
            "kernel_s": kernels,
            "step_fixed_s": step_fixed,
            "layer_fixed_s": layer_fixed,
            "tp_dispatch_s": tp_dispatch,
            "fsdp_hooks_s": fsdp_hooks,
            "comm_latency_s": tp_lat + exposed * fsdp_lat,
            "comm_bytes_s": tp_bytes + exposed * fsdp_bytes,
            "op_flops": flops_total,
            "op_bytes": bytes_total,
            "op_comm_bytes": comm_total,
            "busy_cores": busy,
            # devices of their own, whose throughput time draws power above idle (``predict_energy_j``), and the
            # exponent that overlaps host and device (0: the terms add)
            "owned_devices": own_device * t * d,
            "overlap_p": np.full(len(df), float(dev.host_device_overlap_p)),
        },
        df.index,
    )


def _float_frame(columns: dict[str, np.ndarray], index: pd.Index) -> pd.DataFrame:
    """A frame of float columns held as one block (a fit builds thousands of these: a frame from a dict of
    arrays costs several times more)."""
    block = np.empty((len(columns), len(index)))
    for row, values in zip(block, columns.values()):
        row[:] = values
    return pd.DataFrame(block.T, index=index, columns=list(columns), copy=False)


EXECUTION_SCALES = ("host_step_s", "host_layer_s", "kernels_step", "kernels_layer")


def execution_key(execution: str, attn: str | None = None) -> str:
    """The name a calibration's execution probe gives a run's way of executing: its mode, and for a compiled mode
    with attention left out of the graphs (``attn`` sdpa-nocompile) ``<mode>+sdpa-nocompile``, whose graph breaks
    cost host time a whole-model compile does not pay."""
    return f"{execution}+{ISLAND_ATTN}" if attn == ISLAND_ATTN and execution != "eager" else str(execution)


def execution_scale_columns(execution, dev: DeviceRoofs, attn=None) -> dict[str, np.ndarray]:
    """Per row, each of ``EXECUTION_SCALES`` for the row's execution mode (``execution_key`` of its mode and
    attention: a compiled run with attention left out takes that probe's figures where the calibration has them,
    else the whole-model mode's) and whether the row is a probed compiled mode ("compiled"); eager and unprobed
    rows: no host time (unused) and kernel ratios of 1."""
    modes = np.asarray(execution, dtype=object)
    attns = np.full(len(modes), "sdpa", dtype=object) if attn is None else np.asarray(attn, dtype=object)
    keys = np.array(
        [k if (k := execution_key(m, a)) in dev.execution_scale else str(m) for m, a in zip(modes, attns)],
        dtype=object,
    )
    out = {k: np.zeros(len(modes)) if k.endswith("_s") else np.ones(len(modes)) for k in EXECUTION_SCALES}
    out["compiled"] = np.zeros(len(modes), bool)
    for name, found in dev.execution_scale.items():
        rows = keys == name
        out["compiled"] |= rows
        for k in EXECUTION_SCALES:
            out[k][rows] = float(found[k])
    return out


def execution_scales(probe: dict | None) -> dict:
    """Each compiled mode's entry of ``DeviceRoofs.execution_scale`` from a calibration's execution probe
    (``calibrate.execution_probe``): its host time per step and per layer (intercept and slope over depth, at
    least 0: CUDA graphs replay a layer's kernels with almost no host time) and its kernels per step and per
    layer as ratios to eager's (counted on a GPU; 1 where not counted). The absolute host times, not ratios:
    the eager host slope is the noisiest of the probe's figures, the calibration's own host model measures it."""
    modes = (probe or {}).get("modes") or {}
    eager = modes.get("eager") or {}
    out = {}
    for mode, found in modes.items():
        if mode == "eager" or found.get("host_per_layer_s") is None:
            continue
        ratio = {
            k: (
                max(float(found[f]) / float(eager[f]), 0.0)
                if found.get(f) is not None and eager.get(f)
                else 1.0
            )
            for k, f in (("kernels_step", "kernels_per_step"), ("kernels_layer", "kernels_per_layer"))
        }
        out[mode] = {
            "host_step_s": max(float(found["host_per_step_s"]), 0.0),
            "host_layer_s": max(float(found["host_per_layer_s"]), 0.0),
            **ratio,
        }
    return out


def unprobed(dev: DeviceRoofs, executions, attns=None) -> list[str]:
    """The compiled modes among ``executions`` (with ``attns``: their ``execution_key``) that ``dev``'s
    calibration did not probe: predicted as eager, or with attention left out as the whole-model mode where that
    was probed."""
    executions = list(executions)
    attns = [None] * len(executions) if attns is None else list(attns)
    keys = {execution_key(str(m), a) for m, a in zip(executions, attns)}
    return sorted(k for k in keys if k != "eager" and k not in dev.execution_scale)


def _compute_share(cores_of_rank: np.ndarray, cores: int, exponent: float) -> np.ndarray:
    """The node's roof over one rank's: the node's cores run ``cores ** exponent`` times one core; a rank with
    x >= 1 cores runs ``x ** exponent`` times one core, a rank with a fraction x < 1 of a core (more ranks than
    cores) x times one core (time slicing).

    One exponent for every operator class, and no slow-down of ranks that run side by side: measured on the 2-core
    node at the grid's shapes, layer norms, dropout and GELU run 1.1x faster on 2 threads than on 1, math attention
    1.4x, AdamW 1.3x, a 512x256x256 GEMM 1.3x; two 1-thread processes training their own tiny BERTs at once each
    step as fast as one alone (0.99-1.02x). An exponent per class from those figures moved the fitted tier's mean
    held-out MAPE on six stored sweeps by 0.1 point at most and made the calibrated tier's worse (pooled time 11.3 ->
    14.2 %)."""
    x = np.asarray(cores_of_rank, float)
    rank = np.where(x >= 1, np.maximum(x, 1.0) ** exponent, x)
    return cores**exponent / rank


def _threads_per_rank(recorded: np.ndarray, cores: int, ranks: np.ndarray) -> np.ndarray:
    """The intra-op threads of each rank as recorded (``threads_per_rank``); where a record has none, the
    node's cores split evenly over its ranks (torchrun's default of one thread per rank for p >= cores)."""
    recorded = np.asarray(recorded)
    numeric = recorded.dtype.kind in "fiu"
    v = (
        recorded.astype(float)
        if numeric
        else pd.to_numeric(pd.Series(recorded), errors="coerce").to_numpy(float)
    )
    return np.where(np.isfinite(v) & (v >= 1), v, np.maximum(1.0, cores / ranks))


def metered_units(df: pd.DataFrame) -> np.ndarray:
    """Metered units per run: one per GPU (device scope) or one per node (CPU ranks on one node)."""
    if "metered_units" in df and df.metered_units.notna().all():
        return df.metered_units.to_numpy(float)
    return np.ones(len(df))


# --------------------------------------------------------------------------------------- coefficients
ENERGY_PARAMS = ("P_static_w", "P_core_w", "P_busy_w", "e_flop_j", "e_byte_j", "e_comm_j")
ENERGY_UNITS = {
    "P_static_w": "W per metered unit",
    "P_core_w": "W per busy core (shared CPU node)",
    "P_busy_w": "W above idle while a device runs its throughput kernels (GPU)",
    "e_flop_j": "J/FLOP",
    "e_byte_j": "J/byte",
    "e_comm_j": "J/byte communicated",
}
GPU_ONLY_PARAMS = ("P_busy_w",)


def busy_device_s(terms: pd.DataFrame, time_coef: dict | None = None) -> np.ndarray:
    """Per row, the seconds its own devices spend in throughput kernels (GEMMs, attention, element-wise and
    optimizer traffic, as the time terms count them with ``time_coef``), summed over its devices; 0 on a shared
    CPU node, whose power follows its busy cores instead."""
    if "owned_devices" not in terms:
        return np.zeros(len(terms))
    coef = time_coef or {}
    busy = sum(coef.get(k, 1.0) * terms[k].to_numpy(float) for k in COMPUTE_TERMS)
    return busy * terms.owned_devices.to_numpy(float)


def prior_coefficients(dev: DeviceRoofs) -> dict:
    """The un-fitted model: every time term at face value, energy from the device's power envelope. A device of
    its own (a GPU) draws idle power plus dynamic energy per FLOP and per byte, from its loaded power at its
    roofs; a shared CPU node draws idle power plus an equal share of the loaded-minus-idle power per busy core
    (its loaded power is measured with every core running GEMMs), whatever those cores compute or wait on."""
    time = {k: 1.0 for k in TIME_TERMS}
    if dev.shared_node:
        energy = {
            "P_static_w": dev.idle_w,
            "P_core_w": max(dev.loaded_w - dev.idle_w, 0.0) / max(dev.node_cores, 1),
            "P_busy_w": 0.0,
            "e_flop_j": 0.0,
            "e_byte_j": 0.0,
            "e_comm_j": 0.0,
        }
    else:
        # a GPU draws its idle power throughout and its loaded power while its throughput kernels run: a board
        # whose SMs are all busy sits near its limit even at modest MFU, and the tiny kernels of a host-bound
        # step, on few SMs, draw little above idle
        energy = {
            "P_static_w": dev.idle_w,
            "P_core_w": 0.0,
            "P_busy_w": max(dev.loaded_w - dev.idle_w, 0.0),
            "e_flop_j": 0.0,
            "e_byte_j": 0.0,
            "e_comm_j": 0.0,
        }
    return {"time": time, "energy": energy}


# The fitted tier's correction of each parallel layout the sweep ran: one factor on that layout's overhead and
# collective terms, fitted after the shared multipliers and pulled towards 1 at this weight. The shared
# multipliers scale every layout's probed overhead alike, so the calibration's ratio between layouts (tp2 against
# tp4, from a tiny probe timed for a few seconds) stands as probed; it moves by up to 2x between calibrations of
# one node. Where the sweep ran a layout, its own runs correct that ratio; a layout it never ran keeps the
# calibration's (factor 1), so a held-out degree or mode is predicted as before. (The weight's choice:
# docs/decisions.md.)
LAYOUT_TERMS = ("tp_dispatch_s", "fsdp_hooks_s", "comm_latency_s", "comm_bytes_s")
LAYOUT_SCALE_PRIOR = 1.0
LAYOUT_SCALE_UNIT = "x this layout's overhead and collective terms (fitted; 1: the calibration's ratio)"
# Ranks that share a node's cores slow each other's compute (caches, memory bandwidth, the collectives' own
# threads), which neither the calibration's single process nor a layout's overhead per unit counts: on a shared
# node the fitted tier multiplies the compute terms (``COMPUTE_TERMS``) of every run of several ranks by one factor,
# fitted with the layouts' own factors and pulled towards 1 (none) at this weight. It is kept in the layout
# factors' dict under this key, which names no layout. (The weight's choice and a direct measurement of the
# effect: docs/decisions.md.)
SIDE_BY_SIDE = "side_by_side"
SIDE_BY_SIDE_PRIOR = 0.3
SIDE_BY_SIDE_UNIT = "x the compute terms of a run of several ranks on one node (fitted; 1: none)"
THREAD_EXPONENT_UNIT = "speedup = threads ** exponent (fitted on a shared node's sweep)"


def coefficient_rows(
    time: dict, energy: dict, layout_scale: dict | None = None, thread_exponent: float | None = None
) -> list[dict]:
    """The operator model's coefficients as rows (param, value, unit, target: 'step_s' or 'energy_per_step_j'):
    the time multipliers, the energy coefficients, the thread exponent (a shared node's fit chooses it; None
    elsewhere) and each parallel layout's factor. A name this module does not define gets no unit."""
    shared = thread_exponent is not None  # a shared CPU node: the GPU-only terms are not in its model
    rows = [
        {"param": k, "value": v, "unit": TIME_UNITS.get(k, ""), "target": "step_s"}
        for k, v in time.items()
        if not (shared and k in GPU_ONLY_TERMS)
    ]
    rows += [
        {"param": k, "value": v, "unit": ENERGY_UNITS.get(k, ""), "target": "energy_per_step_j"}
        for k, v in energy.items()
        if not (shared and k in GPU_ONLY_PARAMS)
    ]
    if thread_exponent is not None:
        rows.append(
            {
                "param": "thread_exponent",
                "value": thread_exponent,
                "unit": THREAD_EXPONENT_UNIT,
                "target": "step_s",
            }
        )
    rows += [
        {"param": f"layout_scale[{k}]", "value": v, "unit": LAYOUT_SCALE_UNIT, "target": "step_s"}
        for k, v in (layout_scale or {}).items()
        if k != SIDE_BY_SIDE
    ]
    if SIDE_BY_SIDE in (layout_scale or {}):
        rows.append(
            {
                "param": SIDE_BY_SIDE,
                "value": layout_scale[SIDE_BY_SIDE],
                "unit": SIDE_BY_SIDE_UNIT,
                "target": "step_s",
            }
        )
    return rows


def layout_names(df: pd.DataFrame) -> np.ndarray:
    """Each run's parallel layout as the calibration names it ("tp2-dp1"; "tp1-dp1" for one process)."""
    tp, dp = (df[c].to_numpy(dtype=float, na_value=np.nan) for c in ("tp", "dp"))
    if not (np.isfinite(tp).all() and np.isfinite(dp).all()):
        raise ValueError(
            "some runs have no tp or dp (missing or infinite): every run needs its layout's degrees"
        )
    names = [f"tp{t}-dp{d}" for t, d in zip(tp.astype(int).tolist(), dp.astype(int).tolist())]
    return np.array(names, dtype=object)


def layout_degrees(name: str) -> tuple[int, int]:
    """The TP and FSDP degrees of a layout named as ``layout_names`` names it: "tp2-dp1" -> (2, 1)."""
    tp, dp = name.split("-")
    return int(tp[2:]), int(dp[2:])


def _layout_factor(layout_scale: dict | None, layouts):
    """Each row's layout factor (``fit_layout_scales``), 1 for a layout the fit has none of; 1 without factors."""
    if not layout_scale:
        return 1.0
    return np.array([float(layout_scale.get(k, 1.0)) for k in layouts])


def _side_by_side_factor(layout_scale: dict | None, layouts):
    """Each row's factor on its compute terms (``SIDE_BY_SIDE``): the fitted one for a run of several ranks, 1 for
    one process; 1 where the fit has none."""
    f = (layout_scale or {}).get(SIDE_BY_SIDE)
    if f is None or layouts is None:
        return 1.0
    return np.where(np.asarray(layouts) != "tp1-dp1", float(f), 1.0)


def _term_seconds(cols: dict[str, np.ndarray], time_coef: dict, keys) -> np.ndarray:
    """Per row, the seconds of the terms ``keys`` (of ``term_columns``' ``cols``) times their multipliers."""
    return sum(time_coef.get(k, 1.0) * cols[k] for k in keys if k in cols)


def _compute_s(terms: pd.DataFrame, time_coef: dict) -> np.ndarray:
    """Per row, the seconds of the multiplied compute terms (``COMPUTE_TERMS``)."""
    return _term_seconds(term_columns(terms), time_coef, COMPUTE_TERMS)


def _rest_and_layout_s(terms: pd.DataFrame, time_coef: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the seconds of the multiplied time terms outside ``LAYOUT_TERMS`` and of those in it."""
    cols = term_columns(terms)
    rest = _term_seconds(cols, time_coef, (k for k in TIME_TERMS if k not in LAYOUT_TERMS))
    return rest, _term_seconds(cols, time_coef, LAYOUT_TERMS)


def scaled_terms(
    terms: pd.DataFrame, time_coef: dict, layout_scale: dict | None = None, layouts=None
) -> pd.DataFrame:
    """Each time term's seconds as the model counts them: the term times its multiplier, and a layout's
    overhead and collective terms (``LAYOUT_TERMS``) times that layout's own factor where the fit has one, and
    the compute terms of a run of several ranks times ``SIDE_BY_SIDE``'s factor where it has that one
    (``fit_layout_scales``; ``layouts``: ``layout_names`` of the rows). Their sum is the step time."""
    return pd.DataFrame(_scaled_columns(terms, time_coef, layout_scale, layouts), index=terms.index)


def _scaled_columns(terms: pd.DataFrame, time_coef: dict, layout_scale: dict | None, layouts) -> dict:
    """``scaled_terms``' columns as arrays, {term: seconds}."""
    factor, cols = _layout_factor(layout_scale, layouts), term_columns(terms)
    side = _side_by_side_factor(layout_scale, layouts)
    return {
        k: time_coef.get(k, 1.0)
        * cols[k]
        * (factor if k in LAYOUT_TERMS else side if k in COMPUTE_TERMS else 1.0)
        for k in TIME_TERMS
        if k in cols
    }


def term_columns(terms: pd.DataFrame) -> dict[str, np.ndarray]:
    """{column: values} of an ``operator_frame`` (float columns only), read at once: its one float block, without
    a copy."""
    return dict(zip(terms.columns, terms.to_numpy(float).T))


def _row_sum(columns: dict[str, np.ndarray], index: pd.Index) -> np.ndarray:
    """Per row, the sum of the columns with NaN as 0: ``DataFrame.sum(axis=1)`` on a frame of them held as one
    float block, as a frame built from the dict holds them, so the sums are those of such a frame bit for bit
    (the order in which pandas and numpy add a row's terms depends on the block's layout and the row count)."""
    return _float_frame(columns, index).sum(axis=1).to_numpy(float)


def overlapped(terms: pd.DataFrame) -> np.ndarray | None:
    """Per row, the host-device overlap exponent where a row has one (a GPU), else None (every row adds)."""
    if "overlap_p" not in terms:
        return None
    p = terms.overlap_p.to_numpy(float)
    return p if (p > 0).any() else None


def host_device_s(scaled: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, from ``scaled_terms``: the host's seconds, the device's and the rest (collectives)."""

    def total(keys):
        return scaled[[k for k in keys if k in scaled]].sum(axis=1).to_numpy(float)

    rest = [k for k in scaled.columns if k not in HOST_TERMS and k not in DEVICE_TERMS]
    return total(HOST_TERMS), total(DEVICE_TERMS), total(rest)


def soft_max(host, device, p) -> np.ndarray:
    """(host^p + device^p)^(1/p): the step of a host and a device that overlap, between the larger of the two
    (p -> inf) and their sum (p = 1); scaled by the larger for numerical range."""
    host, device, p = (np.asarray(v, float) for v in (host, device, p))
    top = np.maximum(np.maximum(host, device), 1e-300)
    return top * ((host / top) ** p + (device / top) ** p) ** (1.0 / p)


def predict_time_s(
    terms: pd.DataFrame, time_coef: dict, layout_scale: dict | None = None, layouts=None
) -> np.ndarray:
    """Step time (s): ``scaled_terms`` summed, without building the frame (a fit calls this for every
    thread-exponent candidate of every held-out fold)."""
    rest, over = _rest_and_layout_s(terms, time_coef)
    plain = rest + _layout_factor(layout_scale, layouts) * over
    side = _side_by_side_factor(layout_scale, layouts)
    if not np.isscalar(side):
        plain = plain + (side - 1.0) * _compute_s(terms, time_coef)
    p = overlapped(terms)
    if p is None:
        return plain
    host, device, other = host_device_s(scaled_terms(terms, time_coef, layout_scale, layouts))
    return np.where(p > 0, soft_max(host, device, np.where(p > 0, p, 1.0)) + other, plain)


def fit_layout_scales(
    terms: pd.DataFrame,
    time_coef: dict,
    step_s,
    layouts,
    weight: float = LAYOUT_SCALE_PRIOR,
    side_weight: float = SIDE_BY_SIDE_PRIOR,
) -> dict:
    """{layout: factor} for every parallel layout among the runs, and ``SIDE_BY_SIDE``: the factor s_l on layout
    l's overhead and collective seconds o_i, and the factor f on the compute seconds c_i of every run of several
    ranks, that minimise sum_i ((b_i + (f - 1) c_i + s_l o_i) / y_i - 1)^2 + weight^2 sum_l (s_l - 1)^2 +
    side_weight^2 (f - 1)^2 over the runs of several ranks (b_i: the rest of the step; s_l >= 0, 0.5 <= f <= 2)."""
    from scipy.optimize import lsq_linear  # imported here: a prediction never needs scipy

    y = np.asarray(step_s, float)
    if (
        overlapped(terms) is not None
    ):  # GPUs: the layouts keep the calibration's ratio (no factors fitted yet)
        return {}
    rest, over = _rest_and_layout_s(terms, time_coef)
    layouts = np.asarray(layouts)
    multi = layouts != "tp1-dp1"
    if not multi.any():
        return {}
    names = [n for n in sorted(set(layouts[multi])) if ((layouts == n) & (over > 0)).any()]
    yr = y[multi]
    # unknowns: f - 1, then each layout's s_l; rows: the runs of several ranks, then the pulls
    A = np.zeros((len(yr) + 1 + len(names), 1 + len(names)))
    b = np.zeros(len(A))
    A[: len(yr), 0] = _compute_s(terms, time_coef)[multi] / yr
    for j, name in enumerate(names):
        A[: len(yr), 1 + j] = np.where(layouts[multi] == name, over[multi], 0.0) / yr
    b[: len(yr)] = 1.0 - rest[multi] / yr
    A[len(yr), 0] = side_weight
    for j in range(len(names)):
        A[len(yr) + 1 + j, 1 + j] = weight
        b[len(yr) + 1 + j] = weight
    lower, upper = np.r_[-0.5, np.zeros(len(names))], np.r_[1.0, np.full(len(names), np.inf)]
    x = lsq_linear(A, b, bounds=(lower, upper)).x
    return {**{n: float(v) for n, v in zip(names, x[1:])}, SIDE_BY_SIDE: float(1.0 + x[0])}


def overhead_share(
    terms: pd.DataFrame, time_coef: dict, layout_scale: dict | None = None, layouts=None
) -> np.ndarray:
    """Per run, the share of its predicted step outside ``COMPUTE_TERMS`` (fixed costs, layout overheads,
    collectives), the step's terms counted as ``scaled_terms`` counts them; 0 for an empty step."""
    scaled = _scaled_columns(terms, time_coef, layout_scale, layouts)
    total = _row_sum({k: scaled[k] for k in TIME_TERMS}, terms.index)
    if overlapped(terms) is not None:  # where host and device overlap, only the host's exposed part counts
        total = np.where(
            terms.overlap_p.to_numpy(float) > 0,
            predict_time_s(terms, time_coef, layout_scale, layouts),
            total,
        )
    compute = _row_sum({k: scaled[k] for k in COMPUTE_TERMS}, terms.index)
    return np.where(total > 0, np.clip(1.0 - compute / np.where(total > 0, total, 1.0), 0.0, 1.0), 0.0)


def interval_scale(
    terms: pd.DataFrame, time_coef: dict, layout_scale: dict | None = None, layouts=None
) -> np.ndarray:
    """Per run, the factor on its interval's log half-width (``INTERVAL_OVERHEAD_WEIGHT``): 1 + weight x
    min(``overhead_share``, 0.5) / 0.5."""
    return interval_scale_of_share(overhead_share(terms, time_coef, layout_scale, layouts))


def predict_energy_j(
    terms: pd.DataFrame,
    step_s: np.ndarray,
    units: np.ndarray,
    energy_coef: dict,
    ceiling_w: float | None = None,
    time_coef: dict | None = None,
) -> np.ndarray:
    """Energy per step; with ``ceiling_w`` (``DeviceRoofs.power_ceiling_w``) no unit draws more than that on
    average: the power side of the roofline. The linear terms add FLOP and byte rates that a short step can
    push past the loaded power, which the device never draws."""
    step_s = np.asarray(step_s, float)
    units = np.asarray(units, float)
    # a fit artifact written before the busy-core term has no P_core_w: it predicts without it
    e = (
        energy_coef["P_static_w"] * units * step_s
        + energy_coef.get("P_core_w", 0.0) * terms.busy_cores.to_numpy(float) * step_s
        + energy_coef.get("P_busy_w", 0.0) * busy_device_s(terms, time_coef)
        + energy_coef["e_flop_j"] * terms.op_flops.to_numpy(float)
        + energy_coef["e_byte_j"] * terms.op_bytes.to_numpy(float)
        + energy_coef["e_comm_j"] * terms.op_comm_bytes.to_numpy(float)
    )
    return e if ceiling_w is None else np.minimum(e, ceiling_w * units * step_s)


def _relative_nnls(A: np.ndarray, y: np.ndarray, weight=None, prior=None) -> np.ndarray:
    """min sum((A c - y)^2 / weight^2) + sum_k w_k^2 (c_k - 1)^2 over c >= 0 (weight = y: relative errors;
    ``prior``: {column: w_k}, a pull of c_k towards 1), columns scaled for conditioning."""
    from scipy.optimize import nnls  # imported here: a prediction never needs scipy

    wt = np.asarray(y if weight is None else weight, float)
    M, rhs = A / wt[:, None], y / wt
    if prior:
        rows = np.zeros((len(prior), A.shape[1]))
        for i, (j, w) in enumerate(prior.items()):
            rows[i, j] = w
        M, rhs = np.vstack([M, rows]), np.concatenate([rhs, list(prior.values())])
    scale = np.abs(M).max(axis=0)
    scale[scale == 0] = 1.0
    c, _ = nnls(M / scale, rhs, maxiter=2000)
    return c / scale


def fit_time_coefficients(terms: pd.DataFrame, step_s: np.ndarray, held=None, prior=None) -> dict:
    """Non-negative multipliers of every time term (relative least squares); unused terms stay at 1.

    ``held`` terms stay at 1: their costs come from the device's calibration as measured. The collective
    latency per group size is held: it scales with collectives x hops like the software overheads (DTensor
    dispatch, FSDP hooks), which the sweep cannot tell apart from it. The collective bandwidth is fitted: the
    bytes on the wire vary with width, tokens and degree, and a training step's collectives do not reach the
    calibration's isolated bandwidth (on a 2-core CPU node about a quarter of it); held at the calibration,
    the missing bandwidth cost is absorbed by the overhead terms, which then over-predict runs with few
    tokens (the off-grid holdout by ~20 %).

    ``prior`` ({term: weight}) pulls a term's multiplier towards 1, the calibration's value: ``fit_time_model``
    passes ``time_prior(dev)``, which says which terms the device's calibration earns a pull for."""
    held = set(HELD_TIME_TERMS if held is None else held)
    cols = term_columns(terms)
    A = np.column_stack([cols[k] for k in TIME_TERMS])
    y = np.asarray(step_s, float)
    free = np.array([k not in held for k in TIME_TERMS]) & (np.abs(A).max(axis=0) > 0)
    c = np.ones(len(TIME_TERMS))
    rest = y - A[:, ~free].sum(axis=1)
    names = [k for k, f in zip(TIME_TERMS, free) if f]
    pull = {names.index(k): w for k, w in (prior or {}).items() if k in names}
    c[free] = _relative_nnls(A[:, free], np.clip(rest, 0.05 * y, None), weight=y, prior=pull)
    return dict(zip(TIME_TERMS, c.tolist()))


THREAD_EXPONENTS = tuple(np.round(np.linspace(0.0, 1.0, 9), 3))


def time_prior(dev: DeviceRoofs) -> dict:
    """The pulls towards the calibration that the fitted tier gives ``dev``'s time multipliers ({term: weight}):
    the layout overheads where the calibration probed the layouts (a launch-model guess earns no pull), the
    collective bandwidth where it measured the collectives (a default bandwidth earns none), the weights' and
    optimizer state's traffic where it timed the optimizer step (the memory roof's guess earns none)."""
    prior = dict(PRIOR_TIME_TERMS) if dev.layout_overhead_s else {}
    if dev.collective_alpha_by_world_s:
        prior.update(PRIOR_COMM_BYTES)
    if dev.optimizer_bytes_per_s:
        prior.update(PRIOR_STATE_BYTES)
    return prior


def fit_time_model(df: pd.DataFrame, dev: DeviceRoofs, held=None) -> tuple[DeviceRoofs, pd.DataFrame, dict]:
    """The time multipliers, and on a shared CPU node the thread exponent too (a profile over
    ``THREAD_EXPONENTS``: the one whose fitted multipliers leave the smallest relative error). A training step
    of a small model scales worse with threads than the calibration's large GEMM and copy, and the sweep runs
    the same configuration with one thread and with every core, which pins the exponent down. Returns the
    device with the chosen exponent, its operator terms and the multipliers."""
    y = np.asarray(df.step_s, float)
    if dev.host_device_overlap_p > 0:
        terms = operator_frame(df, dev)
        return dev, terms, fit_overlap_coefficients(terms, y)
    candidates = [dev]
    if dev.shared_node and "threads_per_rank" in df and df.threads_per_rank.nunique(dropna=True) > 1:
        candidates = [replace(dev, thread_exponent=float(g)) for g in THREAD_EXPONENTS]
    best = None
    prior = time_prior(dev)
    columns = operator_columns(df)
    for cand in candidates:
        terms = operator_frame(df, cand, columns)
        coef = fit_time_coefficients(terms, y, held, prior)
        err = float(np.sum((predict_time_s(terms, coef) / y - 1.0) ** 2))
        if best is None or err < best[0] - 1e-12:
            best = (err, cand, terms, coef)
    return best[1], best[2], best[3]


# The fitted tier of a device whose host and device overlap (a GPU): one multiplier on the host's terms and one
# on the device's, on log errors, each pulled towards 1 (the calibration) at this weight: a sweep of few runs,
# mostly host-bound, identifies the host's multiplier well and the device's barely, which then stays near 1.
OVERLAP_PRIOR_WEIGHT = 0.5


def fit_overlap_coefficients(terms: pd.DataFrame, step_s) -> dict:
    """{term: multiplier}: ``HOST_TERMS`` share one multiplier, ``DEVICE_TERMS`` another, the rest stay 1;
    least squares on log(predicted / measured) with a pull of each log multiplier towards 0."""
    from scipy.optimize import least_squares

    y = np.asarray(step_s, float)

    def coef(z):
        return {
            k: float(np.exp(z[0]) if k in HOST_TERMS else np.exp(z[1]) if k in DEVICE_TERMS else 1.0)
            for k in TIME_TERMS
        }

    def resid(z):
        return np.concatenate([np.log(predict_time_s(terms, coef(z)) / y), OVERLAP_PRIOR_WEIGHT * z])

    return coef(least_squares(resid, np.zeros(2)).x)


def fit_energy_coefficients(
    terms: pd.DataFrame,
    step_s: np.ndarray,
    units: np.ndarray,
    energy_j: np.ndarray,
    time_coef: dict | None = None,
) -> dict:
    """Static power, the power of each busy core (a shared CPU node: zero elsewhere), the power of a busy
    device (GPUs: zero elsewhere; its busy time from the terms under ``time_coef``) and dynamic energies
    (non-negative), on the runs' measured step times."""
    step_s = np.asarray(step_s, float)
    A = np.column_stack(
        [
            units * step_s,
            terms.busy_cores * step_s,
            busy_device_s(terms, time_coef),
            terms.op_flops,
            terms.op_bytes,
            terms.op_comm_bytes,
        ]
    )
    used = np.abs(A).max(axis=0) > 0
    c = np.zeros(A.shape[1])
    c[used] = _relative_nnls(A[:, used], np.asarray(energy_j, float))
    return dict(zip(ENERGY_PARAMS, c.tolist()))


# ------------------------------------------------------------------------------------ where roofs come from
def attention_cost_per_score(rows: list[dict]) -> dict:
    """Per kernel, (u, v) of fwd + bwd time = score elements x (u + v * head_dim), least squares on relative
    error over the calibration's attention shapes (score elements = batch x heads x seq^2). The math kernel
    (taken under dropout) is bound by the score traffic, so u dominates; the fused kernel's cost grows with
    head_dim."""
    out = {}
    for kernel in sorted({r["kernel"] for r in rows}):
        rs = [r for r in rows if r["kernel"] == kernel]
        n = np.array([r["batch"] * r["heads"] * r["seq"] ** 2 for r in rs], float)
        d = np.array([r["head_dim"] for r in rs], float)
        t = np.array([r["fwd_bwd_s"] for r in rs], float)
        if len(rs) < 2 or not np.all(np.isfinite(t) & (t > 0)):
            continue
        A = np.column_stack([n, n * d]) / t[:, None]
        from scipy.optimize import nnls

        scale = A.max(axis=0)
        scale[scale == 0] = 1.0
        c, _ = nnls(A / scale, np.ones(len(t)))
        out[kernel] = (c / scale).tolist()
    return out


def layout_units(layers, dp):
    """The units a layout's overhead is counted in: each encoder layer, and the root (embeddings, pooler, head)
    where FSDP shards it (its own FSDP unit); under TP alone the root is replicated, with no DTensor dispatch.

    Counted as layers + 1 under TP too, the probe's per-unit cost (fitted to 1 and 2 layers) under-predicted
    deeper TP runs: on two stored cpu sweeps (benchmarks/model_accuracy.py) held-out TP runs of 4 layers came
    in 14-31 % slower than predicted. Counted as layers, held-out time MAPE fell on both: pooled 10.9 / 9.9 ->
    9.9 / 9.3 %, parallel mode held out 16.6 / 17.0 -> 13.6 / 14.9 %, degree held out 14.7 / 13.6 -> 12.0 /
    12.0 %. On two sweeps measured after the choice: pooled 8.9 / 8.3 -> 8.3 / 8.1 %, mode 11.2 / 9.2 -> 8.1 /
    6.5 %, degree 11.4 / 8.6 -> 9.5 / 7.0 %; but off-grid 9.6 / 8.9 -> 10.5 / 9.6 % (energy 9.2 / 8.7 -> 10.3 /
    9.7 %, and 0.2-0.5 points worse on the first two): the off-grid TP runs of 48 tokens per step are now
    over-predicted (+13 to +24 %) while those of hundreds of tokens are closer. The probe's 64 tokens set a per-
    layer cost that the sweep's TP runs exceed as their tokens grow: a cost of TP that grows with the
    activations, beyond the all-reduces' bytes, is not in the model yet."""
    return np.asarray(layers, float) + (np.asarray(dp, float) > 1)


def layout_unit_words(name: str) -> str:
    """What a layout's overhead is counted per (``layout_units``), in words: 'per layer', or 'per FSDP unit'
    (each layer, and the root: embeddings, pooler and head, ``FSDP_UNIT_WORDS``)."""
    return "per FSDP unit" if layout_units(0, layout_degrees(name)[1]) else "per layer"


FSDP_UNIT_WORDS = "an FSDP unit is one encoder layer, or the root (embeddings, pooler and head)"


def layout_overheads(single: list[dict], layouts: list[dict], dev: DeviceRoofs) -> dict:
    """Each probed layout's overhead beyond its ranks' own costs, per unit (``layout_units``):
    {"tp<t>-dp<d>": s}.

    From the tiny probe's step times with 1 and 2 layers (``companion calibrate``; rows with the probe's shape):
    a layout's step, less its ranks' compute and less the latency of its collectives as ``operator_frame`` counts
    them on ``dev``, is its overhead. The ranks' compute is one process's step timed alone (``single``) times the
    node's oversubscription: a layout's ranks meet at every collective, so they compute side by side and p of
    them on fewer cores take p / cores times as long. (Older calibration files also hold the same ranks each
    training its own copy, ``reference_step_s``, once taken as the reference. Ranks that never meet pack the
    cores unevenly: in the nine stored cpu sweeps' calibrations (2026-11-24T2207 to 2026-11-25T0219) 4 ranks on
    2 cores stepped 0.8-2.1x as long as one process alone, where side-by-side compute takes 2x, and 2 ranks
    0.7-1.75x, where it takes 1x, so that reference read part of the compute as overhead at p = 4 and too little
    at p = 2. On those sweeps' held-out time MAPE, against it and against one process times the
    oversubscription: a parallel degree left out 12.4 -> 11.1 %, a mode left out 11.0 -> 10.4 %, pooled 9.4 ->
    9.2 %, off-grid 9.9 -> 10.1 %; on the first sweep calibrated this way (2026-11-25T0325) 12.2, 8.3, 8.0 and
    9.3 %. It is not read.) The overhead is
    taken as one cost per unit, fitted to both depths at once: a separate per-layer and per-step cost from two
    noisy differences swings by several times between calibrations, their sum per unit does not. The units are
    FSDP's (each layer and the root) where the layout shards data, and the layers alone under TP alone, whose
    root is replicated and dispatches no DTensor operator."""
    ref = {int(r["layers"]): float(r["step_s"]) for r in single}
    probe = pd.DataFrame([r for r in layouts if int(r["tp"]) * int(r["dp"]) > 1 and int(r["layers"]) in ref])
    if probe.empty:
        return {}
    probe = probe.assign(
        padded_tokens=probe.batch_size * probe.seq_len, attention_pairs=probe.batch_size * probe.seq_len**2
    )
    latency = operator_frame(probe, dev).comm_latency_s.to_numpy()
    ranks = (probe.tp * probe.dp).to_numpy(float)
    oversub = np.maximum(1.0, ranks / max(dev.node_cores, 1)) if dev.shared_node else np.ones(len(probe))
    compute = oversub * probe.layers.map(lambda n: ref[int(n)]).to_numpy(float)
    excess = probe.step_s.to_numpy(float) - compute - latency
    units = layout_units(probe.layers.to_numpy(float), probe.dp.to_numpy(float))
    per = (
        pd.DataFrame({"name": layout_names(probe), "excess": excess, "units": units})
        .groupby("name")[["excess", "units"]]
        .sum()
    )
    return {name: float(max(row.excess / row.units, 0.0)) for name, row in per.iterrows()}


def roofs_from_calibration(rec: dict) -> DeviceRoofs:
    """DeviceRoofs from a calibration record (``companion calibrate``; data/devices/<name>.json)."""
    colls = rec.get("collectives") or {}
    finite = [c for c in colls.values() if np.isfinite(c.get("beta_bytes_per_s", np.inf))]
    alpha = float(np.median([c["alpha_s"] for c in colls.values()])) if colls else 50e-6
    alpha_by_world = {str(int(c.get("world_size", k))): float(c["alpha_s"]) for k, c in colls.items()}
    # one bandwidth, the median over group sizes, where the latency is per size: on a shared 2-core node one
    # size's bandwidth swings by up to 2x between the calibration's two passes (docs/decisions.md)
    beta = float(np.median([c["beta_bytes_per_s"] for c in finite])) if finite else 1e9
    power = rec.get("power") or {}
    idle, loaded = power.get("idle_w"), power.get("loaded_w")
    dev = DeviceRoofs(
        name=rec["device_name"],
        gemm_peak_flops_per_s=float(rec["gemm"]["peak_flops_per_s"]),
        gemm_half_dim=float(rec["gemm"]["half_dim"]),
        bandwidth_bytes_per_s=float(rec["bandwidth"]["bandwidth_bytes_per_s"]),
        launch_s=float((rec.get("op_counts") or {}).get("per_op_s") or rec["launch"]["launch_s"]),
        collective_alpha_s=alpha,
        collective_alpha_by_world_s=alpha_by_world,
        collective_beta_bytes_per_s=beta,
        **(
            {
                "ops_per_layer": float(rec["op_counts"]["per_layer"]),
                "ops_per_step": float(rec["op_counts"]["per_step"]),
            }
            if rec.get("op_counts")
            else {}
        ),
        shared_node=bool(rec.get("shared_node", rec.get("device") == "cpu")),
        overlap=bool(rec.get("overlap", False)),
        node_cores=int(rec.get("provenance", {}).get("torch_threads") or 1),
        thread_exponent=float((rec.get("thread_scaling") or {}).get("exponent", 1.0)),
        attention_s_per_score=attention_cost_per_score(rec.get("attention") or []),
        execution_scale=execution_scales(rec.get("execution")),
        elementwise_bytes_per_s=elementwise_rate(rec.get("elementwise"), rec.get("dtype")),
        optimizer_bytes_per_s=(rec.get("optimizer") or {}).get("bytes_per_s"),
        idle_w=float(idle or 0.0),
        loaded_w=float(loaded if loaded is not None else idle or 0.0),
        power_measured=bool(power.get("measured", False)),
        tier="calibrated",
        sources={"calibration": rec.get("provenance", {}).get("measured_at"), "power": power.get("method")},
    )
    if not dev.shared_node:
        dev = replace(dev, **_gpu_host_model(rec))
    probe = [r for c in colls.values() for r in (c.get("layouts") or [])]
    if not probe:  # a calibration from before the layout probe: the eager-launch model stands
        return dev
    return replace(dev, layout_overhead_s=layout_overheads(rec.get("layout_probe_single") or [], probe, dev))


def _gpu_host_model(rec: dict) -> dict:
    """The host side of a GPU's step from its calibration: the cost per operator inside a training step and the
    step's fixed host cost (the 1-layer probe's step less its operators), the kernels' floor and the overlap
    from the priors (``resources/hardware.yaml``), which the calibration does not measure."""
    from companion.energy import hardware

    pri = hardware.gpu_priors(rec["device_name"])
    ops = rec.get("op_counts") or {}
    step_1 = (ops.get("step_s") or {}).get("1")
    per_op, count_1 = ops.get("per_op_s"), (ops.get("counts") or {}).get("1")
    host_step = (
        max(float(step_1) - float(per_op) * float(count_1), 0.0)
        if step_1 and per_op and count_1
        else float(pri["host_step_s"])
    )
    return {
        # a calibration times one machine: where a layout leaves it, or leaves the GPUs its board's bridges join,
        # the links' bandwidths are the priors'
        **_link_priors(pri),
        "host_device_overlap_p": float(pri["host_device_overlap_p"]),
        "host_step_s": host_step,
        "kernels_per_op": float(pri["kernels_per_op"]),
        "kernel_floor_s": float(pri["kernel_floor_s"]),
        "ops_counted_autocast": bool(ops.get("autocast", False)),
    }


def _link_priors(pri: dict) -> dict:
    """A board's links beyond its node's own collectives, from its priors (``hardware.gpu_priors``): devices per
    node and the network's bandwidth, the devices its fast links join and PCIe's bandwidth between such groups."""
    cross = pri.get("cross_link_beta_gbs")
    return {
        "gpus_per_node": int(pri["gpus_per_node"]),
        "internode_beta_bytes_per_s": float(pri["internode_beta_gbs"]) * 1e9,
        "link_group": int(pri.get("link_group_gpus") or 0),
        "cross_link_beta_bytes_per_s": None if cross is None else float(cross) * 1e9,
    }


def roofs_from_spec(device: str, precision: str) -> DeviceRoofs:
    """Prior roofs of a device from the hardware table: spec-sheet peaks and TDP times the efficiency and
    power priors cited there (``priors`` in resources/hardware.yaml)."""
    from companion.energy import hardware
    from companion.errors import ConfigError

    spec = hardware.device_spec(device)
    pri = hardware.gpu_priors(device)
    if spec.get("bandwidth_tbs") == "measure":
        raise ConfigError(
            f"device {device!r} has no spec-sheet roofs; run `companion calibrate --device cpu` "
            "for the calibrated tier"
        )
    peak = hardware.peak_flops_per_s(device, precision)
    tdp = float(spec.get("tdp_w") or 0.0)
    idle = float(spec.get("hot_idle_w") or spec.get("idle_w") or pri["idle_fraction_of_tdp"] * tdp)
    return DeviceRoofs(
        name=device,
        gemm_peak_flops_per_s=pri["gemm_efficiency"] * peak,
        gemm_half_dim=pri["gemm_half_dim"],
        bandwidth_bytes_per_s=pri["bandwidth_efficiency"] * hardware.bandwidth_bytes_per_s(device),
        launch_s=pri["host_s_per_op"],
        ops_per_layer=float(pri["ops_per_layer"]),
        ops_per_step=float(pri["ops_per_step"]),
        host_step_s=pri["host_step_s"],
        kernels_per_op=pri["kernels_per_op"],
        kernel_floor_s=pri["kernel_floor_s"],
        host_device_overlap_p=float(pri["host_device_overlap_p"]),
        collective_alpha_s=pri["collective_alpha_s"],
        collective_beta_bytes_per_s=pri["collective_beta_gbs"] * 1e9,
        **_link_priors(pri),
        shared_node=False,
        overlap=True,
        idle_w=idle,
        loaded_w=pri["loaded_fraction_of_tdp"] * tdp,
        power_measured=False,
        tier="prior",
        sources={"spec": spec.get("sources"), "priors": pri.get("sources")},
    )


def gpu_prior_values(device: str, precision: str) -> dict:
    """The prior tier's value of each quantity a GPU calibration measures: what a quantity of the calibration
    that failed its checks falls back to (``companion.energy.calibration``)."""
    dev = roofs_from_spec(device, precision)
    return {
        "gemm": {"gemm_peak_flops_per_s": dev.gemm_peak_flops_per_s, "gemm_half_dim": dev.gemm_half_dim},
        "bandwidth": {"bandwidth_bytes_per_s": dev.bandwidth_bytes_per_s},
        "elementwise": {"elementwise_bytes_per_s": None},
        "optimizer": {"optimizer_bytes_per_s": None},
        "attention": {"attention_s_per_score": {}},
        "op_counts": {
            "launch_s": dev.launch_s,
            "host_step_s": dev.host_step_s,
            "ops_per_layer": dev.ops_per_layer,
            "ops_per_step": dev.ops_per_step,
            "ops_counted_autocast": False,
        },
        "launch": {"launch_s": dev.launch_s},
        "power": {"idle_w": dev.idle_w, "loaded_w": dev.loaded_w, "power_measured": False},
        # a calibration on one GPU measures no collective: NCCL's latency and bandwidth of the board's node
        "collectives": {
            "collective_alpha_s": dev.collective_alpha_s,
            "collective_alpha_by_world_s": {},
            "collective_beta_bytes_per_s": dev.collective_beta_bytes_per_s,
        },
    }


def proxy_roofs(dev: DeviceRoofs) -> dict:
    """``dev``'s compute and memory roofs as the proxies take them (``tables.proxies_frame``), with where they
    come from."""
    how = (
        f"calibration data/devices/{dev.name}.json ({dev.sources.get('calibration')})"
        if dev.tier == "calibrated"
        else str(dev.sources.get("roofs", dev.tier))
    )
    return {
        "peak_flops_per_s": dev.gemm_peak_flops_per_s,
        "bandwidth_bytes_per_s": dev.bandwidth_bytes_per_s,
        "method": how,
    }
