"""Run a profile's sweep: one launch per world size, resumable, with a progress bar.

* Finished runs (a record exists) are skipped, so re-running a sweep resumes it. Failed records are kept;
  ``retry_failed`` moves them to ``failed/`` (never deleting them) and runs those configurations again.
* Each world size is one launch (plain ``python -m companion.runs.train`` for one rank, torchrun otherwise,
  whose ranks ``companion.runs.launch`` forks after the imports on CPU) that loops over its configurations.
  If a launch dies (a crash, a kill, a hang past the process-group timeout), the first configuration without
  a record was in flight: it gets a ``failed`` record, and the rest are launched again. A launch that fails
  as a whole (no record, and its worker said ``error:`` or never started a run: a meter or package missing)
  stops the sweep with the worker's one-line message.
* Replicates run in passes (``launch_order``): every configuration once, then all again. On CPU a world
  size's launch serves every pass (``Launches``): it waits on its queue folder between them. A launch that
  ends while it waits is started again for the next pass; no run was in flight, so none is recorded failed.
* A profile's ``measured_with`` profiles (the cpu grid's off-grid holdout) share its launches: their runs
  are spread among its own, so both are measured over the same minutes of a machine whose speed drifts.
* ``emit_launch`` writes the same plans with multi-node torchrun commands and SLURM array scripts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from companion.errors import ConfigError, Terminated, raise_if_stopped
from companion.runs.config import RunConfig
from companion.runs.profiles import Profile
from companion.runs.provenance import utc_now
from companion.runs.records import (
    FolderLock,
    check_writable,
    existing_status,
    make_record,
    record_path,
    resume_status,
    set_aside_failed,
    write_json,
    write_record,
)

POLL_S = 0.5
_PROGRESS_LINE = re.compile(r"^\[\d+/\d+\] ")


@dataclass
class SweepResult:
    out_dir: Path
    total: int
    skipped: int = 0
    kept_failed: int = (
        0  # of the skipped: failed records kept from an earlier sweep (--retry-failed runs them)
    )
    ok: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    alongside: list["SweepResult"] = field(default_factory=list)  # profiles measured in the same launches

    def summary(self) -> str:
        kept = (
            f" ({self.kept_failed} of them failed earlier and kept as failed: --retry-failed runs them again)"
            if self.kept_failed
            else ""
        )
        return (
            f"{self.total} runs in {self.out_dir}: {len(self.ok)} ok, {len(self.failed)} failed, "
            f"{self.skipped} already done{kept}"
        )


@dataclass(frozen=True)
class Pending:
    """A run to do and where its record goes: its profile's name and record folder."""

    run: RunConfig
    profile: str
    out_dir: Path


def worker_command(
    plan_path: Path, out_dir: Path, world_size: int, device: str = "cpu", serve: bool = False
) -> list[str]:
    """One rank: ``python -m companion.runs.train``. Several: torchrun, whose ranks are forked after the imports
    on CPU (``companion.runs.launch``) and started as new interpreters on CUDA (``torchrun -m``). ``serve``:
    ``plan_path`` is a queue folder whose plans the launch runs in turn (``train.serve_plans``)."""
    args = ["--serve" if serve else "--plan", str(plan_path), "--out", str(out_dir)]
    if world_size == 1:
        return [sys.executable, "-m", "companion.runs.train", *args]
    if device == "cpu":
        return [sys.executable, "-m", "companion.runs.launch", f"--nproc-per-node={world_size}", *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        "-m",
        "companion.runs.train",
        *args,
    ]


