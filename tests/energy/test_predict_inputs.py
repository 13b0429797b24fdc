"""`companion predict` on bad input: one line each, no traceback; warnings for inputs outside the fit
(vocab and precision included); strict JSON; corrupt fit artifacts named, and skipped when searching."""

import json
import math

import pytest

from companion.cli import main
from companion.energy.fit import FittedModel, fit_all
from companion.energy.predict import find_fit, make_plan, predict
from companion.errors import ConfigError
from companion.runs.records import write_json
from test_fit_faults import frame

BASE = [
    "predict",
    "--layers",
    "4",
    "--hidden",
    "512",
    "--heads",
    "8",
    "--seq-len",
    "256",
    "--batch-size",
    "32",
    "--device",
    "H100",
]


@pytest.fixture(scope="module")
def fit_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("derived")
    return write_json(root / "h100" / "fit.json", fit_all(frame(), n_boot=20))


def one_error(capsys, argv, fit_path=None) -> str:
    rc = main(argv + (["--fit", str(fit_path)] if fit_path else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize(
    "amount",
    [
        ["--tokens", "nan"],
        ["--tokens", "inf"],
        ["--examples", "-5"],
        ["--examples", "1000", "--epochs", "nan"],
        ["--tokens", "0"],
    ],
)
def test_non_finite_or_non_positive_amounts(capsys, fit_path, amount):
    assert "must be a finite number above 0" in one_error(capsys, BASE + amount, fit_path)


@pytest.mark.parametrize("level", ["-1", "0", "1", "1.5", "nan"])
def test_level_outside_zero_one(capsys, fit_path, level):
    line = one_error(capsys, BASE + ["--examples", "1000", "--level", level], fit_path)
    assert "--level" in line and "strictly between 0 and 1" in line


def test_model_with_an_architecture_flag_is_a_conflict(capsys, fit_path):
    line = one_error(
        capsys,
        ["predict", "--model", "bert-base", "--layers", "4", "--examples", "1000", "--device", "H100"],
        fit_path,
    )
    assert "--model bert-base fixes the architecture" in line and "--layers" in line


def test_malformed_fit_files_are_named(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"device_name": "H100", "usl": [')
    assert f"fit artifact {broken} is corrupt" in one_error(capsys, BASE + ["--examples", "1000"], broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"device_name": "H100"}')
    assert f"fit artifact {wrong} is not a fit" in one_error(capsys, BASE + ["--examples", "1000"], wrong)
    with pytest.raises(ConfigError, match="is not a fit"):
        FittedModel.load(wrong)


def test_one_corrupt_fit_does_not_break_other_devices(fit_path, capsys):
    root = fit_path.parent.parent
    (root / "other").mkdir(exist_ok=True)
    (root / "other" / "fit.json").write_text("{truncated")
    try:
        assert find_fit("H100", root=root) == fit_path
        assert "skipping the corrupt fit artifact" in capsys.readouterr().err
        with pytest.raises(ConfigError, match="no fitted law for device 'A100'"):
            find_fit("A100", root=root)
    finally:
        (root / "other" / "fit.json").unlink()


def test_vocab_and_precision_outside_the_fit_warn_on_stderr(capsys, fit_path):
    # the fit's runs used vocab 4096 and bf16; the default vocab is BERT's 30522
    assert main(BASE + ["--examples", "1000", "--precision", "fp32", "--fit", str(fit_path)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert any("vocab = 30522 lies outside the fitted range [4096, 4096]" in w for w in warnings)
    assert any("precision fp32 was not measured" in w for w in warnings)
    assert "warning" not in captured.out  # one line each, on stderr
    p = predict(
        make_plan(layers=4, hidden=512, heads=8, seq_len=256, examples=1000, device="H100", vocab=4096),
        FittedModel.load(fit_path),
    )
    assert not [w for w in p["warnings"] if "vocab" in w or "precision" in w]


def test_json_output_is_strict(capsys, fit_path, monkeypatch):
    from companion.energy import predict as predict_module

    real = predict_module.predict

    def with_nan(*a, **k):
        out = real(*a, **k)
        out["eta"] = math.nan
        return out

    monkeypatch.setattr(predict_module, "predict", with_nan)
    assert main(BASE + ["--examples", "1000", "--json", "--fit", str(fit_path)]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and json.loads(text)["eta"] is None


def test_the_fits_flags_on_the_law_used_reach_the_prediction(tmp_path):
    art = fit_all(
        frame(shapes=[(2, 256, 4), (4, 512, 8), (6, 512, 8)], seqs=(128,), layouts=[(1, 1)]),
        laws=["roofline_power_law", "tokens_linear"],
        n_boot=5,
    )
    fitted = FittedModel(art, tmp_path / "fit.json")
    plan = make_plan(layers=4, hidden=512, heads=8, seq_len=128, examples=1000, device="H100", vocab=4096)
    warnings = predict(plan, fitted)["warnings"]
    assert any(w.startswith("fit: law roofline_power_law has as many coefficients") for w in warnings)
    assert not any("tokens_linear" in w for w in warnings)  # a flag on another law is not this prediction's


def test_execution_and_engine_are_planned_refused_where_unknown_and_warned_where_unmodelled(capsys, tmp_path):
    from companion.energy import opmodel
    from companion.energy.predict import predict_tiered

    assert "fitted on eager runs" in one_error(
        capsys, BASE + ["--tokens", "1e6", "--execution", "compile", "--law", "x"]
    )
    # CUDA graphs need a GPU; compiled steps run on one device only (the run's own validation)
    with pytest.raises(ConfigError, match="needs device='cuda'"):
        make_plan(model="bert-tiny", tokens=1e6, device="cpu", execution="cudagraphs")
    with pytest.raises(ConfigError, match="one device only"):
        make_plan(model="bert-base", tokens=1e6, device="H100", tp=2, execution="compile")
    plan = make_plan(
        model="bert-base", tokens=1e6, device="H200", execution="cudagraphs", engine="accelerate"
    )
    got = predict_tiered(plan, tier="prior", devices_root=tmp_path)
    eager = predict_tiered(
        make_plan(model="bert-base", tokens=1e6, device="H200"), tier="prior", devices_root=tmp_path
    )
    # the prior tier has no execution probe: predicted as eager, and it says so
    assert got["step_s"] == pytest.approx(eager["step_s"])
    assert any("not probed" in w for w in got["warnings"]) and any(
        "'accelerate'" in w for w in got["warnings"]
    )
    assert not [w for w in eager["warnings"] if "execution" in w or "engine" in w]
    # the compiled step's measured gain is quoted from the shipped masked modes runs, not typed
    from companion.energy.reference import compiled_ratio

    measured = compiled_ratio("H200")
    assert (
        measured["seq_len"] == 512 and 0.6 < measured["ratio"] < 1.0
    )  # Inductor's fusion: shorter than eager
    assert any(
        f"on an H200 a compiled step took {measured['ratio']:.2f}x eager's at 512 tokens" in w
        and "without Inductor's fusion" in w
        for w in got["warnings"]
    )
    assert compiled_ratio("H100") is None  # no masked set measured there
    assert compiled_ratio("H200", root=tmp_path) is None
    # SDPA left out of the compiled graphs: the fused kernel the model times, and what it leaves out said instead
    kept = predict_tiered(
        make_plan(model="bert-base", tokens=1e6, device="H200", execution="compile", attn="sdpa-nocompile"),
        tier="prior",
        devices_root=tmp_path,
    )
    assert any(
        "'compile+sdpa-nocompile' was not probed" in w and "graph breaks around each layer's attention" in w
        for w in kept["warnings"]
    )
    # eager attention materialises the scores: a longer step than the fused kernel's at 512 tokens
    at512 = {
        attn: predict_tiered(
            make_plan(model="bert-base", tokens=1e6, seq_len=512, device="H200", attn=attn),
            tier="prior",
            devices_root=tmp_path,
        )["step_s"]
        for attn in ("sdpa", "eager")
    }
    assert at512["eager"] > at512["sdpa"]
    with pytest.raises(SystemExit) as refused:  # argparse's choices: one line naming the flag and its values
        main(BASE + ["--tokens", "1e6", "--attn", "flash"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "--attn" in err and "sdpa-nocompile" in err
    assert opmodel.unprobed(opmodel.roofs_from_spec("H200", "bf16"), ["eager", "compile"]) == ["compile"]


def test_a_plan_with_attention_left_out_is_priced_with_its_own_probe_entry():
    from dataclasses import replace

    from companion.energy import opmodel
    from companion.energy.predict import _execution_warnings, plan_rows

    plan = make_plan(model="bert-base", tokens=1e6, device="H100", execution="compile", attn="sdpa-nocompile")
    rows = plan_rows([plan], "bf16", "device")
    assert rows.attn.tolist() == ["sdpa-nocompile"]
    found = {"host_step_s": 1e-3, "kernels_step": 1.0, "kernels_layer": 1.0}
    scales = {
        "compile": {**found, "host_layer_s": 0.5e-3},
        "compile+sdpa-nocompile": {**found, "host_layer_s": 2e-3},
    }
    dev = replace(opmodel.roofs_from_spec("H100", "bf16"), execution_scale=scales)
    terms = opmodel.operator_frame(rows, dev)
    assert terms.layer_fixed_s.iloc[0] == pytest.approx(2e-3 * plan.layers)
    assert not [w for w in _execution_warnings(plan, dev) if "not probed" in w]
    # probed whole only: the whole-model host time, and the plan is told what that leaves out
    whole = replace(dev, execution_scale={"compile": scales["compile"]})
    assert opmodel.operator_frame(rows, whole).layer_fixed_s.iloc[0] == pytest.approx(0.5e-3 * plan.layers)
    said = [w for w in _execution_warnings(plan, whole) if "not probed" in w]
    assert len(said) == 1 and "whole-model compile's host time" in said[0] and "graph breaks" in said[0]


def test_epochs_with_tokens_is_a_conflict_and_examples_default_to_one_epoch(capsys, fit_path):
    """--epochs counts passes over --examples; beside --tokens (the whole amount) it would be ignored silently."""
    line = one_error(capsys, BASE + ["--tokens", "128000", "--epochs", "3"], fit_path)
    assert "--epochs counts passes over --examples" in line
    one = make_plan(layers=4, hidden=512, heads=8, seq_len=256, batch_size=32, examples=3200, device="H100")
    three = make_plan(
        layers=4, hidden=512, heads=8, seq_len=256, batch_size=32, examples=3200, epochs=3, device="H100"
    )
    assert (one.steps, three.steps) == (100, 300)


def test_an_interval_s_level_is_printed_as_given(capsys, fit_path):
    from companion.energy.predict import level_label

    assert [level_label(x) for x in (0.9, 0.57, 0.999, 0.5)] == ["90%", "57%", "99.9%", "50%"]
    assert main(BASE + ["--examples", "1000", "--level", "0.57", "--fit", str(fit_path)]) == 0
    assert "[57% interval" in capsys.readouterr().out


def test_plan_json_is_strict_whatever_its_intervals(capsys, monkeypatch):
    """An interval with no upper bound (a level above what a tier's errors can say) is null in --json, as in
    `companion predict --json`, never a bare Infinity that strict parsers refuse."""
    from companion.energy import predict as pr

    real = pr.plan_layouts

    def unbounded(*a, **k):
        out = real(*a, **k)
        out["layouts"][0]["energy_kwh_interval"][1] = math.inf
        return out

    monkeypatch.setattr(pr, "plan_layouts", unbounded)
    argv = ["plan", "--model", "bert-tiny", "--examples", "1000", "--device", "H100", "--devices", "2"]
    assert main([*argv, "--tier", "prior", "--json"]) == 0
    got = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert got["layouts"][0]["energy_kwh_interval"][1] is None


def test_a_gpu_plan_s_power_is_said_to_be_every_gpu_s(tmp_path):
    """A plan on several GPUs predicts the whole job's energy: its mean power is theirs together, and says so."""
    from companion.energy.predict import format_tiered, predict_tiered

    req = dict(model="bert-base", seq_len=128, batch_size=32, examples=100000, device="H100")
    one = predict_tiered(make_plan(**req), derived_root=tmp_path, devices_root=tmp_path)
    four = predict_tiered(make_plan(**req, dp=4, devices=4), derived_root=tmp_path, devices_root=tmp_path)
    assert "(all" not in format_tiered(one) and "mean power" in format_tiered(one)
    assert f"mean power {four['mean_power_w']:.4g} W (all 4 GPUs)" in format_tiered(four)
    assert four["mean_power_w"] > 2 * one["mean_power_w"]
