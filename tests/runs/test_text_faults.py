"""A user's text file: bad rows are errors naming the file and the line, labels are normalised, a BOM is
ignored, and too many classes for num_labels fails before anything is launched."""

import json

import pytest

from companion.errors import ConfigError
from companion.runs.config import DataConfig
from companion.runs.data import check_text_source, normalise_label, read_text_file
from companion.runs.profiles import load_profile


def test_null_or_empty_text_is_an_error_naming_the_row(tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_text(
        json.dumps({"text": "fine", "label": 1}) + "\n" + json.dumps({"text": None, "label": 0}) + "\n"
    )
    with pytest.raises(ConfigError, match=r"r.jsonl' line 2: text=None is missing or empty"):
        read_text_file(src, "text", "label")
    csv = tmp_path / "r.csv"
    csv.write_text("text,label\nfine,1\n,0\n")
    with pytest.raises(ConfigError, match=r"r.csv' line 3: text='' is missing or empty"):
        read_text_file(csv, "text", "label")


def test_a_row_without_a_label_is_an_error_naming_the_row(tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"text": "a", "label": 1}) + "\n\n" + json.dumps({"text": "b"}) + "\n")
    with pytest.raises(ConfigError, match=r"line 3: label is missing or empty"):
        read_text_file(src, "text", "label")
    csv = tmp_path / "r.csv"
    csv.write_text("text,label\na,1\nb\n")  # a short row: DictReader gives the label as None
    with pytest.raises(ConfigError, match=r"r.csv' line 3: label is missing"):
        read_text_file(csv, "text", "label")


def test_broken_json_lines_are_named(tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_text('{"text": "a", "label": 1}\n{"text": "b", "lab\n')
    with pytest.raises(ConfigError, match=r"r.jsonl' line 2 is not valid JSON"):
        read_text_file(src, "text", "label")


def test_labels_are_normalised(tmp_path):
    assert normalise_label("1") == normalise_label("1.0") == normalise_label(1) == normalise_label(1.0) == "1"
    assert normalise_label(" pos ") == "pos" and normalise_label("") is None and normalise_label(None) is None
    src = tmp_path / "r.jsonl"
    src.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"text": "a", "label": "1"},
                {"text": "b", "label": 1.0},
                {"text": "c", "label": 0},
                {"text": "d", "label": "0.0"},
            ]
        )
    )
    rows = read_text_file(src, "text", "label")
    assert {label for _, label in rows} == {"0", "1"}
    assert check_text_source(DataConfig(source=str(src)), num_labels=2) == 2


def test_a_utf8_bom_in_the_header_is_ignored(tmp_path):
    src = tmp_path / "bom.csv"
    src.write_bytes("\ufefftext,label\ngood,1\nbad,0\n".encode("utf-8"))
    assert read_text_file(src, "text", "label") == [("good", "1"), ("bad", "0")]


def test_more_classes_than_num_labels_fails_before_launch(tmp_path, minilm_path):
    src = tmp_path / "three.csv"
    src.write_text("text,label\na,0\nb,1\nc,2\n")
    with pytest.raises(ConfigError, match=r"has 3 classes \(0, 1, 2\) but num_labels=2; set num_labels to 3"):
        check_text_source(DataConfig(source=str(src)), num_labels=2)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"device: cpu\nbase: {{layers: 1, hidden: 32, heads: 2, seq_len: 16, tokenizer: {minilm_path}, "
        f"source: {src}}}\ngroups:\n  - name: g\n"
    )
    with pytest.raises(ConfigError, match="num_labels=2; set num_labels to 3"):
        load_profile(str(profile))
    profile.write_text(profile.read_text().replace("seq_len: 16", "seq_len: 16, num_labels: 3"))
    assert len(load_profile(str(profile)).runs) == 1


def test_a_text_source_needs_a_tokenizer_before_launch(tmp_path):
    src = tmp_path / "two.csv"
    src.write_text("text,label\na,0\nb,1\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"device: cpu\nbase: {{layers: 1, hidden: 32, heads: 2, seq_len: 16, source: {src}}}\n"
        "groups:\n  - name: g\n"
    )
    with pytest.raises(ConfigError, match="needs a tokenizer"):
        load_profile(str(profile))