def write_plan(path: Path, profile: str, runs: list[RunConfig], destinations=None) -> Path:
    """A launch's plan; ``destinations`` ((profile, folder) per run) where it runs several profiles' runs."""
    plan = {"profile": profile, "runs": [r.to_dict() for r in runs]}
    if destinations is not None:
        plan["destinations"] = [[name, str(folder)] for name, folder in destinations]
    return write_json(path, plan)


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the sweep process dies, so a killed sweep leaves no orphans."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def measured_alongside(profile: Profile, out_dir: Path) -> list[tuple[Profile, Path]]:
    """The profiles ``profile`` names in ``measured_with``, tagged for the same device, each with its record
    folder beside ``out_dir`` (``data/runs/<name>`` for the default): the runs its sweep measures in the same
    launches (``run_sweep``'s ``alongside``)."""
    from companion.runs.profiles import load_profile

    device_name = profile.runs[0].device_name
    out = []
    for name in profile.measured_with:
        other = load_profile(name, device_name=device_name)
        if other.device != profile.device:
            raise ConfigError(
                f"profile {profile.name!r} is measured with {name!r}, which runs on {other.device}, "
                f"not {profile.device}; name profiles of the same device in measured_with"
            )
        folder = Path(out_dir).parent / other.name
        if folder.resolve() == Path(out_dir).resolve():
            raise ConfigError(
                f"--out {out_dir} is where profile {profile.name!r} files its {name!r} runs (beside its own folder, "
                f"named {name!r}); give the sweep a folder of another name, e.g. {Path(out_dir).parent / profile.name}"
            )
        out.append((other, folder))
    return out


def run_sweep(
    profile: Profile,
    out_dir: Path,
    retry_failed: bool = False,
    progress: bool = True,
    alongside: list[tuple[Profile, Path]] = (),
) -> SweepResult:
    """Run every configuration without a record, holding the folders' locks (a second sweep or run into the
    same folder is refused with the holder's name). Ctrl-C stops the launch in flight; finished records stay.

    ``alongside`` ((profile, record folder) pairs, e.g. ``measured_alongside(profile, out_dir)``): other
    profiles whose runs share this sweep's launches, spread evenly among its runs of the same pass and world
    size, each record filed under its own profile. A machine whose speed drifts over minutes (a shared VM)
    then drifts alike for both: off-grid runs measured after the grid they are scored against carry the drift
    as a bias. Their results are in the returned result's ``alongside``."""
    members = [(profile, Path(out_dir)), *((p, Path(d)) for p, d in alongside)]
    for _, folder in members:
        check_writable(folder)
    with contextlib.ExitStack() as stack:
        for _, folder in members:
            stack.enter_context(FolderLock(folder))
        return _run_sweep(members, retry_failed, progress)


def _run_sweep(members: list[tuple[Profile, Path]], retry_failed: bool, progress: bool) -> SweepResult:
    profile, out_dir = members[0]
    if profile.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"profile {profile.name!r} needs a CUDA GPU and none is visible; run it on a GPU machine, or "
                "write cluster launch scripts with --emit torchrun|slurm"
            )
    results, pending = [], []
    for prof, folder in members:
        folder.mkdir(parents=True, exist_ok=True)
        result = SweepResult(folder, len(prof.runs))
        mine = []
        for run in prof.runs:
            status = resume_status(folder, run.run_id, utc_now().replace(":", ""))
            if status == "failed" and retry_failed:
                set_aside_failed(folder, run.run_id, utc_now().replace(":", ""))
                status = None
            if status is None:
                mine.append(Pending(run, prof.name, folder))
            else:
                result.skipped += 1
                result.kept_failed += status == "failed"
        results.append(result)
        pending.append(mine)
    bar = _progress_bar(sum(map(len, pending)), enabled=progress)
    for result in results:
        if result.skipped and progress:
            bar.write(
                f"{result.skipped} of {result.total} runs already have records in {result.out_dir}: skipped"
                + (
                    f" ({result.kept_failed} failed: --retry-failed runs them again)"
                    if result.kept_failed
                    else ""
                )
            )
    launches = Launches(out_dir, serve=profile.device == "cpu")
    order = launch_order(pending)  # replicate passes, then world sizes
    last = {ws: i for i, (ws, _) in enumerate(order)}
    try:
        for i, (world_size, items) in enumerate(order):
            _launch_until_done(profile.name, out_dir, items, world_size, bar, launches)
            if i == last[world_size]:
                launches.retire(world_size)
        launches.close()
    finally:
        launches.stop()
        bar.close()
    for result, mine in zip(results, pending):
        for item in mine:
            status = existing_status(item.out_dir, item.run.run_id)
            (result.ok if status == "ok" else result.failed).append(item.run.run_id)
    main, *rest = results
    main.alongside = rest
    return main


