"""What the model is fed: classification batches with dynamic padding.

Padded tokens drive the cost of a step, so the distribution of real lengths is a parameter
(:class:`~companion.runs.config.LengthDist`) and every batch reports its real and padded token counts.

Two sources share one interface, ``global_batch(step) -> list[Example]``, deterministic in (seed, step):

* :class:`SyntheticTask`: a learnable bag-of-words task (each class has marker tokens), so the loss falls;
* :class:`TextFileTask`: a user's local CSV/JSONL file of text and labels, tokenised by a local tokenizer.

Data-parallel ranks take disjoint equal slices of the global batch; tensor-parallel ranks of one data
shard see the same slice.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from companion.errors import ConfigError
from companion.runs.config import DataConfig, LengthDist

PAD_ID, CLS_ID, SEP_ID = 0, 1, 2  # synthetic vocabulary: ids below FIRST_CONTENT_ID are special
FIRST_CONTENT_ID = 3
MARKERS_PER_CLASS = 8
MARKER_RATE = 0.25  # share of content positions that carry a marker of the example's class


@dataclass(frozen=True)
class Example:
    input_ids: tuple[int, ...]  # special tokens included
    label: int


@dataclass(frozen=True)
class Batch:
    """One rank's tensors plus token accounting for that rank's shard."""

    tensors: dict[str, "torch.Tensor"]  # noqa: F821  # input_ids, attention_mask, labels
    real_tokens: int  # tokens that are not padding
    padded_tokens: int  # sequences x padded length: what the model computes on


def sample_lengths(dist: LengthDist, seq_len: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` real lengths (special tokens included) drawn from ``dist``, each in [2, seq_len]."""
    if dist.kind == "fixed":
        return np.full(n, seq_len, dtype=np.int64)
    if dist.kind == "uniform":
        return rng.integers(dist.min_len, seq_len + 1, size=n)
    lengths = np.array([b[0] for b in dist.bins], dtype=np.int64)
    weights = np.array([b[1] for b in dist.bins], dtype=np.float64)
    return rng.choice(lengths, size=n, p=weights / weights.sum())


class SyntheticTask:
    """Random token sequences whose label is signalled by class-specific marker tokens."""

    def __init__(self, cfg: DataConfig, vocab: int, num_labels: int, seed: int):
        needed = FIRST_CONTENT_ID + MARKERS_PER_CLASS * num_labels + 1
        if vocab < needed:
            raise ConfigError(
                f"vocab={vocab} is too small for the synthetic task with {num_labels} labels; "
                f"use vocab >= {needed}"
            )
        self.cfg, self.vocab, self.num_labels, self.seed = cfg, vocab, num_labels, seed

    def global_batch(self, step: int) -> list[Example]:
        rng = np.random.default_rng([self.seed, step])
        n = self.cfg.batch_size
        lengths = sample_lengths(self.cfg.lengths, self.cfg.seq_len, n, rng)
        labels = rng.integers(0, self.num_labels, size=n)
        out = []
        for length, label in zip(lengths, labels):
            body = rng.integers(FIRST_CONTENT_ID, self.vocab, size=int(length) - 2)
            marks = rng.random(body.shape[0]) < MARKER_RATE
            first_marker = FIRST_CONTENT_ID + MARKERS_PER_CLASS * int(label)
            body[marks] = rng.integers(first_marker, first_marker + MARKERS_PER_CLASS, size=int(marks.sum()))
            out.append(Example((CLS_ID, *body.tolist(), SEP_ID), int(label)))
        return out


class TextFileTask:
    """A local CSV or JSONL file with a text column and a label column, tokenised once, up front."""

    def __init__(
        self, cfg: DataConfig, tokenizer_dir: str | Path, seed: int, vocab: int, num_labels: int | None = None
    ):
        from transformers import AutoTokenizer

        if num_labels is not None:
            check_text_source(cfg, num_labels)
        rows = read_text_file(Path(cfg.source), cfg.text_field, cfg.label_field)
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        if len(self.tokenizer) > vocab:
            raise ConfigError(
                f"tokenizer at {tokenizer_dir} has {len(self.tokenizer)} tokens but vocab={vocab}; "
                f"set vocab >= {len(self.tokenizer)} or use the checkpoint that matches the tokenizer"
            )
        classes = sorted({label for _, label in rows}, key=str)
        self.label_ids = {label: i for i, label in enumerate(classes)}
        self.num_labels = len(classes)
        enc = self.tokenizer([text for text, _ in rows], truncation=True, max_length=cfg.seq_len)
        self.examples = [
            Example(tuple(ids), self.label_ids[label]) for ids, (_, label) in zip(enc["input_ids"], rows)
        ]
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.cfg, self.seed = cfg, seed
        self._orders: dict[int, np.ndarray] = {}

    def global_batch(self, step: int) -> list[Example]:
        """Epoch-wise shuffled, deterministic in (seed, epoch); the last partial batch wraps around."""
        n, b = len(self.examples), self.cfg.batch_size
        out = []
        for i in range(step * b, (step + 1) * b):
            epoch, pos = divmod(i, n)
            if epoch not in self._orders:
                self._orders[epoch] = np.random.default_rng([self.seed, epoch]).permutation(n)
            out.append(self.examples[self._orders[epoch][pos]])
        return out


