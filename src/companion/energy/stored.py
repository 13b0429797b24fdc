"""Stored sweeps: each build's measurements packed as one archive, and the models scored on all of them.

A stored sweep is what one `make reproduce` measured: the run records of the profile (``runs/cpu/``), of the
off-grid profile measured alongside it (``runs/holdout/``) and the device's calibration (``devices/cpu.json``
in an archive),
packed as one archive (``pack``) under ``data/reference/<profile>/``. Scored again by today's code
(``score_sweep``: the validation page's splits, step-time filter and interval level), the stored sweeps judge
what one build cannot: a split of one build scores from a handful to a hundred held-out runs, and on a few
dozen even exact 90 % intervals cover anywhere from about 75 to 100 % of them, so how close to 90 % a split's
coverage is, is a question for all builds together (``pooled_coverage``). On a shared VM a sweep's accuracy also moves with the machine's state while it ran, so a
change of a model that helps one sweep and hurts the next is noise: compare over sweeps, each beside its floor.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from companion.errors import ConfigError
from companion.energy.intervals import LEVEL

PROFILE, HOLDOUT, TEST, DEVICE = "cpu", "holdout", "testset", "cpu"
BAND_PCT = (85.0, 95.0)  # the coverage a nominal 90 % interval is asked to show in every split


# ----------------------------------------------------------------------------------------- archives
def _sweep_files(data: Path) -> list[Path]:
    """The files of ``data``'s sweep that an archive holds: run records of the profile and of the off-grid profiles
    (validation and test sets; records set aside in failed/ or corrupt/, logs and locks are not among them), then the calibration."""
    data = Path(data)
    from companion.energy.calibration import calibration_path

    files = [f for p in (PROFILE, HOLDOUT, TEST) for f in sorted((data / "runs" / p).glob("*.json"))]
    calibration = calibration_path(DEVICE, data / "devices")
    if calibration is None or not files:
        raise ConfigError(
            f"{data} holds no sweep: it needs runs/{PROFILE}/*.json and a calibration in devices/ "
            "(run `make reproduce` first)"
        )
    return [*files, calibration]


def archive_name(data: Path) -> str:
    """The name ``pack`` gives ``data``'s sweep: its calibration's time (UTC) and a hash of its files' content."""
    files = _sweep_files(data)
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:8]
    when = json.loads(files[-1].read_text())["provenance"]["measured_at"][:16].replace(
        ":", ""
    )  # 2026-11-24T2207
    return f"{when}-{digest}"


