"""Held-out accuracy of the models on stored sweeps: scored as the validation page scores them, on every stored
sweep at once, so that a change of a model is judged on more than the one sweep a `make reproduce` measures.

    python benchmarks/model_accuracy.py                          # every data/reference/cpu/*.tar.gz
    python benchmarks/model_accuracy.py SWEEP.tar.gz data/       # archives, or folders holding runs/ and devices/
    python benchmarks/model_accuracy.py --models operator_roofline calibrated_tier flops_power_law
    python benchmarks/model_accuracy.py --pack data/ --out data/reference/cpu/   # store this checkout's sweep

A stored sweep is what one `make reproduce` measured: the run records of the profile (``runs/cpu/``), of the
off-grid profile measured alongside it (``runs/holdout/``) and the device's calibration
(``devices/cpu.json``), packed as one archive by ``--pack``. On a shared VM a sweep's accuracy moves with
the machine's state while it ran (the step-time replicate floors of four sweeps measured on one quiet evening:
4.1 to 6.7 %; of a busy one, 9.1 %), so a change of the model that helps one sweep and hurts the next is
noise: compare the mean over sweeps, each beside its own floor.

Per sweep and model: held-out MAPE of time and energy per step, pooled over the splits and per split, the
off-grid holdout (fitted on the whole sweep, scored on the off-grid runs), the exact-model floor of the runs
each group scores (``companion.energy.noise.exact_model_floor``) and the coverage of the nominal 90 %
intervals; then the mean over sweeps, and how many cells have their coverage within 85-95 % beside how
many exact intervals would on groups of the same sizes. The step-time filter, the splits and the interval level are the
validation page's (notebooks/04_validation.py, params/04_validation.yaml). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

REFERENCE = ROOT / "data" / "reference" / "cpu"
PROFILE, HOLDOUT, DEVICE = "cpu", "holdout", "cpu"
# the validation page's step-time filter and interval level, from its parameters (params/04_validation.yaml)
PAGE = yaml.safe_load((ROOT / "params" / "04_validation.yaml").read_text())
MAX_STEP_CI95_REL, LEVEL = PAGE["max_step_ci95_rel"], PAGE["level"]


# ----------------------------------------------------------------------------------------- stored sweeps
def pack(data: Path, out_dir: Path) -> Path:
    """One archive of ``data``'s sweep (runs/cpu, runs/holdout, devices/cpu.json), named after the calibration's
    time (UTC) and a hash of the content; records set aside (failed/, corrupt/), logs and locks are not packed."""
    files = sorted((data / "runs" / PROFILE).glob("*.json")) + sorted((data / "runs" / HOLDOUT).glob("*.json"))
    calibration = data / "devices" / f"{DEVICE}.json"
    if not calibration.is_file() or not files:
        raise SystemExit(f"error: {data} holds no sweep: it needs runs/{PROFILE}/*.json and devices/{DEVICE}.json "
                         "(run `make reproduce` first)")
    files.append(calibration)
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:8]
    when = json.loads(calibration.read_text())["provenance"]["measured_at"][:16].replace(":", "")  # 2026-11-24T2207
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{when}-{digest}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in files:
            info = tar.gettarinfo(str(f), arcname=str(f.relative_to(data)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""  # same bytes for the same sweep
            with f.open("rb") as fh:
                tar.addfile(info, fh)
    out.write_bytes(buf.getvalue())
    return out


def unpacked(source: Path, tmp: Path) -> Path:
    """A folder holding ``runs/`` and ``devices/``: ``source`` itself, or the archive unpacked under ``tmp``."""
    if source.is_file() and tarfile.is_tarfile(source):
        dest = tmp / source.name.split(".")[0]
        with tarfile.open(source) as tar:
            tar.extractall(dest, filter="data")
    else:
        dest = source
    if not (dest / "runs" / PROFILE).is_dir() or not (dest / "devices" / f"{DEVICE}.json").is_file():
        raise SystemExit(f"error: {source} is not a stored sweep: it needs runs/{PROFILE}/ and devices/{DEVICE}.json "
                         "(an archive of --pack, or a data/ folder after `make reproduce`)")
    return dest


# ------------------------------------------------------------------------------------------------ scoring
def score_sweep(data: Path, model_names: list[str]) -> pd.DataFrame:
    """The validation page's model scores on one stored sweep: one row per group x model x target, the groups
    being the pooled splits ('pooled'), each split and the off-grid 'holdout'."""
    from companion.energy import validation as val
    from companion.energy.models import validated_models
    from companion.energy.noise import replicate_noise
    from companion.energy.opmodel import load_device_roofs, proxy_roofs
    from companion.energy.tables import load_runs, proxies_frame, usable_runs

    dev = load_device_roofs(DEVICE, "fp32", root=data / "devices")
    roofs = {dev.name: proxy_roofs(dev)}
    df, _ = usable_runs(proxies_frame(load_runs(data / "runs" / PROFILE), roofs), MAX_STEP_CI95_REL)
    every = validated_models(dev)
    models = {k: every[k] for k in model_names}
    pred = val.validate_models(df, models, level=LEVEL)
    holdout_noise = None
    holdout_dir = data / "runs" / HOLDOUT
    if any(holdout_dir.glob("*.json")):
        holdout, _ = usable_runs(proxies_frame(load_runs(holdout_dir), roofs), MAX_STEP_CI95_REL)
        pred = pd.concat([pred, val.score_holdout(df, holdout, models, LEVEL)], ignore_index=True)
        holdout_noise = replicate_noise(holdout)
    by_split, pooled = val.score_splits(pred, replicate_noise(df), holdout_noise, LEVEL)
    return pd.concat([pooled.assign(split="pooled"), by_split], ignore_index=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweeps", nargs="*", type=Path, help="archives or folders (default: data/reference/cpu/*.tar.gz)")
    ap.add_argument("--models", nargs="+", default=["operator_roofline"])
    ap.add_argument("--pack", type=Path, metavar="DATA", help="pack the sweep under DATA (a data/ folder) and exit")
    ap.add_argument("--out", type=Path, default=REFERENCE, help="where --pack writes (default data/reference/cpu)")
    args = ap.parse_args(argv)
    if args.pack:
        print(f"wrote {pack(args.pack, args.out)}")
        return 0
    from companion.energy.models import validated_models

    known = sorted(validated_models(None))  # the names do not depend on the device
    unknown = sorted(set(args.models) - set(known))
    if unknown:
        hint = (" (sweeps given after --models are read as model names: put them before it)"
                if any(Path(u).exists() for u in unknown) else "")
        raise SystemExit(f"error: unknown model(s) {unknown}; choose from {known}{hint}")
    sweeps = args.sweeps or sorted(REFERENCE.glob("*.tar.gz"))
    if not sweeps:
        raise SystemExit(f"error: no stored sweeps in {REFERENCE}; pass archives or folders, or --pack one")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in sweeps:
            scores = score_sweep(unpacked(source, Path(tmp)), args.models)
            rows.append(scores.assign(sweep=source.name.split(".")[0] if source.is_file() else str(source)))
    table = pd.concat(rows, ignore_index=True)
    pd.set_option("display.width", 200)
    order = ["pooled", *[s for s in table.split.unique() if s != "pooled"]]
    for (model, target), t in table.groupby(["model", "target"], sort=False):
        print(f"\n{model}, {target} per step: held-out MAPE % (exact-model floor of the runs scored; coverage of the "
              f"{LEVEL:.0%} intervals %)")
        cell = t.assign(cell=[f"{m:5.1f} ({'  -' if pd.isna(f) else f'{f:4.1f}'}; {c:3.0f})"
                              for m, f, c in zip(t.mape_pct, t.exact_floor_pct, t.coverage_pct)])
        wide = cell.pivot(index="sweep", columns="split", values="cell")[[s for s in order if s in set(t.split)]]
        mean = t.groupby("split")[["mape_pct", "exact_floor_pct", "coverage_pct"]].mean()
        wide.loc["mean"] = [f"{mean.mape_pct[s]:5.1f} ({mean.exact_floor_pct[s]:4.1f}; {mean.coverage_pct[s]:3.0f})"
                            for s in wide.columns]
        print(wide.to_string())
        print(coverage_cells(t))
    return 0


def coverage_cells(t: pd.DataFrame, band=(85.0, 95.0)) -> str:
    """How many cells (sweep x group) have their intervals' coverage within ``band``, beside how many exact
    intervals would on groups of the same sizes, on average: a count well below that says the intervals are
    off, one near it says the band is as often missed as sampling alone misses it."""
    from companion.energy.validation import coverage_consistent, expected_in_range

    n = (t.n - t.n_unbounded).astype(int)
    inside = int(coverage_consistent(t.coverage_pct, *band).sum())
    return (f"coverage within {band[0]:.0f}-{band[1]:.0f} %: {inside} of {len(t)} cells; exact {LEVEL:.0%} "
            f"intervals on groups of these sizes: {expected_in_range(n, LEVEL, band):.1f} expected")


if __name__ == "__main__":
    sys.exit(main())