def read_text_file(path: Path, text_field: str, label_field: str) -> list[tuple[str, str]]:
    """(text, label) rows of a CSV (with a header) or JSONL file; labels kept as normalised strings.

    Bad rows are errors, never guesses: a row whose text is missing, null or empty, or whose label is missing
    or null, raises a ConfigError naming the file and the row (CSV: line number counting the header as line 1;
    JSONL: line number). A UTF-8 byte-order mark is ignored. Labels are normalised by :func:`normalise_label`,
    so "1", 1 and "1.0" are one class.
    """
    where = f"source={str(path)!r}"
    try:
        if path.suffix.lower() == ".csv":
            with path.open(newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                records = [(i + 2, r) for i, r in enumerate(reader)]
                fields = list(reader.fieldnames or [])
        else:
            records = []
            with path.open(encoding="utf-8-sig") as f:
                for n, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ConfigError(
                            f"{where} line {n} is not valid JSON ({exc.msg}); fix or remove that line"
                        ) from None
                    if not isinstance(obj, dict):
                        raise ConfigError(
                            f'{where} line {n} is not a JSON object; write one {{"text": ..., '
                            '"label": ...}} object per line'
                        )
                    records.append((n, obj))
            fields = list(records[0][1]) if records else []
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    if not records:
        raise ConfigError(f"{where} holds no rows; give a file with at least one example")
    missing = [k for k in (text_field, label_field) if k not in fields]
    if missing:
        raise ConfigError(
            f"{where} has no field(s) {', '.join(missing)}; its fields are "
            f"{', '.join(map(str, fields))}; set text_field/label_field accordingly"
        )
    rows = []
    for line, r in records:
        text, label = r.get(text_field), r.get(label_field)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(
                f"{where} line {line}: {text_field}={text!r} is missing or empty; give every row a "
                "text, or remove the row"
            )
        label = normalise_label(label)
        if label is None:
            raise ConfigError(
                f"{where} line {line}: {label_field} is missing or empty; give every row a label, "
                "or remove the row"
            )
        rows.append((text, label))
    return rows


def normalise_label(label) -> str | None:
    """A label as a class name: integral numbers in any spelling ("1", 1, "1.0", 1.0) become "1"; other strings
    are stripped; missing, null and empty labels are None."""
    if label is None or isinstance(label, (dict, list)):
        return None
    if isinstance(label, bool):
        return str(label).lower()
    if isinstance(label, (int, float)):
        return str(int(label)) if float(label).is_integer() else repr(float(label))
    text = str(label).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def check_text_source(cfg: DataConfig, num_labels: int) -> int:
    """Read a text source's rows and check its classes fit ``num_labels``; return the number of classes.

    Called when a profile or a run is loaded, so a bad file fails before anything is launched.
    """
    rows = read_text_file(Path(cfg.source), cfg.text_field, cfg.label_field)
    classes = sorted({label for _, label in rows}, key=str)
    if len(classes) > num_labels:
        shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
        raise ConfigError(
            f"source={cfg.source!r} has {len(classes)} classes ({shown}) but num_labels={num_labels}; "
            f"set num_labels to {len(classes)} (or more)"
        )
    return len(classes)


def check_sources(configs) -> None:
    """Check what every run's data needs before anything is launched: the synthetic task's vocabulary, a text
    source's tokenizer, rows and classes (each distinct source read once). Raises a ConfigError."""
    seen = set()
    for cfg in configs:
        d, m = cfg.data, cfg.model
        if d.source == "synthetic":
            SyntheticTask(d, m.vocab, m.num_labels, cfg.seed)
            continue
        if (d.tokenizer or m.checkpoint) is None:
            raise ConfigError(
                f"source={d.source!r} needs a tokenizer; set tokenizer to a local tokenizer directory "
                "or use a checkpoint that ships one"
            )
        key = (d.source, d.text_field, d.label_field, m.num_labels)
        if key not in seen:
            seen.add(key)
            check_text_source(d, m.num_labels)


def make_task(cfg: DataConfig, vocab: int, num_labels: int, seed: int, checkpoint: str | None):
    """The data source a run config asks for."""
    if cfg.source == "synthetic":
        return SyntheticTask(cfg, vocab, num_labels, seed)
    tokenizer_dir = cfg.tokenizer or checkpoint
    if tokenizer_dir is None:
        raise ConfigError(
            f"source={cfg.source!r} needs a tokenizer; set tokenizer to a local tokenizer directory "
            "or use a checkpoint that ships one"
        )
    return TextFileTask(cfg, tokenizer_dir, seed, vocab, num_labels)


def collate(
    examples: list[Example], pad_id: int = PAD_ID, pad_multiple: int = 8, max_len: int | None = None
) -> Batch:
    """Pad to the longest example (rounded up to ``pad_multiple``, capped at ``max_len``)."""
    import torch

    longest = max(len(e.input_ids) for e in examples)
    padded_len = padded_length(
        longest, pad_multiple, max_len if max_len is not None else longest + pad_multiple
    )
    ids = torch.full((len(examples), padded_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), padded_len), dtype=torch.long)
    for i, e in enumerate(examples):
        ids[i, : len(e.input_ids)] = torch.tensor(e.input_ids, dtype=torch.long)
        mask[i, : len(e.input_ids)] = 1
    labels = torch.tensor([e.label for e in examples], dtype=torch.long)
    return Batch(
        tensors={"input_ids": ids, "attention_mask": mask, "labels": labels},
        real_tokens=int(mask.sum()),
        padded_tokens=len(examples) * padded_len,
    )


