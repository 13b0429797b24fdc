"""The runner in this process (one rank): records, failures, learning, world-size checks."""

import pytest
import torch

from companion.errors import ConfigError
from companion.runs.config import build_run
from companion.runs.records import load_records
from companion.runs.train import main as train_main, run_plan

FIXED = {"warmup_steps": 1, "window_steps": 2, "min_windows": 2, "max_steps": 4, "target_rel_ci": 0.0}
TINY = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "vocab": 256,
    "max_positions": 64,
    "seq_len": 16,
    "batch_size": 4,
}


def test_record_has_every_documented_field(tmp_path):
    cfg = build_run({**TINY, **FIXED, "meter": "codecarbon"})
    assert run_plan([cfg], tmp_path, "unit") == 0
    (rec,) = load_records(tmp_path)
    assert rec["run_id"] == cfg.run_id and rec["status"] == "ok" and rec["error"] is None
    c = rec["config"]
    assert c["model"]["layers"] == 1 and c["data"]["seq_len"] == 16 and c["layout"] == {"tp": 1, "dp": 1}
    assert c["world_size"] == 1 and c["device_name"] == "cpu"
    t = rec["time"]
    assert t["steps_measured"] == 4 and t["windows"] == 2 and t["step_median_s"] > 0
    assert t["step_ci95_halfwidth_s"] is not None and t["stop_reason"] == "max_steps"
    assert rec["tokens"]["padded_per_step"] == 4 * 16 and rec["tokens"]["real_per_step"] == 64
    e = rec["energy"]
    assert e["measured"] is False and e["source"].startswith("codecarbon[") and e["total_j"] > 0
    assert e["per_rank_j"] == {"0": pytest.approx(e["total_j"])}
    assert "carbon" not in e  # CO2 is applied at analysis time (companion.energy.tables)
    assert rec["config_id"] == rec["run_id"] and c["replicate"] == 0
    th = rec["threads"]
    assert th["per_rank"] >= 1 and th["ranks_on_host"] == 1 and th["host_cpus"] >= 1
    assert len(rec["loss"]["curve"]) == rec["loss"]["unmeasured_steps"] + 4
    assert len(t["probe_step_s"]) == rec["loss"]["unmeasured_steps"] - c["protocol"]["warmup_steps"]
    assert all(x > 0 for x in t["probe_step_s"])
    # the host's speed just before and after the windows: the reference workload's time, on one thread
    h = rec["host_speed"]
    assert 0 < h["before_s"] < 1 and 0 < h["after_s"] < 1 and h["workload"] and h["iterations"] >= 1
    p = rec["provenance"]
    assert {"git", "packages", "hardware", "seed", "started_at", "finished_at"} <= set(p)
    assert p["packages"]["torch"].startswith("2.13.0")
    assert rec["memory"]["peak_bytes_max_rank"] > 0


def test_a_one_rank_run_times_the_host_on_any_device_a_run_of_several_ranks_on_none():
    from types import SimpleNamespace

    from companion.runs.train import _host_speed

    # the workload runs on the host's cores whatever the device: a GPU run times the host issuing its kernels
    for device in (torch.device("cpu"), torch.device("cuda")):
        assert 0 < _host_speed(SimpleNamespace(world_size=1), device) < 1
        assert _host_speed(SimpleNamespace(world_size=2), device) is None


