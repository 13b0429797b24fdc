"""Where a finished `make reproduce` spent its time, read from what it left on disk: no timer of its own, so it
can be run after the fact on any checkout (a fresh clone's included) and compared with the 10-minute budget.

    make reproduce && python benchmarks/reproduce_cost.py           # this checkout, profile cpu
    python benchmarks/reproduce_cost.py --root /path/to/clone --budget-s 600

The phases and where each one's time comes from:

* set-up: the virtual environment's creation (``.venv/pyvenv.cfg``) to ``.venv/.setup-done``;
* sweep: stage 01's notebook (papermill's start and end), and inside it the run records of the profile and of the
  profiles measured with it: per world size the runs' wall time (``provenance``: whole seconds), their measured
  windows (``time.measured_s``) and timed probe steps, the rest of each run (model build, sharding, the warm-up
  step), and the sweep's time outside every run (launches: interpreters, torchrun, rendezvous); and how many runs
  were measured to their time cap (``time.stop_reason``), the host's state in one figure;
* calibrate: the calibration file's own ``provenance.wall_s``;
* stages 02-08: from the first one's start to the last one's end, each notebook's papermill duration (two may run
  at once) and the time in none of them (an interpreter and a kernel per stage, the off-grid profiles' resume
  checks);
* book: the last stage's end to ``_build/html/index.html``.

Prints figures and the total against ``--budget-s``; asserts nothing (exit status 0 whatever the total). Run
records carry whole seconds, so the per-run sums are good to a few seconds over a sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companion.report.stages import profile_name  # noqa: E402

SWEEP_STAGE = "01_runs"


@dataclass
class RunGroup:
    """The runs of one world size: how many, their wall time, measured windows and timed probe steps (s)."""

    runs: int = 0
    wall_s: float = 0.0
    measured_s: float = 0.0
    probe_s: float = 0.0
    at_cap: int = 0  # runs measured to their time cap, their CI target not reached sooner

    @property
    def other_s(self) -> float:
        """Inside runs but outside their windows and probes: the model's build, its sharding, the warm-up step."""
        return self.wall_s - self.measured_s - self.probe_s


@dataclass
class Cost:
    """The phases of one `make reproduce` (s; None where the tree lacks what times a phase)."""

    setup_s: float | None = None
    sweep_s: float | None = None
    by_world: dict[int, RunGroup] = field(default_factory=dict)
    # the sweep's time between its first run's start and last run's end in no run (launches)
    outside_runs_s: float | None = None
    # stage 01 before its first run (imports, the first launch) and after its last
    sweep_rest_s: float | None = None
    calibrate_s: float | None = None
    stages_s: dict[str, float] = field(default_factory=dict)  # stage -> papermill duration, 02 onwards
    stages_span_s: float | None = None  # the first of them starting to the last ending (they may overlap)
    between_stages_s: float | None = None  # of that span, the time in no stage
    book_s: float | None = None
    total_s: float | None = None


def _mtime(path: Path) -> datetime | None:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc) if path.is_file() else None


