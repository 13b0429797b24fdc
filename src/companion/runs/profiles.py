"""Named sweeps: a profile file is a grid of run configurations.

A profile is YAML (``src/companion/profiles/<name>.yaml``, or any path)::

    description: what this sweep is for
    device: cpu                 # cpu | cuda
    precision: fp32             # default fp32 on cpu, bf16 on cuda
    base: {layers: 2, hidden: 128, heads: 4, seq_len: 128, batch_size: 8, warmup_steps: 3}
    groups:
      - name: depth-width
        vary: {layers: [1, 2, 4]}                 # cartesian product ...
        zip: {hidden: [64, 128, 256], heads: [2, 4, 8]}   # ... times lists varied together
        set: {seq_len: 64}                        # fixed overrides for this group
        layouts: [tp1-dp1, tp2-dp1, tp1-dp2]
        replicates: 2                             # measure each configuration twice (default: top level's)
    replicates: 2               # every configuration measured this many times (default 1)
    measured_with: [holdout]    # profiles (names or paths) whose runs share this sweep's launches

Replicates share a configuration (``config_id``) and differ in ``replicate`` (0, 1, ...); the sweep runs
them in passes, every configuration once and then all again, so a replicate is never adjacent to its twin
and slow drift of the machine shows as replicate noise instead of a bias of one block of runs.

Every field name is a flat config field (see ``companion.runs.config``). The whole grid is validated when the
profile is loaded, so a bad grid fails before anything runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import yaml

from companion.errors import ConfigError
from companion.runs.config import Layout, RunConfig, build_run
from companion.paths import PROFILES_DIR

TOP_LEVEL_KEYS = {
    "description",
    "device",
    "device_name",
    "precision",
    "meter",
    "country",
    "seed",
    "base",
    "groups",
    "replicates",
    "measured_with",
}
GROUP_KEYS = {"name", "vary", "zip", "set", "layouts", "replicates"}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    path: Path
    device: str
    runs: tuple[RunConfig, ...]
    groups: dict[str, tuple[str, ...]]  # group name -> run ids
    measured_with: tuple[str, ...] = ()  # profiles whose runs share this one's launches (``sweep.run_sweep``)

    def by_world_size(self) -> dict[int, list[RunConfig]]:
        """Runs grouped by world size, smallest first: one launch per world size."""
        out: dict[int, list[RunConfig]] = {}
        for r in self.runs:
            out.setdefault(r.layout.world_size, []).append(r)
        return dict(sorted(out.items()))


def available_profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.yaml"))}


def profile_path(name_or_path: str) -> Path:
    profiles = available_profiles()
    if name_or_path in profiles:
        return profiles[name_or_path]
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    raise ConfigError(
        f"unknown profile {name_or_path!r}; use one of {', '.join(profiles)} or the path of a profile .yaml file"
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last, silently)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} given twice (first at line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def off_grid_profile(profile: str, name: str | None) -> str | None:
    """``name`` where ``profile`` measures that off-grid profile alongside its own runs (``measured_with``: the
    cpu profile's validation and test sets), else None: the analysis of a profile reads only the off-grid runs it
    measured, never those another profile left in the same data folder."""
    return name if name and name in load_profile(profile).measured_with else None


def load_profile(name_or_path: str, device_name: str | None = None) -> Profile:
    """Read, expand and validate a profile. ``device_name`` tags the run IDs (detected when None)."""
    path = profile_path(name_or_path)
    where = f"profile {path.name}"
    try:
        spec = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where} is malformed YAML{at}: {problem}; fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{where} cannot be read ({exc}); check the path and that it is UTF-8 YAML"
        ) from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping with keys {', '.join(sorted(TOP_LEVEL_KEYS))}")
    unknown = sorted(set(spec) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(TOP_LEVEL_KEYS))}"
        )
    groups = spec.get("groups")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(
            f"{where} needs a non-empty 'groups' list; see companion/profiles/cpu.yaml for an example"
        )
    base = _mapping(spec.get("base", {}), f"{where}: base")

    device = spec.get("device", "cpu")
    if not isinstance(device, str) or device not in ("cpu", "cuda"):
        raise ConfigError(f"{where}: device={device!r} is unknown; use cpu or cuda")
    if device_name is None:
        device_name = spec.get("device_name")
    if device_name is None:
        from companion.runs.provenance import device_tag

        device_name = device_tag(device)
    from companion.runs.provenance import canonical_device_name

    device_name = canonical_device_name(device_name)
    run_level = {
        "device": device,
        "device_name": device_name,
        "precision": spec.get("precision", base.get("precision", "bf16" if device == "cuda" else "fp32")),
    }
    for key in ("device", "device_name"):
        if key in base:
            raise ConfigError(
                f"{where}: base sets {key}, which the profile's top level fixes for every run; "
                f"move it to the top level ({key}: ...)"
            )
    for key in ("meter", "country", "seed"):
        if key in spec:
            run_level[key] = spec[key]
    replicates = _replicates(spec.get("replicates", 1), f"{where}: replicates")

    runs: dict[str, RunConfig] = {}
    group_ids: dict[str, tuple[str, ...]] = {}
    for gi, group in enumerate(groups):
        gwhere = f"{where}: groups[{gi}]"
        group = _mapping(group, gwhere)
        bad = sorted(set(group) - GROUP_KEYS)
        if bad:
            raise ConfigError(
                f"{gwhere} has unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(GROUP_KEYS))}"
            )
        name = str(group.get("name", f"group{gi}"))
        n_rep = _replicates(group.get("replicates", replicates), f"{gwhere}.replicates")
        ids = []
        for flat in _expand(group, gwhere):
            for rep in range(n_rep):
                try:
                    cfg = build_run({**base, **run_level, **flat, **({"replicate": rep} if rep else {})})
                except ConfigError as exc:
                    raise ConfigError(f"{gwhere} ({name}), run {_short(flat)}: {exc}") from None
                except (TypeError, ValueError) as exc:
                    raise ConfigError(f"{gwhere} ({name}): {exc}; check the field types") from None
                runs.setdefault(cfg.run_id, cfg)
                ids.append(cfg.run_id)
        group_ids[name] = tuple(ids)
    from companion.runs.data import check_sources

    try:  # the data every run needs, checked before anything is launched
        check_sources(runs.values())
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    ordered = tuple(sorted(runs.values(), key=lambda r: r.replicate))  # passes: replicates never adjacent
    return Profile(
        path.stem,
        str(spec.get("description", "")),
        path,
        device,
        ordered,
        group_ids,
        _measured_with(spec.get("measured_with", []), path.stem, where),
    )


def _measured_with(value, own: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"{where}: measured_with={value!r} must be a list of profile names or .yaml paths, e.g. [holdout]"
        )
    for name in value:
        try:
            stem = profile_path(name).stem
        except ConfigError as exc:
            raise ConfigError(f"{where}: measured_with: {exc}") from None
        if stem == own:
            raise ConfigError(
                f"{where}: measured_with names the profile itself ({name!r}); name other profiles"
            )
    return tuple(dict.fromkeys(value))


def _replicates(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"{where}={value!r} must be a positive integer (1 = measure each configuration once)"
        )
    return value


def _mapping(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping of field: value, got {type(value).__name__}")
    return value


def _expand(group: dict, where: str) -> list[dict]:
    """The flat field dicts of one group: product(vary) x zip rows x layouts, with set applied."""
    vary = _mapping(group.get("vary", {}), f"{where}.vary")
    zipped = _mapping(group.get("zip", {}), f"{where}.zip")
    fixed = _mapping(group.get("set", {}), f"{where}.set")
    for key, values in {**vary, **zipped}.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: '{key}' must be a non-empty list of values, e.g. {key}: [1, 2]")
    lengths = {len(v) for v in zipped.values()}
    if len(lengths) > 1:
        raise ConfigError(
            f"{where}.zip lists have different lengths {sorted(lengths)}; give them equal lengths"
        )
    zip_rows = [dict(zip(zipped, row)) for row in zip(*zipped.values())] if zipped else [{}]
    layouts = group.get("layouts", ["tp1-dp1"])
    if not isinstance(layouts, list) or not layouts:
        raise ConfigError(f"{where}.layouts must be a non-empty list such as [tp1-dp1, tp2-dp1]")
    try:
        parsed = [
            Layout.parse(x) if isinstance(x, str) else Layout(**_mapping(x, f"{where}.layouts"))
            for x in layouts
        ]
    except TypeError:
        raise ConfigError(f"{where}.layouts must list layouts such as tp2-dp1 or {{tp: 2, dp: 1}}") from None
    out = []
    for combo in itertools.product(*vary.values()):
        for zrow in zip_rows:
            for lay in parsed:
                out.append({**fixed, **dict(zip(vary, combo)), **zrow, "tp": lay.tp, "dp": lay.dp})
    return out


def _short(flat: dict) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in flat.items() if not isinstance(v, dict)) + "}"