def launch_order(pending: list[list[Pending]]) -> list[tuple[int, list[Pending]]]:
    """(world size, runs) launches in sweep order: one pass per replicate (every configuration once, then all
    again), one launch per world size within a pass; within a launch the runs of every profile, each
    profile's in its own order, spread evenly among the others' (a run at position i of n sits at
    (i + 1/2) / n of the launch)."""
    every = [item for mine in pending for item in mine]
    passes = sorted({item.run.replicate for item in every})
    sizes = sorted({item.run.layout.world_size for item in every})
    out = []
    for rep in passes:
        for ws in sizes:
            groups = [
                [item for item in mine if item.run.replicate == rep and item.run.layout.world_size == ws]
                for mine in pending
            ]
            spread = sorted(
                ((i + 0.5) / len(g), k, item) for k, g in enumerate(groups) for i, item in enumerate(g)
            )
            if spread:
                out.append((ws, [item for _, _, item in spread]))
    return out


@dataclass
class Launch:
    """A launch of one world size: its process, and on CPU the queue folder it takes its plans from."""

    proc: subprocess.Popen
    queue: Path | None  # None: a launch of one plan (``--plan``)
    plans: int = 0  # plans handed to it


class Launches:
    """The sweep's launches. On CPU one launch per world size serves every pass (``train.serve_plans``): the
    second pass's runs skip the interpreter's start and, under TP and FSDP, the first step's sharding
    propagation of each configuration (DTensor caches it per process; a 4-rank run's first step takes 1-3 s
    without it), so a sweep's time outside the measured windows shrinks; the windows themselves are as before
    (each opens after its run's warm-up). An idle launch waits on its queue's files, not on a collective: it
    holds its memory and wakes twice a second (its ranks) while other world sizes measure, until its last
    plan (``retire``). On CUDA every plan is a launch of its own: an idle launch would hold its GPUs' memory
    while another world size measures on them."""

    def __init__(self, out_dir: Path, serve: bool):
        self.out_dir, self.serve = Path(out_dir), serve
        self.live: dict[int, Launch] = {}

    def submit(self, world_size: int, profile: str, items: list[Pending], log) -> tuple[Launch, Path | None]:
        """Hand ``items``' plan to the world size's live launch, or start one (``log``: its output file); the
        launch and the file it writes when the plan is done (None for a launch of one plan)."""
        plans = self.out_dir / ".plans"
        runs, dest = [item.run for item in items], _destinations(items, profile, self.out_dir)
        device = items[0].run.device
        if not self.serve:
            plan = write_plan(plans / f"ws{world_size}.json", profile, runs, dest)
            return Launch(self._start(plan, world_size, device, log), None), None
        launch = self.live.get(world_size)
        if launch is None or launch.proc.poll() is not None:
            queue = plans / f"ws{world_size}"
            shutil.rmtree(queue, ignore_errors=True)  # an earlier launch's plans: that launch has ended
            queue.mkdir(parents=True)
            launch = self.live[world_size] = Launch(
                self._start(queue, world_size, device, log, serve=True), queue
            )
        k = launch.plans
        if k:
            log.write(f"\n=== {utc_now()} plan {k} of the launch above (pid {launch.proc.pid})\n")
            log.flush()
        write_plan(launch.queue / f"{k}.json", profile, runs, dest)
        launch.plans += 1
        return launch, launch.queue / f"{k}.done"

    def _start(self, plan: Path, world_size: int, device: str, log, serve: bool = False) -> subprocess.Popen:
        cmd = worker_command(plan, self.out_dir, world_size, device, serve=serve)
        log.write(f"\n=== {utc_now()} {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def retire(self, world_size: int) -> None:
        """The world size has no plan left: its launch closes its process group and exits (``close`` waits)."""
        launch = self.live.get(world_size)
        if launch is not None and launch.queue is not None:
            write_json(launch.queue / "stop", {})

    def ended(self, world_size: int) -> None:
        """The world size's launch has exited: the next plan starts another."""
        self.live.pop(world_size, None)

    def close(self, timeout_s: float = 60.0) -> None:
        """The sweep is done: every serving launch closes its process group and exits."""
        for ws in self.live:
            self.retire(ws)
        for ws, launch in list(self.live.items()):
            try:
                launch.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            else:
                self.ended(ws)

    def stop(self) -> None:
        """Stop what is still running (a sweep stopped or failed, or a launch that did not exit when closed)."""
        for launch in self.live.values():
            if launch.proc.poll() is None:
                launch.proc.terminate()
        for launch in self.live.values():
            try:
                launch.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                launch.proc.kill()
                launch.proc.wait()
        self.live.clear()


def _launch_until_done(
    profile: str, out_dir: Path, items: list[Pending], world_size: int, bar, launches: Launches
) -> None:
    todo = list(items)
    log_path = out_dir / "logs" / f"ws{world_size}.log"
    log_path.parent.mkdir(exist_ok=True)
    while todo:
        with log_path.open("a") as log:
            start = log_path.stat().st_size
            launch, done = launches.submit(world_size, profile, todo, log)
            rc = _follow(launch.proc, todo, bar, log_path, start, done)
        raise_if_stopped()  # a stop that a library caught: launch nothing more
        missing = [item for item in todo if not _done(item)]
        if rc is None and not missing:  # the plan is done; its launch waits for the next
            return
        if rc is None:  # done, yet a record is missing: nothing a relaunch would mend
            raise LaunchFailed(
                f"the launch of world size {world_size} finished its plan without a record for "
                f"{missing[0].run.run_id}; see {log_path}"
            )
        launches.ended(world_size)
        if not missing:
            return
        launched = log_path.read_bytes()[start:].decode(errors="replace")  # what this launch wrote
        if _interrupted(rc, launched):
            # Ctrl-C (or SIGTERM) reached the launch but not this process (or not yet): the run in flight was
            # stopped, not failed, so it gets no record and the sweep stops as if interrupted itself
            terminated = (
                rc in (-signal.SIGTERM, 128 + signal.SIGTERM)
                or re.search(r"got signal: (15|(Signals\.)?SIGTERM)\b", launched) is not None
            )
            raise Terminated if terminated else KeyboardInterrupt
        if launch.plans > 1 and "run-start:" not in launched and "error:" not in launched:
            # a launch kept from an earlier pass ended before it started this plan: start a new one for it
            bar.write(
                f"the launch of world size {world_size} ended between plans (exit code {rc}); starting another"
            )
            continue
        if len(missing) == len(todo) and _launch_level(launched):
            # Not one record, and the launch itself could not run (a meter, a package, the process group:
            # the worker said `error:` or never started a run). Relaunching would fail the same way for
            # every run: stop with the worker's own message.
            raise LaunchFailed(
                f"the launch of world size {world_size} exited with code {rc} before finishing any run: "
                f"{_last_error_line(launched)}; fix this and re-run the sweep (finished runs are kept; "
                f"full log: {log_path})"
            )
        # The launch ended early: the first run without a record was in flight when it did.
        in_flight = missing[0]
        tail = log_path.read_text()[-3000:]
        error = {
            "type": "LaunchFailed",
            "message": f"the worker launch exited with code {rc} while this run was in flight "
            f"(see {log_path})",
            "oom": "out of memory" in tail.lower(),
            "traceback": tail,
        }
        write_record(
            in_flight.out_dir,
            make_record(
                in_flight.run,
                in_flight.profile,
                "failed",
                None,
                error,
                utc_now(),
                {"world_size": world_size, "exit_code": rc},
            ),
        )
        bar.write(f"{in_flight.run.run_id} FAILED: launch exited with code {rc}; see {log_path}")
        bar.update(1)
        todo = missing[1:]


def _destinations(items: list[Pending], profile: str, out_dir: Path) -> list[tuple[str, Path]] | None:
    """A plan's (profile, folder) per run where its runs go to more than the plan's own profile and folder;
    None otherwise, so a plan of one profile keeps the format it always had."""
    if all(item.profile == profile and item.out_dir == out_dir for item in items):
        return None
    return [(item.profile, item.out_dir) for item in items]


def _done(item: Pending) -> bool:
    return record_path(item.out_dir, item.run.run_id).exists()


class LaunchFailed(ConfigError):
    """A launch wrote no record: the sweep stops with the worker's message instead of failing every run."""


def _launch_level(text: str) -> bool:
    """Whether a launch failed as a whole (``text``: what it wrote to its log): its worker printed a one-line ``error:`` (a ConfigError or a
    meter that cannot work) or never started a run. A crash inside a run (a kill, a segfault) is neither."""
    lines = text.splitlines()
    return any(x.startswith("error:") for x in lines) or not any(x.startswith("run-start:") for x in lines)


def _interrupted(rc: int, text: str) -> bool:
    """Whether a launch ended because it was sent SIGINT or SIGTERM (``text``: what it wrote to its log): killed by
    it (a lone rank: exit code -2 or 130, -15 or 143), or torchrun's agent reporting it (``SignalException: Process
    <pid> got signal: 2`` or ``15``, exit code 1)."""
    if rc in (-signal.SIGINT, 128 + signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGTERM):
        return True
    return (
        re.search(r"SignalException: Process \d+ got signal: (2|15|(Signals\.)?SIG(INT|TERM))\b", text)
        is not None
    )


def _last_error_line(text: str) -> str:
    """The worker's one-line error (``error: ...``) in a launch's ``text``, else the last exception line of its
    traceback."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    for line in reversed(lines):
        if ("Error" in line or "Exception" in line) and ":" in line and not line.startswith(("File ", "[")):
            return line
    return lines[-1] if lines else "no output"


def _follow(
    proc, items: list[Pending], bar, log_path: Path, offset: int, done: Path | None = None
) -> int | None:
    """Wait for the launch to exit (its exit code) or, where it serves plans, to write ``done`` (None), advancing
    the bar as records appear and echoing the worker's run lines."""
    seen = {item.run.run_id for item in items if _done(item)}
    stop = threading.Event()

    def echo():
        pos = offset
        while not stop.is_set():
            pos = _echo_new_lines(log_path, pos, bar)
            new = {item.run.run_id for item in items if item.run.run_id not in seen and _done(item)}
            if new:
                seen.update(new)
                bar.update(len(new))
            stop.wait(POLL_S)
        _echo_new_lines(log_path, pos, bar)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    try:
        rc = _wait(proc, done)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        stop.set()
        thread.join()
    new = {item.run.run_id for item in items if item.run.run_id not in seen and _done(item)}
    bar.update(len(new))
    return rc


def _wait(proc, done: Path | None) -> int | None:
    """The launch's exit code once it exits, or None once it writes ``done`` (it then waits for its next plan)."""
    if done is None:
        return proc.wait()
    while True:
        try:
            return proc.wait(timeout=POLL_S / 5)
        except subprocess.TimeoutExpired:
            if done.exists():
                return None


def _echo_new_lines(path: Path, pos: int, bar) -> int:
    with path.open() as f:
        f.seek(pos)
        chunk = f.read()
    complete = chunk[: chunk.rfind("\n") + 1]
    for line in complete.splitlines():
        # the runner's progress lines and one-line errors; never a rank's traceback ("[rank0]: ...")
        if _PROGRESS_LINE.match(line) or line.startswith(
            ("error:", "warning: corrupt", "warning: duplicate")
        ):
            bar.write(line)
    return pos + len(complete.encode())


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="run",
        desc="sweep",
        disable=not enabled,
        dynamic_ncols=True,
        bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| {elapsed}<{remaining} ETA",
    )