def test_a_failing_run_becomes_a_failed_record_and_the_plan_goes_on(tmp_path, fixtures, minilm_path):
    ok1 = build_run({**TINY, **FIXED, "meter": "none"})
    # Valid on paper, fails when the tokenizer is loaded: its 30522 tokens do not fit vocab=256.
    bad = build_run(
        {
            **TINY,
            **FIXED,
            "meter": "none",
            "source": str(fixtures / "reviews.jsonl"),
            "tokenizer": str(minilm_path),
        }
    )
    ok2 = build_run({**TINY, **FIXED, "meter": "none", "seed": 1})
    assert run_plan([ok1, bad, ok2], tmp_path, "unit") == 1
    status = {r["run_id"]: r for r in load_records(tmp_path)}
    assert status[ok1.run_id]["status"] == "ok" and status[ok2.run_id]["status"] == "ok"
    failed = status[bad.run_id]
    assert failed["status"] == "failed" and "vocab >= 30522" in failed["error"]["message"]
    assert failed["error"]["oom"] is False and "time" not in failed
    # Running the plan again writes nothing new: finished runs are skipped, records never overwritten.
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")}
    assert run_plan([ok1, bad, ok2], tmp_path, "unit") == 0
    assert before == {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")}


@pytest.mark.parametrize("swallowed", [False, True])
def test_a_stop_that_a_library_catches_still_stops_the_plan_and_writes_no_record(
    tmp_path, monkeypatch, swallowed
):
    """SIGTERM's handler raises where the process is; inside library code that catches every exception and
    raises an ordinary error (or swallows it), the run would otherwise be recorded as failed (or measured)."""
    import signal

    from companion import errors
    from companion.runs import train

    monkeypatch.setattr(errors, "_stop_asked", [])
    real = train.run_one

    def run_one(cfg, ctx):
        try:
            errors.raise_terminated(signal.SIGTERM, None)
        except BaseException as exc:
            if not swallowed:
                raise RuntimeError("a library's own error") from exc
        return real(cfg, ctx)

    steps = []
    real_step = train.make_train_step

    def make_train_step(*args, **kwargs):
        step = real_step(*args, **kwargs)
        return lambda batch: steps.append(1) or step(batch)

    monkeypatch.setattr(train, "run_one", run_one)
    monkeypatch.setattr(train, "make_train_step", make_train_step)
    cfg = build_run({**TINY, **FIXED, "meter": "none"})
    with pytest.raises(errors.Terminated):
        run_plan([cfg], tmp_path, "unit")
    assert not list(tmp_path.glob("*.json"))
    assert steps == []  # a swallowed stop ends the run at its next step, not at its cap


def test_the_synthetic_task_is_learned(tmp_path):
    cfg = build_run(
        {
            **TINY,
            "seq_len": 32,
            "batch_size": 16,
            "dropout": 0.0,
            "lr": 3e-3,
            "meter": "none",
            "warmup_steps": 0,
            "window_steps": 10,
            "min_windows": 2,
            "max_steps": 60,
            "target_rel_ci": 0.0,
        }
    )
    run_plan([cfg], tmp_path, "unit")
    curve = load_records(tmp_path)[0]["loss"]["curve"]
    first, last = sum(curve[:10]) / 10, sum(curve[-10:]) / 10
    assert first > 0.6 and last < first - 0.3, (first, last)


def test_world_size_must_equal_tp_times_dp(tmp_path):
    with pytest.raises(
        ConfigError, match=r"world size 1 != tp\*dp = 2\*1 = 2; launch with torchrun --nproc-per-node 2"
    ):
        run_plan([build_run({**TINY, "tp": 2})], tmp_path, "unit")
    assert not list(tmp_path.glob("*.json"))


def test_command_line_single_run(tmp_path, capsys):
    rc = train_main(
        [
            "--layers",
            "1",
            "--hidden",
            "32",
            "--heads",
            "2",
            "--vocab",
            "256",
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--lengths",
            "uniform:8",
            "--meter",
            "none",
            "--warmup-steps",
            "1",
            "--window-steps",
            "2",
            "--min-windows",
            "2",
            "--max-steps",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    (rec,) = load_records(tmp_path)
    assert rec["config"]["data"]["lengths"]["kind"] == "uniform" and "s16u8" in rec["run_id"]
    assert rec["tokens"]["real_per_step"] < rec["tokens"]["padded_per_step"]
    assert "ok" in capsys.readouterr().out


def test_t_quantiles_need_no_scipy_and_match_it():
    from scipy.stats import t

    from companion.runs.stats import t_quantile_975

    for dof in [1, 2, 3, 5, 10, 29, 30, 31, 50, 200, 5000]:
        assert t_quantile_975(dof) == pytest.approx(float(t.ppf(0.975, dof)), rel=1e-6)


def test_no_attention_mask_without_padding():
    import torch

    from companion.runs.train import without_full_mask

    full = {
        "input_ids": torch.ones(2, 4, dtype=torch.long),
        "attention_mask": torch.ones(2, 4, dtype=torch.long),
    }
    assert set(without_full_mask(full)) == {"input_ids"}
    padded = {**full, "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}
    assert without_full_mask(padded) is padded


def test_compiled_steps_are_fed_a_mask_always():
    # traced without a mask, transformers builds one in the graph that no fused SDPA kernel takes
    import torch

    from companion.runs.train import step_inputs

    ids = torch.ones(2, 4, dtype=torch.long)
    full = {"input_ids": ids, "attention_mask": torch.ones(2, 4, dtype=torch.long)}
    assert set(step_inputs(full, "eager")) == {"input_ids"}
    for execution in ("compile", "cudagraphs"):
        assert step_inputs(full, execution) is full
        made = step_inputs({"input_ids": ids}, execution)["attention_mask"]
        assert made.shape == ids.shape and bool(made.all())


def test_compiled_bf16_step_holds_its_autocast():
    # the autocast is entered inside the compiled forward (around it, the step took 43 ms against 31 ms on an
    # H200), and the step enters none of its own
    import torch

    from companion.runs.train import AutocastForward, compiled, make_train_step

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    inner = compiled(model, "compile", bf16_autocast=True)
    assert isinstance(inner._orig_mod, AutocastForward)
    assert inner(torch.ones(3, 8)).dtype == torch.bfloat16  # called outside any autocast
    assert compiled(model, "eager", bf16_autocast=True) is model  # eager: the step's own autocast

    entered = []

    class Loss(torch.nn.Module):
        def forward(self, input_ids):
            entered.append(torch.is_autocast_enabled("cpu"))
            return type("Out", (), {"loss": model(input_ids).float().sum()})()

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = Loss()
    make_train_step(plain, opt, bf16_autocast=True)({"input_ids": torch.ones(3, 8)})

    class Compiled(torch.nn.Module):  # what torch.compile returns: the module it compiled as _orig_mod
        def __init__(self):
            super().__init__()
            self._orig_mod = AutocastForward(plain, "cpu")

        def forward(self, **batch):
            return plain(**batch)

    make_train_step(Compiled(), opt, bf16_autocast=True)({"input_ids": torch.ones(3, 8)})
    assert entered == [True, False]


def test_windows_last_at_least_the_meter_minimum():
    from companion.runs.config import Protocol
    from companion.runs.train import window_steps_for

    proto = Protocol(min_window_s=0.25, max_steps=100000)
    assert window_steps_for(proto, 0.0, 0.01) == 27  # 0.25 s and 5 % to spare
    assert window_steps_for(proto, 3.0, 0.01) == 315  # NVML: >= 3 s whatever the profile asks
    assert window_steps_for(Protocol(max_steps=50), 3.0, 0.01) == 50