def _stamp(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def notebook_times(executed: Path, profile: str) -> dict[str, tuple[datetime, datetime]]:
    """{stage: (start, end)} of the notebooks papermill executed into ``executed`` (book/generated) for
    ``profile`` (a name or a .yaml path); an error where they were executed for another profile."""
    want = profile_name(profile)
    out = {}
    for nb in sorted(executed.glob("*.ipynb")):
        meta = json.loads(nb.read_text()).get("metadata", {}).get("papermill", {})
        ran_for = profile_name(str((meta.get("parameters") or {}).get("profile", profile)))
        if ran_for != want:
            raise SystemExit(
                f"error: {nb} was executed for profile {ran_for!r}, not {want!r}; pass --profile {ran_for}"
            )
        if meta.get("start_time") and meta.get("end_time"):
            out[nb.stem] = (_stamp(meta["start_time"]), _stamp(meta["end_time"]))
    return out


def run_groups(
    folders: list[Path], window: tuple[datetime, datetime] | None = None
) -> tuple[dict[int, RunGroup], tuple[datetime, datetime] | None, str | None]:
    """Per world size, the finished runs' times in ``folders`` (those inside ``window``, stage 01's, where it is
    known: records of earlier sweeps stay in data/runs/), the span from the first run's start to the last one's
    end (None without runs), and the device the records name."""
    groups: dict[int, RunGroup] = defaultdict(RunGroup)
    first = last = device = None
    slack = timedelta(seconds=1)  # records carry whole seconds
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            rec = json.loads(path.read_text())
            if rec.get("status") != "ok":
                continue
            prov, t = rec["provenance"], rec["time"]
            start, end = _stamp(prov["started_at"]), _stamp(prov["finished_at"])
            if window is not None and (start < window[0] - slack or end > window[1] + slack):
                continue
            g = groups[int(rec["config"]["world_size"])]
            g.runs += 1
            g.wall_s += (end - start).total_seconds()
            g.measured_s += float(t["measured_s"])
            g.probe_s += float(sum(t.get("probe_step_s") or []))
            g.at_cap += t.get("stop_reason") == "max_time"
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
            device = device or rec["config"].get("device_name")
    return dict(sorted(groups.items())), (first, last) if first is not None else None, device


# a fresh `make reproduce` starts its sweep seconds after its set-up; a longer gap means the environment was made
# by an earlier command, and neither the set-up nor the total belong to this build
SETUP_GAP_S = 60.0


def cost(root: Path, profile: str = "cpu", calibration: Path | None = None) -> Cost:
    """The phases of the `make reproduce` whose outputs are under ``root`` (a checkout) for ``profile``."""
    from companion.energy.calibration import calibration_path
    from companion.runs.profiles import load_profile

    c = Cost()
    venv = root / ".venv"
    created, set_up = _mtime(venv / "pyvenv.cfg"), _mtime(venv / ".setup-done")
    stages = notebook_times(root / "book" / "generated", profile)
    window = stages.pop(SWEEP_STAGE, None)
    if window is not None:
        c.sweep_s = (window[1] - window[0]).total_seconds()
    if created and set_up and (window is None or (window[0] - set_up).total_seconds() <= SETUP_GAP_S):
        c.setup_s = (set_up - created).total_seconds()
    else:
        created = None  # no total either
    prof = load_profile(profile)
    names = [prof.name, *(load_profile(n).name for n in prof.measured_with)]
    folders = [root / "data" / "runs" / name for name in names]
    c.by_world, span, device = run_groups([f for f in folders if f.is_dir()], window)
    if span is not None:
        c.outside_runs_s = (span[1] - span[0]).total_seconds() - sum(g.wall_s for g in c.by_world.values())
        if window is not None:
            c.sweep_rest_s = c.sweep_s - (span[1] - span[0]).total_seconds()
    devices = root / "data" / "devices"
    path = calibration or calibration_path(device or prof.device, devices)
    if path is None:  # a CPU's file is named by its host: another host's tree names its own
        found = sorted(devices.glob(f"{device or prof.device}*.json"), key=lambda p: p.stat().st_mtime)
        path = found[-1] if found else None
    if path is not None:
        c.calibrate_s = json.loads(Path(path).read_text()).get("provenance", {}).get("wall_s")
    if stages:
        c.stages_s = {name: (end - start).total_seconds() for name, (start, end) in sorted(stages.items())}
        begin = min(start for start, _ in stages.values())
        finish = max(end for _, end in stages.values())
        c.stages_span_s = (finish - begin).total_seconds()
        c.between_stages_s = c.stages_span_s - _union_s(stages.values())
        index = _mtime(root / "_build" / "html" / "index.html")
        if index:
            c.book_s = (index - finish).total_seconds()
            if created:
                c.total_s = (index - created).total_seconds()
    return c


def _union_s(intervals) -> float:
    """Seconds covered by at least one of ``intervals`` ((start, end) pairs)."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += (end - start).total_seconds()
            reach = end
        elif end > reach:
            total += (end - reach).total_seconds()
            reach = end
    return total


def report(c: Cost, budget_s: float) -> str:
    def s(x):
        return "n/a" if x is None else f"{x:.0f} s"

    lines = [f"{'phase':<40}{'time':>9}"]
    add = lambda name, x: lines.append(f"{name:<40}{s(x):>9}")  # noqa: E731
    add("set-up", c.setup_s)
    add("sweep (stage 01)", c.sweep_s)
    for world, g in c.by_world.items():
        add(f"  {g.runs} runs of {world} rank{'s' if world > 1 else ''}", g.wall_s)
        add("    in measured windows", g.measured_s)
        add("    in timed probe steps", g.probe_s)
        add("    build, sharding, warm-up step", g.other_s)
    add("  between runs (launches)", c.outside_runs_s)
    add("  before the first run, after the last", c.sweep_rest_s)
    add("calibrate", c.calibrate_s)
    add("stages 02-08, first start to last end", c.stages_span_s)
    for name, x in c.stages_s.items():
        add(f"  stage {name}", x)
    add("  in no stage", c.between_stages_s)
    add("book", c.book_s)
    add("total (venv created -> book)", c.total_s)
    if c.total_s is not None:
        parts = [c.setup_s, c.sweep_s, c.calibrate_s, c.stages_span_s, c.book_s]
        add("  in none of the above", c.total_s - sum(x for x in parts if x is not None))
    runs = sum(g.runs for g in c.by_world.values())
    if runs:
        # what a sweep costs depends on the host's state: on a quiet host many runs stop at their CI target, on a
        # busy one every run is measured to its time cap (docs/decisions.md, "The cost of make reproduce")
        lines.append(
            f"runs measured to their time cap: {sum(g.at_cap for g in c.by_world.values())} of {runs} "
            "(the others reached their CI target sooner: on a busy host nearly every run goes to its cap)"
        )
    if c.total_s is not None:
        verdict = "within" if c.total_s <= budget_s else f"over by {c.total_s - budget_s:.0f} s"
        lines.append(f"budget {budget_s:.0f} s: {verdict}")
    else:
        lines.append(
            "no total: the tree lacks the built book or its virtual environment's markers, or the environment "
            "predates this build"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout make reproduce ran in (default: this one)"
    )
    ap.add_argument("--profile", default="cpu")
    ap.add_argument(
        "--calibration", type=Path, default=None, help="the calibration file (default: the host's)"
    )
    ap.add_argument("--budget-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    print(report(cost(args.root.resolve(), args.profile, args.calibration), args.budget_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