def pack(data: Path, out_dir: Path) -> Path:
    """One archive of ``data``'s sweep (runs/cpu, runs/holdout, runs/testset, devices/cpu.json), named by ``archive_name``;
    records set aside (failed/, corrupt/), logs and locks are not packed."""
    data = Path(data)
    files = _sweep_files(data)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{archive_name(data)}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in files:
            # an archive is one host's sweep: its calibration goes by the device's plain name inside it
            name = f"devices/{DEVICE}.json" if f == files[-1] else str(f.relative_to(data))
            info = tar.gettarinfo(str(f), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = (
                0,
                0,
                0,
                "",
                "",
            )  # same bytes for the same sweep
            with f.open("rb") as fh:
                tar.addfile(info, fh)
    out.write_bytes(buf.getvalue())
    return out


def unpacked(source: Path, tmp: Path) -> Path:
    """A folder holding ``runs/`` and ``devices/``: ``source`` itself, or the archive unpacked under ``tmp``."""
    source = Path(source)
    if source.is_file() and tarfile.is_tarfile(source):
        dest = Path(tmp) / source.name.split(".")[0]
        with tarfile.open(source) as tar:
            tar.extractall(dest, filter="data")
    else:
        dest = source
    from companion.energy.calibration import calibration_path

    if not (dest / "runs" / PROFILE).is_dir() or calibration_path(DEVICE, dest / "devices") is None:
        raise ConfigError(
            f"{source} is not a stored sweep: it needs runs/{PROFILE}/ and a calibration in devices/ "
            "(an archive of `pack`, or a data/ folder after `make reproduce`)"
        )
    return dest


def sweep_name(source: Path) -> str:
    """An archive's name without its suffixes (its calibration's time and content hash), or a folder's path."""
    source = Path(source)
    return source.name.split(".")[0] if source.is_file() else str(source)


def stored_sweeps(folder: Path) -> list[Path]:
    """The archives under ``folder`` (``data/reference/<profile>/``), oldest first; none where it is missing."""
    return sorted(Path(folder).glob("*.tar.gz")) if Path(folder).is_dir() else []


def measured_commit(data: Path) -> str | None:
    """The commit (short) whose code measured a sweep: its first run record's provenance; None if unrecorded."""
    for record in sorted((Path(data) / "runs" / PROFILE).glob("*.json")):
        try:
            sha = ((json.loads(record.read_text()).get("provenance") or {}).get("git") or {}).get("sha")
        except (OSError, ValueError):
            continue
        return sha[:7] if isinstance(sha, str) else None
    return None


# ------------------------------------------------------------------------------------------------ scoring
def score_sweep(
    data: Path, model_names, level: float, max_step_ci95_rel: float, host_corrected: bool = True
) -> pd.DataFrame:
    """The validation page's model scores on one stored sweep (``validation.score_build``, as the page calls it):
    one row per group x model x target, the groups being the pooled splits ('pooled'), each split and the
    off-grid groups ('holdout', and 'test' where the archive has the test set); each row also says on which
    device and host the sweep ran and how its energy was obtained. ``host_corrected`` False: every run as
    measured (``build_runs``)."""
    from companion.energy import validation as val
    from companion.energy.registry import validated_models

    dev, runs, off_grid = build_runs(data, host_corrected)
    every = validated_models(dev)
    b = val.score_build(runs, off_grid, {k: every[k] for k in model_names}, level, max_step_ci95_rel)
    return pd.concat([b.pooled.assign(split="pooled"), b.by_split], ignore_index=True).assign(
        **_how_obtained(b.runs)
    )


def build_runs(data: Path, host_corrected: bool = True):
    """A stored build's runs as it is scored, from a folder holding ``runs/`` and ``devices/`` (``unpacked``): the
    device's roofs (its calibration, at the runs' precision), the sweep's runs with their proxies, and the off-grid
    groups (``off_grid_sets``: archives packed before the test set existed have none; one measured on an earlier
    draw is not scored on it, that draw having been seen before the interval rule that followed it:
    docs/decisions.md). No run is filtered. Every group is expressed at the sweep's typical host speed
    (``tables.host_corrected``; runs from before the host-speed timing are as measured), unless ``host_corrected``
    is False."""
    from companion.energy.calibration import load_device_roofs
    from companion.energy.opmodel import proxy_roofs
    from companion.energy.tables import host_speed_reference, load_runs, proxies_frame

    raw = load_runs(Path(data) / "runs" / PROFILE)
    dev = load_device_roofs(DEVICE, str(raw.precision.iloc[0]), root=Path(data) / "devices")
    roofs = {dev.name: proxy_roofs(dev)}
    host = host_speed_reference(raw) if host_corrected else None
    off_grid = off_grid_sets(Path(data) / "runs" / HOLDOUT, Path(data) / "runs" / TEST, roofs, host)
    return dev, proxies_frame(raw, roofs, host), off_grid


def current_test_configs() -> set[str]:
    """The configurations (``config_id``) of the test set's current draw (profile ``testset``): a stored build's
    test runs count only where they are these."""
    from companion.runs.profiles import load_profile

    return {r.config_id for r in load_profile(TEST).runs}


def off_grid_sets(
    holdout: Path | None,
    test: Path | None,
    measured_roofs: dict | None = None,
    host_reference: pd.DataFrame | None = None,
) -> dict:
    """{'holdout': the validation set, 'test': the test set} from their record folders (None: not measured),
    with their proxies (``tables.off_grid_runs``, at the sweep's typical host speed ``host_reference``); of the
    test set, only its current draw (``current_draw``)."""
    from companion.energy.tables import off_grid_runs

    off_grid = off_grid_runs({"holdout": holdout, "test": test}, measured_roofs, host_reference)
    off_grid["test"] = current_draw(off_grid["test"])
    return off_grid


def current_draw(test: pd.DataFrame | None) -> pd.DataFrame | None:
    """The test runs of the current draw among ``test`` (a build's, or a checkout's whose folder still holds an
    earlier draw's records beside the new ones); None where there are none."""
    if test is None:
        return None
    kept = test[test.config_id.isin(current_test_configs())].reset_index(drop=True)
    return kept if len(kept) else None


def _how_obtained(runs: pd.DataFrame) -> dict:
    """On which device a sweep's runs ran and how their energy was obtained, as a score row's columns."""
    hosts = runs.host.astype(str) if "host" in runs else pd.Series(["unknown-cpu"])
    return {
        "device_name": ", ".join(sorted(set(runs.device_name.astype(str)))),
        "host": ", ".join(sorted(set(hosts))),
        "energy_measured": bool(runs.energy_measured.astype(bool).all()),
        "energy_source": "; ".join(sorted(set(runs.energy_source.astype(str)))),
    }


SCORE_COLUMNS = [
    "sweep",
    "commit",
    "split",
    "model",
    "target",
    "n",
    "n_unbounded",
    "coverage_pct",
    "mape_pct",
    "exact_floor_pct",
    "device_name",
    "host",
    "energy_measured",
    "energy_source",
]
THIS_BUILD = "this build"


def this_build_scores(validation: dict, runs: pd.DataFrame, commit: str | None, model_names) -> pd.DataFrame:
    """This build's own scores as ``score_sweep`` gives a stored sweep's (``sweep`` = ``THIS_BUILD``): read from
    its ``validation.json`` (stage 04 scored its runs with the same models, splits and level; those of
    ``model_names`` are kept), with the device and the energy's kind from its ``runs.csv``. Empty where the
    validation holds no model scores."""
    rows = [*(validation.get("model_scores_pooled") or []), *(validation.get("model_scores") or [])]
    if not rows or runs.empty:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    t = pd.DataFrame(rows)
    if "split" not in t:
        t["split"] = "pooled"
    t["split"] = t.split.fillna("pooled")
    t = t[t.model.isin(check_models(model_names))]
    return (
        t.assign(sweep=THIS_BUILD, commit=commit, **_how_obtained(runs))
        .reindex(columns=SCORE_COLUMNS)
        .reset_index(drop=True)
    )


def check_models(model_names) -> list[str]:
    """``model_names`` as a list, each one the validation knows (a one-line error names the unknown ones)."""
    from companion.energy.registry import validated_models

    names = [model_names] if isinstance(model_names, str) else list(model_names)
    known = sorted(validated_models(None))  # the names do not depend on the device
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        raise ConfigError(f"unknown model(s) {unknown}; choose from {known}")
    return names


def _score_one(source: str, model_names: list[str], level: float, max_step_ci95_rel: float) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        data = unpacked(Path(source), Path(tmp))
        scores = score_sweep(data, model_names, level, max_step_ci95_rel)
        return scores.assign(sweep=sweep_name(Path(source)), commit=measured_commit(data)).reindex(
            columns=SCORE_COLUMNS
        )


# The code a stored sweep's scores depend on (besides the archive and the arguments): a change to any of these
# files re-scores every stored sweep; a change elsewhere reads the cached scores.
SCORED_BY = (
    "calibration.py",
    "efficiency.py",
    "fit.py",
    "hardware.py",
    "intervals.py",
    "laws.py",
    "models.py",
    "noise.py",
    "opmodel.py",
    "proxies.py",
    "registry.py",
    "stored.py",
    "tables.py",
    "validation.py",
    "resources/hardware.yaml",
    "../runs/profiles/testset.yaml",  # the test set's current draw (current_test_configs) and its run ids
    "../runs/profiles.py",
    "../runs/config.py",
    "../runs/records.py",  # loading the run records; the calibration's precision
    "../runs/provenance.py",  # a run's host (its CPU model) and its device's name
)


def model_digest() -> str:
    """A digest of the scoring code (``SCORED_BY``): part of every cached score's key."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in SCORED_BY:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def score_key(
    source: Path, model_names, level: float, max_step_ci95_rel: float, digest: str | None = None
) -> str:
    """The cache key of one stored sweep's scores: the archive's content, the scoring code and the arguments."""
    h = hashlib.sha256(Path(source).read_bytes() if Path(source).is_file() else str(source).encode())
    h.update(
        json.dumps(
            [sorted(model_names), float(level), float(max_step_ci95_rel), digest or model_digest()]
        ).encode()
    )
    return h.hexdigest()[:16]


def _read_cached(path: Path) -> pd.DataFrame | None:
    try:
        t = pd.read_csv(
            path,
            dtype={
                "sweep": str,
                "commit": str,
                "split": str,
                "model": str,
                "target": str,
                "device_name": str,
                "host": str,
                "energy_source": str,
            },
        )
    except (OSError, ValueError):
        return None
    return t.reindex(columns=SCORE_COLUMNS) if set(SCORE_COLUMNS) <= set(t.columns) else None


def _write_cached(cache: Path, name: str, key: str, scores: pd.DataFrame) -> None:
    """Write one sweep's scores under its key (atomically) and drop its scores under older keys."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}.{key}.csv"
    tmp = path.with_name(f".{path.name}.tmp")
    scores.to_csv(tmp, index=False)
    tmp.replace(path)
    for old in cache.glob(f"{name}.*.csv"):
        if old != path:
            old.unlink(missing_ok=True)


def score_stored(
    sources, model_names, level: float, max_step_ci95_rel: float, workers: int = 1, cache: Path | None = None
) -> pd.DataFrame:
    """``score_sweep`` of every stored sweep (archives or data/ folders), ``workers`` at a time (separate
    processes: a sweep's folds take a few seconds of one core each): one frame, with each row's ``sweep`` and the
    ``commit`` that measured it. Empty without sources.

    With ``cache`` (a folder, e.g. ``data/reference/cpu/scores/``), an archive's scores are read from there when
    its key (``score_key``: its content, the scoring code, the arguments) matches, and written there when
    computed: a build re-scores the stored sweeps only after the scoring code changed."""
    names = check_models(model_names)
    sources = [str(s) for s in sources]
    if not sources:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    digest = model_digest()
    keys = {
        s: score_key(Path(s), names, level, max_step_ci95_rel, digest) for s in sources if Path(s).is_file()
    }
    found = {}
    if cache is not None:
        for s, key in keys.items():
            t = _read_cached(Path(cache) / f"{sweep_name(Path(s))}.{key}.csv")
            if t is not None:
                found[s] = t
    todo = [s for s in sources if s not in found]
    if workers <= 1 or len(todo) <= 1:
        parts = [_score_one(s, names, level, max_step_ci95_rel) for s in todo]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from functools import partial

        one = partial(_score_one, model_names=names, level=level, max_step_ci95_rel=max_step_ci95_rel)
        with ProcessPoolExecutor(
            max_workers=min(workers, len(todo)), mp_context=mp.get_context("spawn")
        ) as pool:
            parts = list(pool.map(one, todo))
    computed = dict(zip(todo, parts))
    if cache is not None:
        for s, t in computed.items():
            if s in keys:
                _write_cached(Path(cache), sweep_name(Path(s)), keys[s], t)
    return pd.concat([found.get(s, computed.get(s)) for s in sources], ignore_index=True)


# ------------------------------------------------------------------------------------- over all sweeps
def pooled_coverage(
    table: pd.DataFrame,
    level: float = LEVEL,
    band=BAND_PCT,
    n_boot: int = 2000,
    seed: int = 0,
    interval: float = 0.9,
) -> pd.DataFrame:
    """Per model x target x group, over every sweep of ``table`` (``score_stored``'s rows; sweeps with no
    bounded interval in a group left out of it): the held-out predictions with a bounded interval (``n``), how
    many of them their interval covered, that share (%) with its ``interval`` range from resampling whole sweeps
    (the predictions of one sweep share its machine state and its fits, so they are not independent draws) and
    each resampled sweep's count from its own share, whether that share lies within ``band``; the mean, lowest and
    highest MAPE of the sweeps beside their mean exact-model floor; how many sweeps' own coverage lies within,
    below and above ``band``, beside how many exact ``level`` intervals (each covering its run independently
    with probability ``level``) would put there on groups of the same sizes."""
    from companion.energy.validation import coverage_consistent, expected_in_range

    rng = np.random.default_rng(seed)
    rows = []
    for (model, target, split), g in table.groupby(["model", "target", "split"], sort=False):
        g = g[
            (g.n - g.n_unbounded > 0) & g.coverage_pct.notna()
        ]  # a sweep with no bounded interval says nothing
        if g.empty:
            continue
        n = (g.n - g.n_unbounded).to_numpy(int)
        covered = np.rint(g.coverage_pct.to_numpy(float) * n / 100)
        share = 100 * covered.sum() / n.sum()
        # whole sweeps resampled, and within each the count drawn again from its own share (binomially): with
        # few sweeps, or sweeps that happen to agree, resampling sweeps alone would give a range of no width
        pick = rng.integers(0, len(g), size=(n_boot, len(g)))
        boot = 100 * rng.binomial(n[pick], covered[pick] / n[pick]).sum(axis=1) / n[pick].sum(axis=1)
        a = (1 - interval) / 2
        own = g.coverage_pct.to_numpy(float)
        rows.append(
            {
                "model": model,
                "target": target,
                "split": split,
                "sweeps": len(g),
                "n": int(n.sum()),
                "n_min": int(n.min()),
                "n_max": int(n.max()),
                "covered": int(covered.sum()),
                "coverage_pct": share,
                "coverage_lo_pct": float(np.quantile(boot, a)),
                "coverage_hi_pct": float(np.quantile(boot, 1 - a)),
                "range_pct": 100 * interval,
                "in_band": bool(coverage_consistent(share, *band)),
                "sweeps_in_band": int(coverage_consistent(own, *band).sum()),
                "sweeps_below": int(np.sum(own < band[0] - 1e-9)),
                "sweeps_above": int(np.sum(own > band[1] + 1e-9)),
                "sweeps_in_band_exact": expected_in_range(n, level, band),
                "sweeps_below_exact": expected_in_range(n, level, (-1.0, band[0] - 1e-6)),
                "sweeps_above_exact": expected_in_range(n, level, (band[1] + 1e-6, 101.0)),
                "mape_pct": float(g.mape_pct.mean()),
                "mape_min_pct": float(g.mape_pct.min()),
                "mape_max_pct": float(g.mape_pct.max()),
                "exact_floor_pct": float(g.exact_floor_pct.mean()),
            }
        )
    return pd.DataFrame(rows, columns=POOLED_COLUMNS)


POOLED_COLUMNS = [
    "model",
    "target",
    "split",
    "sweeps",
    "n",
    "n_min",
    "n_max",
    "covered",
    "coverage_pct",
    "coverage_lo_pct",
    "coverage_hi_pct",
    "range_pct",
    "in_band",
    "sweeps_in_band",
    "sweeps_below",
    "sweeps_above",
    "sweeps_in_band_exact",
    "sweeps_below_exact",
    "sweeps_above_exact",
    "mape_pct",
    "mape_min_pct",
    "mape_max_pct",
    "exact_floor_pct",
]


def builds_meeting_band(
    table: pd.DataFrame, level: float = LEVEL, band=BAND_PCT, model: str = "operator_roofline"
) -> pd.DataFrame:
    """Per target: how many sweeps have every group's coverage within ``band`` at once (the splits and the
    validation set's off-grid runs, as the verdict's coverage criterion asks: the pool of the splits and the test
    set left out), beside how many would with exact ``level`` intervals on groups of their sizes (groups taken as
    independent: they share runs, so a rough figure)."""
    from companion.energy.validation import chance_in_range, coverage_consistent

    rows = []
    t = table[
        (table.model == model)
        & ~table.split.isin(["pooled", "test"])
        & (table.n - table.n_unbounded > 0)
        & table.coverage_pct.notna()
    ]  # a group with no bounded interval counts in neither figure
    for target, g in t.groupby("target", sort=False):
        meets, expected = 0, 0.0
        for _, s in g.groupby("sweep"):
            meets += int(coverage_consistent(s.coverage_pct.to_numpy(float), *band).all())
            expected += chance_in_range((s.n - s.n_unbounded).astype(int), level, band) or 0.0
        rows.append(
            {"target": target, "sweeps": int(g.sweep.nunique()), "meeting": meets, "meeting_exact": expected}
        )
    return pd.DataFrame(rows, columns=["target", "sweeps", "meeting", "meeting_exact"])


def coverage_cells(t: pd.DataFrame, level: float = LEVEL, band=BAND_PCT) -> str:
    """How many cells (sweep x group) have their intervals' coverage within ``band``, beside how many exact
    intervals would on groups of the same sizes, on average: a count well below that says the intervals are
    off, one near it says the band is as often missed as sampling alone misses it."""
    from companion.energy.validation import coverage_consistent, expected_in_range

    n = (t.n - t.n_unbounded).astype(int)
    inside = int(coverage_consistent(t.coverage_pct, *band).sum())
    return (
        f"coverage within {band[0]:.0f}-{band[1]:.0f} %: {inside} of {len(t)} cells; exact {level:.0%} "
        f"intervals on groups of these sizes: {expected_in_range(n, level, band):.1f} expected"
    )