# --------------------------------------------------------------------------------- cluster scripts
EMIT_KINDS = ("torchrun", "slurm", "accelerate")


def _world_size_comment(profile, ws: int, runs: int, nodes: int, nproc: int) -> str:
    """A launch script's comment above one world size's command; a node's ranks are GPUs, or on a CPU profile
    processes sharing the node's cores."""
    per_node = "GPU(s)" if profile.device == "cuda" else "process(es)"
    return f"# world size {ws}: {runs} runs on {nodes} node(s) x {nproc} {per_node}"


def _launch_header(title: str, profile, others: str, port: int) -> list[str]:
    """The opening lines of a multi-node launch script (torchrun's, Accelerate's): what it launches, how to run
    it on every node, and the rendezvous variables it requires."""
    return [
        "#!/usr/bin/env bash",
        f"# {title} for profile '{profile.name}' ({len(profile.runs)} runs){others}.",
        "# Run this script on every node of the job with the same MASTER_ADDR and this node's NODE_RANK",
        "# (0 on the master).",
        "# Records go to a folder all nodes share; re-running skips finished runs.",
        "set -euo pipefail",
        ': "${MASTER_ADDR:?set MASTER_ADDR to the first node\'s address}"',
        ': "${NODE_RANK:?set NODE_RANK to this node\'s index, 0..NNODES-1}"',
        f"MASTER_PORT=${{MASTER_PORT:-{port}}}",
        "",
    ]


