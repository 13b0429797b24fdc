import numpy as np
import pytest

from companion.errors import ConfigError
from companion.runs.config import DataConfig, LengthDist
from companion.runs.data import (
    FIRST_CONTENT_ID,
    MARKERS_PER_CLASS,
    SyntheticTask,
    TextFileTask,
    collate,
    expected_token_counts,
    read_text_file,
    sample_lengths,
    shard,
    token_counts,
)


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert set(sample_lengths(LengthDist(), 64, 50, rng)) == {64}
    u = sample_lengths(LengthDist(kind="uniform", min_len=10), 64, 2000, rng)
    assert u.min() >= 10 and u.max() <= 64 and len(set(u)) > 40
    h = sample_lengths(LengthDist(kind="histogram", bins=((16, 3.0), (64, 1.0))), 64, 4000, rng)
    assert set(h) == {16, 64}
    assert abs((h == 16).mean() - 0.75) < 0.03


def test_dynamic_padding_counts_real_and_padded_tokens():
    cfg = DataConfig(seq_len=64, batch_size=4, lengths=LengthDist(kind="histogram", bins=((10, 1), (30, 1))))
    examples = SyntheticTask(cfg, vocab=256, num_labels=2, seed=0).global_batch(3)
    batch = collate(examples, pad_multiple=8)
    lengths = [len(e.input_ids) for e in examples]
    padded_len = -(-max(lengths) // 8) * 8
    assert batch.tensors["input_ids"].shape == (4, padded_len)
    assert batch.real_tokens == sum(lengths) == int(batch.tensors["attention_mask"].sum())
    assert batch.padded_tokens == 4 * padded_len
    # Over dp shards each shard pads on its own: never more padding than one global pad.
    counts = token_counts(examples, dp=2, pad_multiple=8, max_len=64)
    assert counts.real == sum(lengths) and counts.padded <= 4 * padded_len
    one = token_counts(lengths, dp=1, pad_multiple=8, max_len=64)
    assert one.padded == 4 * padded_len and one.attention_pairs == 4 * padded_len**2


def test_expected_token_counts():
    fixed = expected_token_counts(DataConfig(seq_len=128, batch_size=8))
    assert (fixed.real, fixed.padded, fixed.attention_pairs) == (1024, 1024, 8 * 128**2)
    hist = DataConfig(
        seq_len=128, batch_size=8, lengths=LengthDist(kind="histogram", bins=((16, 0.9), (128, 0.1)))
    )
    c = expected_token_counts(hist)
    # P(no long example in 8) = 0.9^8: padded length is 16 then, else 128 (2**18 lengths: to about a per cent,
    # three standard errors)
    assert c.padded == pytest.approx(8 * (0.9**8 * 16 + (1 - 0.9**8) * 128), rel=0.012)
    assert c.real == pytest.approx(8 * (0.9 * 16 + 0.1 * 128), rel=0.008)
    uniform = DataConfig(seq_len=128, batch_size=8, lengths=LengthDist(kind="uniform", min_len=16))
    assert expected_token_counts(uniform).real == pytest.approx(8 * (16 + 128) / 2, rel=0.003)


@pytest.mark.parametrize("dp", [1, 2, 3])
def test_expected_token_counts_shard_and_pad_each_batch_as_a_run_does(dp):
    """The Monte Carlo's batches, split over ``dp`` shards and padded at once, count what ``token_counts`` counts
    for each of those batches in turn."""
    cfg = DataConfig(
        seq_len=128,
        batch_size=7,
        lengths=LengthDist(kind="histogram", bins=((20, 0.6), (70, 0.3), (128, 0.1))),
    )
    got = expected_token_counts(cfg, dp, lengths=7 * 50, seed=3)
    drawn = sample_lengths(cfg.lengths, cfg.seq_len, 7 * 50, np.random.default_rng(3)).reshape(50, 7)
    each = [token_counts(b, dp, cfg.pad_multiple, cfg.seq_len) for b in drawn]
    assert (got.real, got.padded, got.attention_pairs) == tuple(
        round(np.mean([getattr(c, f) for c in each])) for f in ("real", "padded", "attention_pairs")
    )


def test_shards_are_disjoint_and_cover_the_batch():
    examples = SyntheticTask(DataConfig(seq_len=16, batch_size=8), 256, 2, 0).global_batch(0)
    parts = [shard(examples, r, 4) for r in range(4)]
    assert [e for p in parts for e in p] == examples


def test_synthetic_task_is_deterministic_and_learnable_by_markers():
    cfg = DataConfig(seq_len=64, batch_size=64)
    task = SyntheticTask(cfg, vocab=512, num_labels=2, seed=1)
    assert task.global_batch(5) == task.global_batch(5)
    assert task.global_batch(5) != task.global_batch(6)
    # A bag-of-markers rule classifies every example: the label is in the data.
    correct = 0
    for e in task.global_batch(0):
        counts = [
            sum(
                FIRST_CONTENT_ID + MARKERS_PER_CLASS * c <= t < FIRST_CONTENT_ID + MARKERS_PER_CLASS * (c + 1)
                for t in e.input_ids
            )
            for c in range(2)
        ]
        correct += int(np.argmax(counts) == e.label)
    assert correct >= 62


def test_vocab_too_small_for_task():
    with pytest.raises(ConfigError, match="vocab=8 is too small"):
        SyntheticTask(DataConfig(), vocab=8, num_labels=2, seed=0)


@pytest.mark.parametrize("name", ["reviews.jsonl", "reviews.csv"])
def test_text_file_with_local_tokenizer(fixtures, minilm_path, name):
    cfg = DataConfig(seq_len=32, batch_size=4, source=str(fixtures / name))
    task = TextFileTask(cfg, minilm_path, seed=0, vocab=30522)
    assert task.num_labels == 2 and len(task.examples) == 24
    batch = collate(task.global_batch(0), pad_id=task.pad_id)
    ids = batch.tensors["input_ids"]
    assert ids.shape[0] == 4 and ids.shape[1] <= 32
    assert ids[0, 0].item() == task.tokenizer.cls_token_id
    # Every example appears once per epoch.
    seen = [e for s in range(6) for e in task.global_batch(s)]
    assert sorted(map(str, seen)) == sorted(map(str, task.examples))


def test_text_file_errors(tmp_path, fixtures, minilm_path):
    with pytest.raises(ConfigError, match="has no field\\(s\\) sentence"):
        read_text_file(fixtures / "reviews.jsonl", "sentence", "label")
    with pytest.raises(ConfigError, match="does not exist"):
        DataConfig(source=str(tmp_path / "missing.csv"))
    cfg = DataConfig(seq_len=32, batch_size=4, source=str(fixtures / "reviews.csv"))
    with pytest.raises(ConfigError, match="set vocab >= 30522"):
        TextFileTask(cfg, minilm_path, seed=0, vocab=512)
