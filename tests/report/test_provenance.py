"""The provenance appendix tabulates what the run records say about their hardware, per data source."""

from companion.report import provenance


def _record(gpu=None, meters=None, sha="abc1234567890"):
    hw = {"cpu": "Xeon X", "cpu_count": 16, "memory_bytes": 64 * 2**30}
    if gpu:
        hw.update(gpu=gpu, gpu_count=8, driver="560.1", cuda="12.8")
    return {
        "status": "ok",
        "profile": "p",
        "provenance": {
            "hardware": hw,
            "git": {"sha": sha, "dirty": False},
            "finished_at": "2026-11-20T10:00:00+00:00",
        },
        "meters": meters or [{"measured": True, "source": "nvml"}, {"measured": False, "source": "none"}],
    }


def test_one_row_per_hardware_with_model_cores_memory_gpu_and_driver():
    t = provenance.data_sources(
        [_record("NVIDIA H100"), _record("NVIDIA H100"), _record(None), {"status": "failed"}]
    )
    assert len(t) == 2
    gpu = t[t.GPU != "none"].iloc[0]
    assert (gpu.runs, gpu["CPU model"], gpu["CPU cores"], gpu.memory) == (2, "Xeon X", 16, "64 GiB")
    assert gpu.GPU == "8 × NVIDIA H100" and gpu["GPU driver / CUDA"] == "560.1 / 12.8"
    assert gpu.energy.startswith("measured") and "NVML" in gpu.energy and gpu["code commit"] == "abc1234567"


def test_meter_sources_read_as_plain_words_without_code_names():
    from companion.report.book_check import code_leaks

    for source in (
        "codecarbon[cpu=cpu_load,ram=ram_model]",
        "codecarbon[cpu=intel_rapl,gpu=nvml]",
        "replay:nvml",
    ):
        assert not code_leaks(provenance.meter_words(source)), source
    assert "CodeCarbon" in provenance.meter_words("codecarbon[cpu=cpu_load,ram=ram_model]")
    assert "RAPL" in provenance.meter_words("codecarbon[cpu=intel_rapl,ram=ram_model]")


def test_missing_fields_read_not_recorded():
    t = provenance.data_sources([{"status": "ok", "meters": []}])
    assert t.iloc[0]["CPU model"] == provenance.UNKNOWN and t.iloc[0].energy == provenance.UNKNOWN


def test_versions_name_python_and_the_book_packages():
    v = provenance.versions().set_index("package").version
    assert {"python", "torch", "altair", "jupyter-book"} <= set(v.index)


def test_sources_that_differ_only_in_profile_share_a_column_and_machines_share_one_with_hardware_only():
    import pandas as pd

    from companion.report.provenance import merged_sources

    base = {
        "CPU model": "AMD EPYC",
        "GPU": "none",
        "energy": "estimated",
        "measured": "2026-11-26 – 2026-11-26",
    }
    table = pd.DataFrame(
        [
            {"profile": "cpu", "runs": 106, **base, "code commit": "aaa"},
            {"profile": "holdout", "runs": 28, **base, "code commit": "aaa"},
            {"profile": "testset", "runs": 10, **base, "code commit": "bbb"},
            {"profile": "cpu", "runs": 4, **base, "CPU model": "Intel Xeon", "code commit": "aaa"},
        ]
    )
    merged = merged_sources(table)
    assert list(merged.profile) == ["sweep, validation set", "test set", "sweep"]
    assert list(merged.runs) == ["106 + 28", 10, 4]
    machines = merged_sources(table, hardware_only=True)
    assert list(machines.profile) == [
        "sweep, validation set, test set",
        "sweep",
    ]  # one column per machine type
    assert machines["code commit"].iloc[0] == "aaa, bbb" and machines.runs.iloc[0] == "106 + 28 + 10"
    assert merged_sources(table.iloc[:0]).empty
