import torch

from companion.runs.config import ModelConfig, build_run
from companion.runs.model import build_model, parameter_count


def test_random_bert_has_the_requested_shape():
    cfg = ModelConfig(layers=3, hidden=96, heads=6, ffn=200, vocab=1000, max_positions=128, num_labels=3)
    model = build_model(cfg)
    assert len(model.bert.encoder.layer) == 3
    assert model.bert.encoder.layer[0].intermediate.dense.weight.shape == (200, 96)
    assert model.classifier.out_features == 3
    h, f, v, p, L = 96, 200, 1000, 128, 3
    per_layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    expected = (v + p + 2) * h + 2 * h + L * per_layer + (h * h + h) + (h * 3 + 3)
    assert parameter_count(model) == expected


def test_seeded_builds_are_identical_on_every_rank():
    torch.manual_seed(3)
    a = build_model(ModelConfig(layers=1, hidden=32, heads=2, vocab=100))
    torch.manual_seed(3)
    b = build_model(ModelConfig(layers=1, hidden=32, heads=2, vocab=100))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_local_checkpoint_loads_real_weights(minilm_path):
    from safetensors.torch import load_file

    cfg = build_run({"checkpoint": "all-MiniLM-L6-v2", "seq_len": 128})
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.heads, cfg.model.ffn) == (6, 384, 12, 1536)
    assert "-ckpt-" in cfg.run_id
    model = build_model(cfg.model)
    saved = load_file(str(minilm_path / "model.safetensors"))
    key = next(k for k in saved if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert torch.equal(model.bert.encoder.layer[0].attention.self.query.weight, saved[key])
