"""The execution axis (eager, compile, cudagraphs): validated before launch, named in the run id only when not
eager (earlier runs keep their ids), and a compiled step trains as the eager one does."""

import json
import os

import pytest

from companion.errors import ConfigError
from companion.runs.config import build_run
from companion.runs.records import load_records

TINY = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "vocab": 128,
    "max_positions": 64,
    "seq_len": 16,
    "batch_size": 4,
}
# the short protocol every run of these tests measures: a few steps, no meter
SHORT = {"meter": "none", "warmup_steps": 1, "window_steps": 2, "min_windows": 2, "max_steps": 8}


def run_in_one_process(folder, runs: dict, launcher=(), env=None) -> dict:
    """The records of ``runs`` ({name: build_run fields}), by name, measured one after the other by one `companion
    run --plan` process, as a sweep's launch runs its plan (``launcher``: the command that starts it, e.g.
    torchrun's; the CLI itself where empty)."""
    import subprocess

    from conftest import companion_cmd

    configs = {name: build_run(fields) for name, fields in runs.items()}
    plan, out = folder / "plan.json", folder / "runs"
    plan.write_text(json.dumps({"profile": "execution", "runs": [c.to_dict() for c in configs.values()]}))
    args = ["run", "--plan", str(plan), "--out", str(out)]
    env = {**os.environ, **(env or {})}
    if launcher:
        cmd = [*launcher, "-m", "companion.cli", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    else:
        res = companion_cmd(*args, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    records = {r["run_id"]: r for r in load_records(out)}
    assert set(records) == {c.run_id for c in configs.values()}, sorted(records)
    failed = {i: r["error"]["message"] for i, r in records.items() if r["status"] != "ok"}
    assert not failed, failed
    return {name: records[c.run_id] for name, c in configs.items()}


@pytest.fixture(scope="module")
def one_device_runs(tmp_path_factory) -> dict:
    """The single-device runs the engine and execution tests compare, in one process (a sweep's launch runs its
    runs so; a run leaving state behind that changed the next one's losses would fail the comparisons): native and
    Accelerate at fp32 and bf16, then eager and compiled without dropout (compiled dropout draws other numbers)."""
    runs = {
        (engine, precision): {**TINY, **SHORT, "precision": precision, "engine": engine}
        for precision in ("fp32", "bf16")
        for engine in ("native", "accelerate")
    }
    runs |= {
        execution: {**TINY, **SHORT, "dropout": 0.0, "execution": execution}
        for execution in ("eager", "compile")
    }
    # inductor compiles in the process itself: no pool of compile workers outliving the run
    return run_in_one_process(
        tmp_path_factory.mktemp("one-device"), runs, env={"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    )


def test_eager_runs_keep_their_ids_and_a_compiled_run_is_named_apart():
    eager = build_run(TINY)
    assert eager.execution == "eager" and "eager" not in eager.run_id
    # records written before the field existed rebuild to the ids they were written under
    from pathlib import Path

    from companion.runs.config import RunConfig

    records = sorted((Path(__file__).parents[2] / "data" / "reference" / "H200" / "runs").glob("*.json"))
    assert len(records) == 7
    for path in records:
        rec = json.loads(path.read_text())
        assert "execution" not in rec["config"]
        config = {k: v for k, v in rec["config"].items() if k not in ("mode", "world_size")}  # derived, shown
        assert RunConfig.from_dict(config).run_id == rec["run_id"]
    compiled = build_run({**TINY, "execution": "compile"})
    assert "-compile." in compiled.run_id and compiled.config_id != eager.config_id


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"execution": "jit"}, "execution='jit' is unknown"),
        ({"execution": "cudagraphs"}, "needs device='cuda'"),
        ({"execution": "compile", "tp": 2}, "one device only"),
    ],
)
def test_an_execution_the_runner_cannot_do_is_refused_with_one_line(fields, words):
    with pytest.raises(ConfigError, match=words):
        build_run({**TINY, **fields})


@pytest.mark.slow
def test_a_compiled_step_trains_as_the_eager_step_does(one_device_runs):
    """Without dropout (compiled dropout draws other random numbers), the losses of a compiled run follow the eager
    run's step for step; the compilation lands in the first, unmeasured step and is recorded apart."""
    records = {execution: one_device_runs[execution] for execution in ("eager", "compile")}
    curves = {execution: rec["loss"]["curve"] for execution, rec in records.items()}
    n = min(len(curves["eager"]), len(curves["compile"]))  # when a run stops depends on the machine's speed
    assert n >= 5
    assert curves["compile"][:n] == pytest.approx(curves["eager"][:n], rel=1e-4, abs=1e-5)
    ex = records["compile"]["execution"]
    assert ex["mode"] == "compile" and ex["torch_compile_mode"] == "default"
    assert ex["first_step_s"] > records["compile"]["time"]["step_mean_s"]
    # unpadded batches: the compiled steps are fed the all-ones mask (step_inputs), the eager ones none
    assert (ex["attention_mask"], records["eager"]["execution"]["attention_mask"]) == ("every batch", "none")


