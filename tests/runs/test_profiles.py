import pytest

from companion.errors import ConfigError
from companion.runs.profiles import available_profiles, load_profile
from companion.runs.sweep import Pending, launch_order


def test_shipped_profiles_load_and_validate():
    names = set(available_profiles())
    assert {"ci", "cpu", "gpu-1", "gpu-node"} <= names
    cpu = load_profile("cpu")
    sizes = {r.layout.world_size for r in cpu.runs}
    assert sizes == {1, 2, 4}
    assert {r.layout.mode for r in cpu.runs} == {"single", "tp", "fsdp", "2d"}
    node = load_profile("gpu-node", device_name="H100")
    assert max(r.layout.world_size for r in node.runs) == 8
    assert all(r.precision == "bf16" and r.run_id.count("@H100-bf16") == 1 for r in node.runs)
    gpu1 = load_profile("gpu-1", device_name="H100")
    layers = {r.model.layers for r in gpu1.runs}
    hidden = {r.model.hidden for r in gpu1.runs}
    seqs = {r.data.seq_len for r in gpu1.runs}
    assert min(layers) == 2 and max(layers) == 24 and min(hidden) == 256 and max(hidden) == 1024
    assert seqs == {128, 256, 512}


def test_run_ids_are_unique_within_profiles():
    for name in available_profiles():
        p = load_profile(name, device_name="X")
        ids = [r.run_id for r in p.runs]
        assert len(ids) == len(set(ids))


def test_unknown_profile():
    with pytest.raises(ConfigError, match="unknown profile 'nope'; use one of .*ci"):
        load_profile("nope")


def _write(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return str(p)


def test_malformed_yaml_names_line(tmp_path):
    path = _write(tmp_path, "device: cpu\ngroups:\n  - vary: {layers: [1, 2]\n    layouts: [tp1-dp1]\n")
    with pytest.raises(ConfigError, match=r"malformed YAML at line \d+"):
        load_profile(path)


@pytest.mark.parametrize(
    "text, match",
    [
        ("device: cpu\n", "non-empty 'groups'"),
        ("devise: cpu\ngroups: [{}]\n", "unknown key\\(s\\) devise"),
        ("groups:\n  - vary: {layers: 3}\n", "'layers' must be a non-empty list"),
        ("groups:\n  - zip: {hidden: [64, 128], heads: [2]}\n", "different lengths"),
        ("groups:\n  - set: {heads: 4}\n    layouts: [tp3-dp1]\n", "heads=4 is not divisible by tp=3"),
        ("groups:\n  - layouts: [tp2]\n", "tp<T>-dp<D>"),
        ("- 1\n- 2\n", "must be a mapping"),
    ],
)
def test_invalid_profiles(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_profile(_write(tmp_path, text))


def test_grid_expansion(tmp_path):
    p = load_profile(
        _write(
            tmp_path,
            """
base: {seq_len: 32, batch_size: 4}
groups:
  - vary: {layers: [1, 2]}
    zip: {hidden: [64, 128], heads: [2, 4]}
    layouts: [tp1-dp1, tp2-dp1]
  - set: {layers: 1, hidden: 64, heads: 2}
""",
        )
    )
    assert len(p.runs) == 2 * 2 * 2  # the second group repeats a run of the first: kept once
    assert {(r.model.hidden, r.model.heads) for r in p.runs} == {(64, 2), (128, 4)}


def test_replicates_run_in_interleaved_passes(tmp_path):
    p = load_profile(
        _write(
            tmp_path,
            """
base: {seq_len: 32, batch_size: 4}
replicates: 2
groups:
  - vary: {layers: [1, 2]}
    layouts: [tp1-dp1, tp2-dp1]
  - set: {layers: 3}
    replicates: 3
""",
        )
    )
    assert len(p.runs) == 4 * 2 + 3
    first = [r for r in p.runs if r.replicate == 0]
    assert all(r.run_id == r.config_id and "-r" not in r.run_id for r in first)  # ids as before replicates
    twins = [r for r in p.runs if r.replicate == 1]
    assert {r.config_id for r in twins} <= {r.run_id for r in first}
    assert all(r.run_id.split(".")[0].endswith("-r1") and r.run_id != r.config_id for r in twins)
    order = [
        (ws, [i.run.replicate for i in items])
        for ws, items in launch_order([[Pending(r, p.name, tmp_path) for r in p.runs]])
    ]
    # pass 0 (every configuration once, world size 1 then 2), then pass 1, then pass 2
    assert [ws for ws, _ in order] == [1, 2, 1, 2, 1] and [set(r) for _, r in order] == [
        {0},
        {0},
        {1},
        {1},
        {2},
    ]
    ids = [r.run_id for r in p.runs]
    for r in twins:  # a replicate is never next to its twin, in the sweep or in an emitted plan
        assert abs(ids.index(r.run_id) - ids.index(r.config_id)) > 1


@pytest.mark.parametrize("text", ["replicates: 0\ngroups: [{}]", "groups: [{replicates: two}]"])
def test_replicates_must_be_positive_integers(tmp_path, text):
    with pytest.raises(ConfigError, match="replicates"):
        load_profile(_write(tmp_path, text))


def test_measured_with_names_other_profiles(tmp_path):
    other = tmp_path / "off.yaml"
    other.write_text("groups: [{set: {layers: 3}}]\n")
    p = load_profile(_write(tmp_path, f"measured_with: [holdout, {other}]\ngroups: [{{}}]\n"))
    assert p.measured_with == ("holdout", str(other))
    assert load_profile("cpu").measured_with == (
        "holdout",
        "testset",
    )  # the grid and its off-grid runs share launches
    assert load_profile("ci").measured_with == ()


@pytest.mark.parametrize(
    "value, match",
    [
        ("holdout", "must be a list of profile names"),
        ("[nowhere]", "measured_with: unknown profile 'nowhere'"),
        ("[{self}]", "names the profile itself"),
    ],
)
def test_measured_with_must_name_other_profiles(tmp_path, value, match):
    with pytest.raises(ConfigError, match=match):
        value = value.format(self=tmp_path / "p.yaml")
        load_profile(_write(tmp_path, f"measured_with: {value}\ngroups: [{{}}]\n"))


def test_a_profile_reads_only_the_off_grid_runs_it_measures():
    from companion.runs.profiles import off_grid_profile

    assert off_grid_profile("cpu", "holdout") == "holdout" and off_grid_profile("cpu", "testset") == "testset"
    assert off_grid_profile("ci", "holdout") is None and off_grid_profile("cpu", None) is None