def _emit_accelerate(
    profile, plans, items, shape, emit_dir: Path, out: str, port: int, others: str
) -> list[Path]:
    """One Accelerate config per world size (its machines, processes and rendezvous; the machine rank comes from
    NODE_RANK at launch) and ``launch-accelerate.sh`` running ``accelerate launch -m companion.runs.train``
    with each: the project's runner under Accelerate's launcher, as Accelerate users start their jobs."""
    import yaml

    cpu = profile.device == "cpu"
    written, lines = [], _launch_header("accelerate launch commands", profile, others, port)
    for ws, plan in plans.items():
        nodes, nproc = shape[ws]
        config = {
            "compute_environment": "LOCAL_MACHINE",
            "distributed_type": "MULTI_GPU" if ws > 1 else "NO",
            "num_machines": nodes,
            "num_processes": ws,
            "machine_rank": 0,
            "main_training_function": "main",
            "mixed_precision": "no",  # each run sets its own precision (autocast or FSDP's policy)
            "rdzv_backend": "c10d" if nodes > 1 else "static",
            "same_network": True,
            "use_cpu": cpu,
        }
        path = emit_dir / f"accelerate-ws{ws}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=True))
        written.append(path)
        guard, end = ("", "") if nodes > 1 else ('if [ "$NODE_RANK" = 0 ]; then ', "; fi")
        lines.append(_world_size_comment(profile, ws, len(items[ws]), nodes, nproc))
        lines.append(
            f"{guard}accelerate launch --config_file {path} --machine_rank $NODE_RANK --main_process_ip "
            f"$MASTER_ADDR --main_process_port $MASTER_PORT -m companion.runs.train --plan {plan} --out {out}{end}"
        )
    script = emit_dir / "launch-accelerate.sh"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    return [*written, script]


