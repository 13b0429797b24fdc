import json
import os

import pytest

from companion.errors import ConfigError
from companion.runs.records import (
    RecordExists,
    check_writable,
    existing_status,
    load_records,
    set_aside_failed,
    write_record,
)


def test_records_are_atomic_and_never_overwritten(tmp_path):
    path = write_record(tmp_path, {"run_id": "r1", "status": "ok", "x": 1})
    assert json.loads(path.read_text())["x"] == 1
    with pytest.raises(RecordExists):
        write_record(tmp_path, {"run_id": "r1", "status": "ok", "x": 2})
    assert json.loads(path.read_text())["x"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["r1.json"]  # no temporary file left behind


def test_status_and_retry_keeps_the_failed_record(tmp_path):
    write_record(tmp_path, {"run_id": "a", "status": "ok"})
    write_record(tmp_path, {"run_id": "b", "status": "failed"})
    assert existing_status(tmp_path, "a") == "ok" and existing_status(tmp_path, "b") == "failed"
    assert existing_status(tmp_path, "c") is None
    kept = set_aside_failed(tmp_path, "b", "20260101T000000")
    assert kept.is_file() and existing_status(tmp_path, "b") is None
    assert [r["run_id"] for r in load_records(tmp_path)] == ["a"]
    write_record(tmp_path, {"run_id": "b", "status": "ok"})
    assert existing_status(tmp_path, "b") == "ok"


def test_a_stale_temporary_file_is_not_a_record(tmp_path):
    (tmp_path / f".r9.{os.getpid() + 1}.tmp").write_text("{partial")
    assert load_records(tmp_path) == [] and existing_status(tmp_path, "r9") is None


def test_a_temporary_file_a_killed_writer_left_linked_to_its_record_cannot_rewrite_it(tmp_path):
    """A writer killed between the link and the clean-up leaves its temporary file as a second name of the record:
    no later write, in a process of the same pid or another, opens it again."""
    path = write_record(tmp_path, {"run_id": "r1", "status": "ok", "x": 1})
    for pid in (os.getpid(), os.getpid() + 1):
        os.link(path, tmp_path / f".r1.{pid}.tmp")
    with pytest.raises(RecordExists):
        write_record(tmp_path, {"run_id": "r1", "status": "failed", "x": 2})
    assert json.loads(path.read_text()) == {"run_id": "r1", "status": "ok", "x": 1}


def test_a_folder_without_hard_links_is_refused_before_anything_is_measured(tmp_path, monkeypatch):
    def no_links(src, dst, *a, **k):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(ConfigError, match="without hard links .*choose a folder on a local file system"):
        check_writable(tmp_path / "runs")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == []  # its probes removed


def test_records_set_aside_in_the_same_second_are_all_kept(tmp_path, capsys):
    from companion.runs.records import resume_status

    stamp = "20260101T000000"
    for k in (1, 2):  # a failed record set aside twice within one second
        write_record(tmp_path, {"run_id": "f", "status": "failed", "k": k})
        set_aside_failed(tmp_path, "f", stamp)
    kept = sorted((tmp_path / "failed").glob("*.json"))
    assert sorted(json.loads(p.read_text())["k"] for p in kept) == [1, 2]
    for text in ("{trunc", "[1]"):  # two corrupt records of one run, found in the same second
        (tmp_path / "c.json").write_text(text)
        assert resume_status(tmp_path, "c", stamp) is None
    assert sorted(p.read_text() for p in (tmp_path / "corrupt").glob("*.json")) == ["[1]", "{trunc"]
    assert "set aside" in capsys.readouterr().out


def test_a_record_that_cannot_be_read_is_named_and_never_set_aside_as_corrupt(tmp_path):
    from companion.runs.records import resume_status

    (tmp_path / "d.json").mkdir()  # a folder where a record would be
    with pytest.raises(ConfigError, match=r"cannot read run record .*d\.json .*move it out of the way"):
        resume_status(tmp_path, "d", "20260101T000000")
    assert (tmp_path / "d.json").is_dir() and not (tmp_path / "corrupt").exists()
