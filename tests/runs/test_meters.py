import json

import pytest
import torch

from companion.runs.meters import (
    NVML_MIN_WINDOW_S,
    CodeCarbonMeter,
    Measurement,
    MeterError,
    NullMeter,
    NvmlMeter,
    RecordingMeter,
    ReplayMeter,
    make_meter,
    match_nvml_uuid,
)


class SteppedCounter:
    """An NVML-like cumulative counter (mJ) that only advances every 100 ms of a manual clock.

    A stand-in for the hardware to test the meter's arithmetic; it is not a measurement.
    """

    def __init__(self, power_w: float):
        self.t, self.power_w = 0.0, power_w

    def clock(self) -> float:
        return self.t

    def read_mj(self) -> float:
        return round(int(self.t * 10) / 10 * self.power_w * 1000.0, 6)


def test_nvml_meter_arithmetic_and_resolution_warning():
    c = SteppedCounter(power_w=300.0)
    state = {"temperature_c": 61.0, "sm_clock_mhz": 1980.0, "power_limit_w": 700.0}
    meter = NvmlMeter(device_index=0, counter=c.read_mj, clock=c.clock, telemetry=lambda: dict(state))
    assert meter.min_window_s == NVML_MIN_WINDOW_S >= 3.0
    meter.begin_window("long")
    c.t += 3.0
    m = meter.end_window("long")
    assert m.energy_j == pytest.approx((900.0,)) and m.time_s == pytest.approx(3.0)
    # a counter passed in is no measurement of a run (the real counter's windows: test_nvml_meter_on_a_real_gpu)
    assert not m.measured and m.source == "injected:nvml" and m.units == ("cuda:0",) and not m.warnings
    assert m.telemetry == state and Measurement.from_json(m.to_json()) == m
    meter.begin_window("short")
    c.t += 1.0
    short = meter.end_window("short")
    assert short.warnings and "resolution" in short.warnings[0]


def test_nvml_device_is_matched_on_its_uuid_only(monkeypatch):
    uuids = ["GPU-aaaa-1111", "GPU-bbbb-2222"]
    assert match_nvml_uuid("bbbb-2222", uuids) == 1 and match_nvml_uuid("GPU-AAAA-1111", uuids) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    with pytest.raises(MeterError, match="CUDA_VISIBLE_DEVICES='MIG-1234'"):
        match_nvml_uuid("cccc-3333", uuids)  # never falls back to an index


def test_nvml_names_map_to_hardware_table_variants():
    from companion.energy.hardware import device_spec
    from companion.runs.provenance import short_gpu_name

    names = {
        "NVIDIA H100 80GB HBM3": "H100",
        "NVIDIA H100 PCIe": "H100-PCIe",
        "NVIDIA H100 NVL": "H100-NVL",
        "NVIDIA H200": "H200",
        "NVIDIA H200 NVL": "H200-NVL",
        "NVIDIA A100-SXM4-80GB": "A100",
        "Tesla V100-SXM2-32GB": "V100",
        "Quadro RTX 8000": "RTX8000",
        "NVIDIA L4": "L4",
    }
    for nvml_name, tag in names.items():
        assert short_gpu_name(nvml_name) == tag
        assert device_spec(tag)["sources"]  # every variant has a table entry with its source
    peaks = {t: device_spec(t)["bf16_tflops"] for t in ("H100", "H100-PCIe", "H100-NVL")}
    assert len(set(peaks.values())) == 3  # the variants are not one SXM figure


def test_missing_optional_package_gives_one_clear_message(monkeypatch):
    import sys

    from companion.runs.optional import MissingPackage

    monkeypatch.setitem(sys.modules, "codecarbon", None)  # import fails as if not installed
    with pytest.raises(MissingPackage, match=r"pip install codecarbon.*meter='none'"):
        CodeCarbonMeter("USA")


def test_nvml_counter_going_backwards_is_an_error():
    values = iter([1000.0, 500.0])
    meter = NvmlMeter(counter=lambda: next(values))
    meter.begin_window("w")
    with pytest.raises(MeterError, match="went backwards"):
        meter.end_window("w")


def test_window_misuse():
    meter = NullMeter()
    with pytest.raises(MeterError, match="never begun"):
        meter.end_window("x")
    meter.begin_window("x")
    with pytest.raises(MeterError, match="already open"):
        meter.begin_window("x")
    assert meter.end_window("x").energy_j is None


