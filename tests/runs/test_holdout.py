"""The off-grid profiles (validation set, test set) are what their seeded generator draws, beyond the cpu grid."""

from pathlib import Path

from companion.paths import PROFILES_DIR
from companion.runs.holdout import draw, profile_yaml
from companion.runs.profiles import load_profile


def test_committed_profile_is_the_seeded_draw():
    assert (PROFILES_DIR / "holdout.yaml").read_text() == profile_yaml()
    assert draw() == draw()


def test_holdout_is_off_grid_and_covers_every_layout_kind():
    runs = load_profile("holdout").runs
    cpu = load_profile("cpu").runs
    assert len(runs) >= 12
    assert {r.layout.mode for r in runs} == {"single", "tp", "fsdp", "2d"}
    grid = {(r.model.layers, r.model.hidden, r.model.heads, r.data.seq_len, r.data.batch_size) for r in cpu}
    off = [
        r
        for r in runs
        if (r.model.layers, r.model.hidden, r.model.heads, r.data.seq_len, r.data.batch_size) not in grid
    ]
    assert len(off) == len(runs)
    head_dims = {r.model.hidden // r.model.heads for r in runs}
    assert min(head_dims) == 16 and max(head_dims) == 64
    assert max(r.model.layers for r in runs) > 4 and max(r.model.hidden for r in runs) > 256


def test_every_validation_configuration_is_measured_once_as_its_draw_says():
    from companion.runs.holdout import HOLDOUT

    assert (PROFILES_DIR / "holdout.yaml").read_text() == profile_yaml(spec=HOLDOUT)
    per_config = {}
    for r in load_profile("holdout").runs:
        per_config.setdefault(r.config_id, []).append(r.replicate)
    assert len(per_config) == HOLDOUT.n == 14 and all(reps == [0] for reps in per_config.values())


def test_the_test_set_is_its_own_seeded_draw_apart_from_grid_and_validation_set():
    from companion.runs.holdout import TEST

    assert (PROFILES_DIR / "testset.yaml").read_text() == profile_yaml(spec=TEST)
    runs = load_profile("testset").runs

    def key(r):
        return (
            r.model.layers,
            r.model.hidden,
            r.model.heads,
            r.data.seq_len,
            r.data.batch_size,
            r.layout.tp,
            r.layout.dp,
        )

    seen = {key(r) for name in ("cpu", "holdout") for r in load_profile(name).runs}
    assert len(runs) == TEST.n * TEST.replicates == 20 and not {key(r) for r in runs} & seen
    # two passes: each of its 10 configurations once in each
    assert sorted(r.replicate for r in runs) == [0] * 10 + [1] * 10 and len({key(r) for r in runs}) == TEST.n
    assert {r.layout.mode for r in runs} == {"single", "tp", "fsdp", "2d"}
    # between and beyond the grid: head widths the grid never has, and depths beyond the validation set's
    assert {r.model.hidden // r.model.heads for r in runs} - {16, 32, 64}
    assert max(r.model.layers for r in runs) > 8
    # the cpu sweep measures it in its own launches, as it does the validation set
    assert "testset" in load_profile("cpu").measured_with


def test_the_gpu_test_set_is_its_own_draw_outside_every_other_profile():
    from companion.runs.holdout import GPU_TEST

    assert (PROFILES_DIR / "gpu-test.yaml").read_text() == profile_yaml(spec=GPU_TEST)
    runs = load_profile("gpu-test").runs
    assert len(runs) == GPU_TEST.n and {r.layout.mode for r in runs} == {"single"}

    def key(r):
        return (r.model.layers, r.model.hidden, r.model.heads, r.data.seq_len, r.data.batch_size)

    others = [
        "gpu-1",
        "gpu-node",
        *map(str, sorted((Path(__file__).parents[2] / "data" / "reference").glob("*/gpu-*.yaml"))),
    ]
    seen = {key(r) for name in others for r in load_profile(name).runs}
    assert len(seen) > 20 and not {key(r) for r in runs} & seen
    # beyond the GPU profiles: a head width they never have, and widths between theirs
    assert {r.model.hidden // r.model.heads for r in runs} - {64}
    assert {r.model.hidden for r in runs} - {256, 512, 768, 1024}
