"""A profile is validated completely before anything is launched: one ConfigError, no record, no traceback.

Includes a property-style test: random subsets of malformed fields (a fixed-seed generator) never produce
a traceback or a record.
"""

import random

import pytest
import yaml

from companion.cli import main
from companion.errors import ConfigError
from companion.runs.profiles import load_profile

BASE = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "vocab": 256,
    "max_positions": 64,
    "seq_len": 16,
    "batch_size": 4,
    "meter": "none",
    "warmup_steps": 1,
    "window_steps": 2,
    "min_windows": 2,
    "max_steps": 4,
}

# (field, malformed value, what the one-line error must name)
MALFORMED = [
    ("meter", "nvml", "meter='nvml'"),
    ("meter", "wattmeter", "meter="),
    ("country", "XYZ", "country='XYZ'"),
    ("country", 12, "country=12"),
    ("seed", "abc", "seed='abc'"),
    ("seed", 1.5, "seed=1.5"),
    ("lr", "fast", "lr='fast'"),
    ("lr", float("inf"), "lr=inf"),
    ("lr", float("nan"), "lr=nan"),
    ("lr", -1.0, "lr=-1.0"),
    ("dropout", "x", "dropout='x'"),
    ("dropout", 1.5, "dropout=1.5"),
    ("warmup_steps", "3", "warmup_steps='3'"),
    ("warmup_steps", 2.5, "warmup_steps=2.5"),
    ("max_time_s", float("nan"), "max_time_s=nan"),
    ("target_rel_ci", "tight", "target_rel_ci='tight'"),
    ("lengths", {"kind": "histogram", "bins": [[8, float("inf")], [16, 1.0]]}, "lengths.bins"),
    ("lengths", {"kind": "histogram", "bins": "many"}, "lengths.bins"),
    ("lengths", {"kind": "zipf"}, "lengths.kind='zipf'"),
    ("lengths", {"kind": "uniform", "min_len": "short"}, "lengths.min_len='short'"),
    ("layers", 0, "layers=0"),
    ("layers", "two", "layers='two'"),
    ("hidden", 31, "hidden=31 is not divisible by heads"),
    ("batch_size", 0, "batch_size=0"),
    ("seq_len", 4096, "seq_len=4096 is above max_positions"),
    ("precision", "fp8", "precision='fp8'"),
    ("attn", 3, "attn=3"),
    ("source", "/no/such/reviews.csv", "source='/no/such/reviews.csv'"),
    ("colour", "blue", "unknown field(s) colour"),
]


def write_profile(path, fields: dict, where: str = "base") -> None:
    spec = {"device": "cpu", "base": dict(BASE), "groups": [{"name": "g", "vary": {"layers": [1]}}]}
    if where == "base":
        spec["base"].update(fields)
    else:  # a group's `set`
        spec["groups"][0]["set"] = fields
    spec["groups"][0]["vary"] = {} if "layers" in fields else {"layers": [1]}
    path.write_text(yaml.safe_dump(spec))


@pytest.mark.parametrize("field, value, named", MALFORMED, ids=[f"{f}={v!r}" for f, v, _ in MALFORMED])
def test_each_malformed_field_is_one_error_naming_it(tmp_path, capsys, field, value, named):
    profile = tmp_path / "bad.yaml"
    write_profile(profile, {field: value})
    with pytest.raises(ConfigError) as err:
        load_profile(str(profile))
    assert named in str(err.value) and "\n" not in str(err.value)
    out = tmp_path / "runs"
    assert main(["sweep", "--profile", str(profile), "--out", str(out), "--quiet"]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("error: ") and named in stderr[0]
    assert not out.exists()  # found before anything was launched or written


def test_run_level_mistakes_on_the_command_line_are_one_line(tmp_path, capsys):
    out = tmp_path / "runs"
    for argv, named in (
        [["--meter", "nvml"], "meter='nvml'"],
        [["--country", "XYZ"], "country='XYZ'"],
        [["--lr", "inf"], "lr=inf"],
        [["--dropout", "nan"], "dropout=nan"],
    ):
        assert main(["run", "--layers", "1", "--hidden", "32", "--heads", "2", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and named in err and "\n" not in err
    assert not out.exists()


def test_random_subsets_of_malformed_fields_never_give_a_traceback_or_a_record(tmp_path, capsys):
    rng = random.Random(20260611)
    out = tmp_path / "runs"
    for trial in range(60):
        picks = rng.sample(MALFORMED, rng.randint(1, 4))
        fields = {}
        for field, value, _ in picks:
            fields[field] = value
        profile = tmp_path / f"p{trial}.yaml"
        write_profile(profile, fields, where=rng.choice(["base", "set"]))
        try:
            load_profile(str(profile))
        except ConfigError as exc:
            assert "\n" not in str(exc)
        else:
            pytest.fail(f"trial {trial}: {fields} was accepted")
        rc = main(["sweep", "--profile", str(profile), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), (trial, fields, err)
        assert not out.exists() or not list(out.rglob("*.json")), (trial, fields)