def test_replay_of_a_recorded_codecarbon_log(fixtures):
    log = fixtures / "meter_logs" / "codecarbon_cpu.jsonl"
    recorded = [Measurement.from_json(json.loads(line)) for line in log.read_text().splitlines()]
    meter = ReplayMeter(log)
    assert meter.source.startswith("replay:codecarbon[") and meter.measured is False
    for r in recorded:
        meter.begin_window(r.name)
        m = meter.end_window(r.name)
        assert m.energy_j == r.energy_j and m.time_s == r.time_s
        assert m.source == "replay:" + r.source and m.measured is False
        # what the log says about itself: an estimate whose parts add up
        assert sum(c["energy_j"] for c in m.components.values()) == pytest.approx(m.total_energy_j)
    assert meter.remaining == 0
    meter.begin_window("extra")
    with pytest.raises(MeterError, match="exhausted"):
        meter.end_window("extra")


def test_replay_checks_window_order(fixtures):
    meter = ReplayMeter(fixtures / "meter_logs" / "codecarbon_cpu.jsonl")
    meter.begin_window("w5")
    with pytest.raises(MeterError, match="expected window 'w0'"):
        meter.end_window("w5")


def test_record_then_replay_roundtrip(tmp_path):
    c = SteppedCounter(power_w=250.0)
    rec = RecordingMeter(NvmlMeter(counter=c.read_mj, clock=c.clock), tmp_path / "log.jsonl")
    originals = []
    for k in range(3):
        rec.begin_window(f"w{k}")
        c.t += 1.5 + k
        originals.append(rec.end_window(f"w{k}"))
    replay = ReplayMeter(tmp_path / "log.jsonl")
    assert replay.scope == "device" and replay.measured is False and replay.source == "replay:injected:nvml"
    assert replay.min_window_s == NVML_MIN_WINDOW_S
    for o in originals:
        replay.begin_window(o.name)
        assert replay.end_window(o.name).energy_j == o.energy_j


def test_codecarbon_meter_says_how_it_got_its_energy():
    meter = CodeCarbonMeter("FRA")
    meter.begin_window("w")
    x = torch.randn(256, 256)
    for _ in range(50):
        x = torch.tanh(x @ x)
    m = meter.end_window("w")
    meter.close()
    assert m.total_energy_j > 0 and m.time_s > 0 and m.units[0].startswith("node:")
    assert set(m.components) >= {"cpu", "ram"}
    methods = meter.component_methods
    assert m.measured == all(v["measured"] for v in methods.values())
    assert (
        m.source == "codecarbon[" + ",".join(f"{k}={v['method']}" for k, v in sorted(methods.items())) + "]"
    )
    if methods["cpu"]["method"] == "cpu_load":  # no RAPL: the CPU part is CodeCarbon's TDP x load model
        assert m.measured is False


def test_meter_factory():
    with pytest.raises(MeterError, match="needs device='cuda'"):
        make_meter("nvml", "cpu", 0, True, "USA")
    assert isinstance(make_meter("codecarbon", "cpu", 0, owns_node=False, country="USA"), NullMeter)
    assert isinstance(make_meter("none", "cpu", 0, True, "USA"), NullMeter)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nvml_meter_on_a_real_gpu():
    import time

    meter = make_meter("nvml", "cuda", 0, True, "USA", sync=torch.cuda.synchronize)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    meter.begin_window("matmul")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < NVML_MIN_WINDOW_S:  # time-based: as long on a fast GPU as on a slow one
        for _ in range(20):
            x = (x @ x).clamp_(-1, 1)
        torch.cuda.synchronize()
    m = meter.end_window("matmul")
    assert m.measured and m.source == "nvml" and m.time_s >= NVML_MIN_WINDOW_S and not m.warnings
    assert 20.0 < m.total_energy_j / m.time_s < 1500.0  # mean board power within physical bounds
    assert set(m.telemetry) == {"temperature_c", "sm_clock_mhz", "power_limit_w"}


def test_counter_mean_power_is_an_average_of_the_counter():
    from companion.runs.meters import counter_mean_power

    c = SteppedCounter(power_w=142.0)
    out = counter_mean_power(c.read_mj, 10.0, clock=c.clock, sleep=lambda s: setattr(c, "t", c.t + s))
    assert out["time_s"] == pytest.approx(10.0) and out["mean_power_w"] == pytest.approx(142.0)
