"""The model registry is the one place a model is named: the validation, the tables, the figures and the verdict
read it."""

from companion.energy import registry
from companion.energy.validation import model_verdict
from companion.report import figures, numbers


def test_every_scored_model_has_its_words_and_kind_from_the_registry():
    built = registry.validated_models(None)
    assert list(built) == [s.name for s in registry.SPECS if s.build is not None]
    assert list(built)[0] == registry.PRIMARY and registry.PAPER in built
    for name, model in built.items():
        spec = registry.REGISTRY[name]
        assert spec.kind in registry.KINDS
        assert model.uses_measured_time == spec.uses_measured_time  # the spec's kind says what the model does
        assert numbers.model_label(name) == spec.label and figures.MODEL_WORDS[name] == spec.short
    assert set(registry.PRE_RUN_BASELINES) == {"flops_power_law", "tokens_linear"}
    assert figures.MODEL_KIND_ORDER == list(registry.KINDS)


def test_a_baseline_added_to_the_registry_is_scored_and_judged_as_one(monkeypatch):
    import pandas as pd

    from companion.energy import models as m

    extra = registry.ModelSpec(
        "tokens_squared",
        "tokens-squared (baseline)",
        "tokens²",
        registry.BASELINE_KIND,
        lambda dev: m.LawModel("tokens_squared", "tokens²", baseline=True, law="flops_power_law"),
    )
    monkeypatch.setattr(registry, "SPECS", (*registry.SPECS, extra))
    monkeypatch.setattr(registry, "REGISTRY", {**registry.REGISTRY, extra.name: extra})
    monkeypatch.setattr(registry, "PRE_RUN_BASELINES", (*registry.PRE_RUN_BASELINES, extra.name))
    assert "tokens_squared" in registry.validated_models(None)
    assert (
        registry.label("tokens_squared") == "tokens-squared (baseline)"
        and registry.short("tokens_squared") == "tokens²"
    )
    # the verdict's best pre-run baseline is found among the registry's baselines, the new one included
    rows = [
        {"model": name, "target": "time", "mape_pct": mape, "split": "pooled"}
        for name, mape in (("operator_roofline", 5.0), ("flops_power_law", 30.0), ("tokens_squared", 20.0))
    ]
    pooled = pd.DataFrame(rows)
    by_split = pd.DataFrame(
        columns=[
            "model",
            "target",
            "split",
            "mape_pct",
            "n",
            "n_unbounded",
            "coverage_pct",
            "coverage_lo_pct",
            "coverage_hi_pct",
            "noise_floor_pct",
            "runs_floor_pct",
            "exact_floor_pct",
        ]
    )
    t = model_verdict(pooled, by_split)["targets"]["time"]
    assert t["best_baseline"] == "tokens_squared" and t["beats_half_best_baseline"] is True