def test_the_accelerate_engine_is_named_apart_and_refused_under_tensor_parallelism():
    eager = build_run(TINY)
    acc = build_run({**TINY, "engine": "accelerate"})
    assert "-accelerate." in acc.run_id and acc.config_id != eager.config_id
    assert build_run({**TINY, "engine": "accelerate", "dp": 2}).layout.name == "tp1-dp2"
    for layout in ({"tp": 2}, {"tp": 2, "dp": 2}):
        with pytest.raises(ConfigError, match="no tensor-parallel plan for BERT"):
            build_run({**TINY, "engine": "accelerate", **layout})
    with pytest.raises(ConfigError, match="engine='deepspeed' is unknown"):
        build_run({**TINY, "engine": "deepspeed"})


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_accelerate_trains_as_the_native_engine_does(one_device_runs, precision):
    """Accelerate's step on one device (its prepare, backward and mixed precision) gives the native step's losses,
    dropout included (the same seed, data and optimizer)."""
    curves = {}
    for engine in ("native", "accelerate"):
        rec = one_device_runs[engine, precision]
        curves[engine] = rec["loss"]["curve"]
        assert rec["engine"]["name"] == engine and rec["config"]["precision"] == precision
        if engine == "accelerate":
            assert rec["engine"]["mixed_precision"] == ("bf16" if precision == "bf16" else "no")
    # when a run stops depends on the machine's speed; the losses of the steps both ran do not
    n = min(len(curves["native"]), len(curves["accelerate"]))
    assert n >= 5
    assert curves["accelerate"][:n] == pytest.approx(curves["native"][:n], rel=1e-5)


@pytest.mark.slow
def test_accelerate_data_parallel_trains_as_the_native_fsdp_plan_does(tmp_path):
    """Two ranks over gloo: Accelerate's data parallelism (DDP on a CPU, where it runs no FSDP) gives the native
    FSDP2 plan's losses, each rank on its shard of the batch; the record says which wrapper ran. Both runs in one
    torchrun launch, as a sweep's launch runs them."""
    import sys

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    torchrun += [
        f"--log-dir={tmp_path / 'torchrun'}"
    ]  # not a torchelastic_* folder left in the temporary directory
    runs = {engine: {**TINY, **SHORT, "dp": 2, "engine": engine} for engine in ("native", "accelerate")}
    # a second Accelerate run, at another precision: each rebuilds Accelerate's state in the launch's process group
    runs["accelerate bf16"] = {**runs["accelerate"], "precision": "bf16"}
    records = run_in_one_process(tmp_path, runs, launcher=torchrun, env={"OMP_NUM_THREADS": "1"})
    assert records["accelerate bf16"]["engine"]["mixed_precision"] == "bf16"
    assert records["accelerate bf16"]["engine"]["data_parallel"] == "ddp"
    records.pop("accelerate bf16")
    curves = {engine: rec["loss"]["curve"] for engine, rec in records.items()}
    rec = records["accelerate"]
    assert rec["engine"]["data_parallel"] == "ddp" and rec["engine"]["distributed_type"] == "MULTI_CPU"
    n = min(len(curves["native"]), len(curves["accelerate"]))
    assert n >= 5
    assert curves["accelerate"][:n] == pytest.approx(curves["native"][:n], rel=1e-5)