def shard(examples: list, dp_rank: int, dp: int) -> list:
    """The ``dp_rank``-th of ``dp`` equal contiguous slices of the global batch."""
    per = len(examples) // dp
    return examples[dp_rank * per : (dp_rank + 1) * per]


def padded_length(longest, pad_multiple: int, max_len: int):
    """Length a batch whose longest example has ``longest`` tokens is padded to (an int; an array of them for an
    array of longest lengths)."""
    out = np.minimum(-(-np.asarray(longest) // pad_multiple) * pad_multiple, max_len)
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class TokenCounts:
    """Token accounting of one global batch (all data-parallel shards, each padded on its own)."""

    real: int  # tokens that are not padding
    padded: int  # sum over shards of sequences x padded length: the tokens the model computes on
    attention_pairs: int  # sum over shards of sequences x padded length^2: query-key pairs per head dim


def token_counts(lengths, dp: int, pad_multiple: int, max_len: int) -> TokenCounts:
    """Counts for a global batch given its examples' lengths (or Examples), split over ``dp`` shards."""
    if not isinstance(lengths, np.ndarray):
        lengths = [x if isinstance(x, (int, np.integer)) else len(x.input_ids) for x in lengths]
    return TokenCounts(
        *(int(x) for x in _batch_counts(np.asarray(lengths, dtype=np.int64), dp, pad_multiple, max_len))
    )


def _batch_counts(lengths: np.ndarray, dp: int, pad_multiple: int, max_len: int) -> tuple[np.ndarray, ...]:
    """Real tokens, padded tokens and attention pairs of global batches, ``lengths`` of shape (..., batch_size):
    each batch split over ``dp`` shards (``shard``'s equal contiguous slices, the rest dropped), each padded on
    its own."""
    per = lengths.shape[-1] // dp
    parts = lengths[..., : per * dp].reshape(*lengths.shape[:-1], dp, per)
    s = padded_length(parts.max(axis=-1), pad_multiple, max_len)
    return parts.sum(axis=(-2, -1)), (per * s).sum(axis=-1), (per * s * s).sum(axis=-1)


# lengths ``expected_token_counts`` draws: a uniform distribution's mean real length to about 0.1 %
SAMPLED_LENGTHS = 2**18


def expected_token_counts(
    cfg: DataConfig, dp: int = 1, lengths: int = SAMPLED_LENGTHS, seed: int = 0
) -> TokenCounts:
    """Mean counts per step under a length distribution: Monte Carlo over global batches holding about
    ``lengths`` sampled lengths in all, whatever the batch size (at least one batch), each split over ``dp``
    shards and padded as ``token_counts`` pads it."""
    if cfg.lengths.kind == "fixed":  # every sequence seq_len long: no list of batch_size lengths needed
        s = padded_length(cfg.seq_len, cfg.pad_multiple, cfg.seq_len)
        n = cfg.batch_size // dp * dp
        return TokenCounts(n * cfg.seq_len, n * s, n * s * s)
    batches = max(1, lengths // cfg.batch_size)
    drawn = sample_lengths(cfg.lengths, cfg.seq_len, batches * cfg.batch_size, np.random.default_rng(seed))
    counts = _batch_counts(drawn.reshape(batches, cfg.batch_size), dp, cfg.pad_multiple, cfg.seq_len)
    return TokenCounts(*(int(round(float(x.mean()))) for x in counts))
