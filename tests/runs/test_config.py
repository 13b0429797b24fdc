import pytest

from companion.errors import ConfigError
from companion.runs.config import Layout, LengthDist, RunConfig, build_run, parse_lengths


@pytest.mark.parametrize(
    "flat, field, fix",
    [
        ({"hidden": 130, "heads": 4}, "hidden=130", "choose heads"),
        ({"heads": 4, "tp": 3}, "heads=4", "pick tp"),
        ({"seq_len": 1024, "max_positions": 512}, "seq_len=1024", "raise max_positions"),
        ({"batch_size": 6, "dp": 4}, "batch_size=6", "multiple of 4"),
        ({"checkpoint": "/does/not/exist"}, "checkpoint=", "local Hugging Face BERT checkpoint"),
        ({"layers": 0}, "layers=0", "set layers to 1 or more"),
        ({"precision": "fp8"}, "precision=", "fp32"),
        ({"country": "United States"}, "country=", "alpha-3"),
        ({"colour": "red"}, "unknown field(s) colour", "known fields"),
        (
            {"lengths": {"kind": "histogram", "bins": [[64, 1.0]]}, "seq_len": 32},
            "lengths.bins",
            "raise seq_len",
        ),
        ({"seed": -1}, "seed=-1", "[0, 2**32)"),
        ({"seed": 2**64}, "seed=18446744073709551616", "[0, 2**32)"),
        ({"device_name": "a b/c"}, "device_name='a b/c'", "letters, digits"),
        ({"device_name": "../elsewhere"}, "device_name='../elsewhere'", "letters, digits"),
        (
            {"source": "reviews.csv", "tokenizer": "/does/not/exist"},
            "tokenizer='/does/not/exist'",
            "not a local tokenizer directory",
        ),
    ],
)
def test_invalid_configs_name_the_field_and_the_fix(flat, field, fix):
    with pytest.raises(ConfigError) as exc:
        build_run(flat)
    msg = str(exc.value)
    assert field in msg and fix in msg
    assert "\n" not in msg


def test_run_id_names_layout_and_hardware_and_changes_with_any_input():
    a = build_run(
        {
            "layers": 12,
            "hidden": 768,
            "heads": 12,
            "seq_len": 128,
            "batch_size": 32,
            "tp": 2,
            "dp": 4,
            "device_name": "H100",
            "precision": "bf16",
            "device": "cuda",
        }
    )
    assert a.run_id.startswith("L12-h768-a12-s128-b32_tp2-dp4@H100-bf16.")
    same = RunConfig.from_dict(a.to_dict())
    assert same == a and same.run_id == a.run_id
    for change in ({"lr": 2e-4}, {"max_time_s": 10.0}, {"seed": 1}):
        b = build_run({**_flat(a), **change})
        assert b.run_id != a.run_id


def _flat(cfg: RunConfig) -> dict:
    d = cfg.to_dict()
    flat = {**d["model"], **d["data"], **d["layout"], **d["protocol"]}
    flat.update({k: v for k, v in d.items() if not isinstance(v, dict)})
    flat["lengths"] = d["data"]["lengths"]
    return flat


def test_layouts():
    assert Layout(1, 1).mode == "single" and Layout(2, 1).mode == "tp"
    assert Layout(1, 4).mode == "fsdp" and Layout(2, 2).mode == "2d"
    assert Layout.parse("tp2-dp4") == Layout(2, 4)
    with pytest.raises(ConfigError, match="tp<T>-dp<D>"):
        Layout.parse("2x4")


def test_parse_lengths():
    assert parse_lengths("fixed") == LengthDist()
    assert parse_lengths("uniform:16") == LengthDist(kind="uniform", min_len=16)
    h = parse_lengths("hist:32=0.5,64=0.5")
    assert h.kind == "histogram" and h.bins == ((32, 0.5), (64, 0.5))
    with pytest.raises(ConfigError, match="hist:LEN=W"):
        parse_lengths("gaussian")


def test_histogram_lengths_roundtrip_through_dict():
    cfg = build_run({"seq_len": 64, "lengths": {"kind": "histogram", "bins": [[16, 1], [64, 3]]}})
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert "s64h2" in cfg.run_id


@pytest.mark.parametrize(
    "full, tag",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA L4", "L4"),
        ("Quadro RTX 8000", "RTX8000"),
    ],
)
def test_gpu_tags_match_the_hardware_table(full, tag):
    from companion.energy.hardware import device_spec
    from companion.runs.provenance import short_gpu_name

    assert short_gpu_name(full) == tag
    assert device_spec(tag)["tdp_w"] > 0


def test_every_run_flag_says_what_it_sets():
    """`companion run --help` describes each configuration flag, from the field's comment in runs/config.py."""
    from companion.runs.run_args import run_parser

    actions = [a for a in run_parser()._actions if a.option_strings and a.dest != "help"]
    assert len(actions) > 30
    undescribed = [a.option_strings[0] for a in actions if not a.help]
    assert undescribed == []