def test_every_compiled_run_of_one_process_compiles_and_one_that_did_not_is_refused():
    # a sweep runs its runs in one process: past torch._dynamo's recompile limit (8 per code object) a further
    # model ran eager under a compiled label; each compiled run starts from a fresh compiler state, and its
    # first step is checked to have produced a graph
    import torch

    from companion.runs.train import check_compiled, compiled

    model = compiled(torch.nn.Linear(4, 4), "compile")
    with pytest.raises(RuntimeError, match="compiled no graph"):
        check_compiled("compile")  # nothing ran yet
    for width in range(1, 11):  # more models than the recompile limit, each of its own shape
        model = compiled(torch.nn.Linear(width, 3), "compile")
        model(torch.randn(2, width))
        check_compiled("compile")


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_a_cuda_graph_step_trains_on_each_new_batch_as_the_compiled_step_does():
    # On an H200, BERT-base s512 b32 with CUDA graphs ended at a loss of 0.0003 where the compiled run with the
    # same seed stayed at 0.70: a replay that kept training on one captured batch would do that. Without dropout,
    # the two modes must give the same losses over batches that alternate, step for step.
    import torch

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model
    from companion.runs.train import compiled, make_train_step

    def losses(execution: str) -> list[float]:
        torch.manual_seed(0)
        config = ModelConfig(layers=2, hidden=128, heads=4, vocab=1024, max_positions=512, dropout=0.0)
        model = build_model(config).cuda().train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = make_train_step(
            compiled(model, execution), opt, bf16_autocast=True, graphs=execution == "cudagraphs"
        )
        g = torch.Generator().manual_seed(1)
        batches = [
            {
                "input_ids": torch.randint(0, 1024, (8, 512), generator=g).cuda(),
                "labels": torch.randint(0, 2, (8,), generator=g).cuda(),
            }
            for _ in range(3)
        ]
        return [float(step(batches[i % 3])) for i in range(9)]

    graphs, compile_ = losses("cudagraphs"), losses("compile")
    assert graphs == pytest.approx(compile_, rel=2e-2, abs=2e-3)


def _island_losses(execution: str, attn: str, device: str, steps: int) -> tuple[list[float], int]:
    """Losses of a 2-layer BERT without dropout over alternating batches, and the graphs torch.compile made."""
    import torch
    from torch._dynamo.utils import counters

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model
    from companion.runs.train import compiled, make_train_step

    torch.manual_seed(0)
    config = ModelConfig(layers=2, hidden=64, heads=4, vocab=256, max_positions=64, dropout=0.0, attn=attn)
    model = build_model(config).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = make_train_step(
        compiled(model, execution), opt, bf16_autocast=device == "cuda", graphs=execution == "cudagraphs"
    )
    g = torch.Generator().manual_seed(1)
    batches = [
        {
            "input_ids": torch.randint(0, 256, (4, 32), generator=g).to(device),
            "labels": torch.randint(0, 2, (4,), generator=g).to(device),
        }
        for _ in range(2)
    ]
    losses = [float(step(batches[i % 2])) for i in range(steps)]
    return losses, int(counters["stats"]["unique_graphs"])


def test_attention_left_out_of_the_compiled_graphs_trains_as_eager_does():
    # attn="sdpa-nocompile": a graph break around each layer's attention, which then runs eager's kernel; the rest
    # is compiled (more graphs than layers), and without dropout the losses are eager's
    eager, _ = _island_losses("eager", "sdpa", "cpu", 4)
    island, graphs = _island_losses("compile", "sdpa-nocompile", "cpu", 4)
    assert graphs > 2
    assert island == pytest.approx(eager, rel=1e-4, abs=1e-5)
    assert (
        "-compile-sdpa-nocompile."
        in build_run({**TINY, "attn": "sdpa-nocompile", "execution": "compile"}).run_id
    )
    with pytest.raises(ConfigError, match="attn='flash' is not an attention kernel"):
        build_run({**TINY, "attn": "flash"})
    with pytest.raises(ConfigError, match="needs execution compile or cudagraphs"):
        build_run({**TINY, "attn": "sdpa-nocompile"})  # eager: the same run as attn sdpa under another id


def test_attention_left_out_of_the_graphs_masks_padding_as_sdpa_does():
    # a padded batch: the left-out attention must get SDPA's padding mask (transformers gives an attention
    # function without a mask function of its own none), so its output is sdpa's, not that of attending to pads
    import torch

    from companion.runs.config import ModelConfig
    from companion.runs.model import build_model

    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    states = {}  # the encoder's output at row 0's real tokens
    for attn in ("sdpa", "sdpa-nocompile"):
        torch.manual_seed(0)
        config = ModelConfig(layers=2, hidden=32, heads=2, vocab=256, dropout=0.0, attn=attn)
        model = build_model(config).eval()
        with torch.no_grad():
            states[attn] = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state[0, :8]
            unmasked = model.bert(input_ids=ids).last_hidden_state[0, :8]
    assert torch.allclose(states["sdpa-nocompile"], states["sdpa"], atol=1e-6)
    assert (states["sdpa"] - unmasked).abs().max() > 1e-3  # the mask matters here


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_attention_left_out_of_cuda_graphs_trains_as_the_compiled_step_does():
    graphs, _ = _island_losses("cudagraphs", "sdpa-nocompile", "cuda", 6)
    compile_, _ = _island_losses("compile", "sdpa", "cuda", 6)
    assert graphs == pytest.approx(compile_, rel=2e-2, abs=2e-3)