def emit_launch(
    profile: Profile,
    kind: str,
    emit_dir: Path,
    out_dir: Path,
    gpus_per_node: int = 8,
    port: int = 29500,
    alongside: list[tuple[Profile, Path]] = (),
) -> list[Path]:
    """Write per-world-size plans and launch scripts for several nodes; return the files written.

    ``torchrun``: ``launch-torchrun.sh``, one multi-node rendezvous command per world size, to run on every
    node with MASTER_ADDR and NODE_RANK set. ``accelerate``: the same as ``accelerate launch`` commands, one
    Accelerate config file per world size (``accelerate-ws<N>.yaml``) and ``launch-accelerate.sh``. ``slurm``: one array script per node count whose tasks are
    the world sizes needing that many nodes; each task starts torchrun once per node with ``srun``.
    ``alongside`` (as ``run_sweep``'s): other profiles' runs in the same plans, in the order a local sweep
    launches them, each record filed under its own profile and folder.
    """
    if kind not in EMIT_KINDS:
        raise ConfigError(f"--emit {kind!r} is unknown; use {', '.join(EMIT_KINDS)}")
    if gpus_per_node < 1:
        raise ConfigError("--gpus-per-node must be at least 1")
    emit_dir, out_dir = Path(emit_dir), Path(out_dir)
    pending = [
        [Pending(run, prof.name, Path(folder)) for run in prof.runs]
        for prof, folder in [(profile, out_dir), *alongside]
    ]
    items: dict[int, list[Pending]] = {}
    for ws, launch in launch_order(pending):  # every pass of a world size in one plan, in sweep order
        items.setdefault(ws, []).extend(launch)
    several = sorted(ws for ws in items if ws > 1)
    if kind == "accelerate" and profile.device == "cpu" and several:  # before any file is written
        raise ConfigError(
            f"--emit accelerate: profile {profile.name!r} runs on CPU with world sizes {several}, and Accelerate "
            "starts several CPU processes only through MPI (mpirun), which these launch files do not set up; "
            "use --emit torchrun or --emit slurm for it"
        )
    plans: dict[int, Path] = {}
    for ws, launch in sorted(items.items()):
        if ws > gpus_per_node and ws % gpus_per_node:
            raise ConfigError(
                f"world size {ws} does not fill whole nodes of {gpus_per_node} GPUs; "
                "change --gpus-per-node or the layouts of the profiles in this launch"
            )
        plans[ws] = write_plan(
            emit_dir / "plans" / f"{profile.name}-ws{ws}.json",
            profile.name,
            [item.run for item in launch],
            _destinations(launch, profile.name, out_dir),
        )
    others = "".join(f" and profile '{p.name}' ({len(p.runs)} runs -> {d})" for p, d in alongside)
    written = list(plans.values())
    shape = {ws: (max(1, ws // gpus_per_node), min(ws, gpus_per_node)) for ws in plans}  # (nodes, procs/node)
    out = str(out_dir)
    if kind == "torchrun":
        lines = _launch_header("Launch commands", profile, others, port)
        for ws, plan in plans.items():
            nodes, nproc = shape[ws]
            guard = "" if nodes > 1 else 'if [ "$NODE_RANK" = 0 ]; then '
            end = "" if nodes > 1 else "; fi"
            lines.append(_world_size_comment(profile, ws, len(items[ws]), nodes, nproc))
            lines.append(
                f"{guard}torchrun --nnodes={nodes} --nproc-per-node={nproc} --node-rank=$NODE_RANK "
                f"--rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv-id={profile.name}-ws{ws} "
                f"-m companion.runs.train --plan {plan} --out {out}{end}"
            )
        script = emit_dir / "launch-torchrun.sh"
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)
        return written + [script]
    if kind == "accelerate":
        return written + _emit_accelerate(profile, plans, items, shape, emit_dir, out, port, others)
    by_nodes: dict[int, list[int]] = {}
    for ws in plans:
        by_nodes.setdefault(shape[ws][0], []).append(ws)
    # a CPU profile's ranks are processes on each node's cores: it asks SLURM for whole nodes, not GPUs
    gpu_request = f"\n#SBATCH --gpus-per-node={gpus_per_node}" if profile.device == "cuda" else ""
    for nodes, sizes in by_nodes.items():
        plan_list = " ".join(str(plans[ws]) for ws in sizes)
        nproc_list = " ".join(str(shape[ws][1]) for ws in sizes)
        text = f"""#!/bin/bash
# SLURM array for profile '{profile.name}'{others}: world sizes {sizes} on {nodes} node(s) each.
# Submit with: sbatch {emit_dir / f"slurm-{profile.name}-n{nodes}.sbatch"}
#SBATCH --job-name=companion-{profile.name}-n{nodes}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1{gpu_request}
#SBATCH --exclusive
#SBATCH --array=0-{len(sizes) - 1}
#SBATCH --output=slurm-%x-%A_%a.out
set -euo pipefail
PLANS=({plan_list})
NPROCS=({nproc_list})
PLAN=${{PLANS[$SLURM_ARRAY_TASK_ID]}}
NPROC=${{NPROCS[$SLURM_ARRAY_TASK_ID]}}
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --kill-on-bad-exit=1 torchrun --nnodes={nodes} --nproc-per-node=$NPROC \\
    --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:{port} --rdzv-id=$SLURM_JOB_ID-$SLURM_ARRAY_TASK_ID \\
    -m companion.runs.train --plan $PLAN --out {out}
"""
        path = emit_dir / f"slurm-{profile.name}-n{nodes}.sbatch"
        path.write_text(text)
        written.append(path)
    return written
