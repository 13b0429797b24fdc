"""Profiles measured alongside another (``measured_with``): their runs share its launches, spread among its
own, and keep their own records. A file of its own, so the test runner places it beside test_sweep.py's."""

import pytest

from companion.runs.profiles import load_profile
from companion.runs.records import load_records
from companion.runs.sweep import Pending, launch_order
from conftest import companion_cmd
from test_sweep import PROFILE


def _pending(profile, folder):
    return [Pending(r, profile.name, folder) for r in profile.runs]


def test_launch_order_spreads_the_profiles_measured_alongside(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(PROFILE.format(extra="max_time_s: 1.0") + "replicates: 2\n")
    off = tmp_path / "off.yaml"
    off.write_text(
        PROFILE.format(extra="max_time_s: 1.0")
        .replace("[0, 1, 2, 3, 4, 5]", "[7, 8]")
        .replace("layers: 1", "layers: 2")
        + "    layouts: [tp1-dp1, tp1-dp2]\nreplicates: 2\n"
    )
    a, b = load_profile(str(grid)), load_profile(str(off))
    order = launch_order([_pending(a, tmp_path / "a"), _pending(b, tmp_path / "b")])
    # pass 0 then pass 1, world size 1 then 2 within each; the off-grid runs spread among the grid's
    assert [(ws, {i.run.replicate for i in items}) for ws, items in order] == [
        (1, {0}),
        (2, {0}),
        (1, {1}),
        (2, {1}),
    ]
    first = [i.profile for i in order[0][1]]
    assert first == ["grid", "grid", "off", "grid", "grid", "grid", "off", "grid"]
    assert [i.profile for i in order[1][1]] == ["off", "off"]
    assert sorted(i.run.run_id for _, items in order for i in items) == sorted(
        r.run_id for r in a.runs + b.runs
    )
    # alone, a profile's launches are its passes, each in the profile's own order
    alone = launch_order([_pending(a, tmp_path / "a")])
    assert [(ws, [i.run for i in items]) for ws, items in alone] == [
        (1, [r for r in a.runs if r.replicate == rep]) for rep in (0, 1)
    ]


@pytest.mark.slow
def test_a_profile_measured_alongside_shares_the_launches_and_keeps_its_records(tmp_path):
    off = tmp_path / "off.yaml"
    off.write_text(
        PROFILE.format(extra="max_time_s: 5.0")
        .replace("[0, 1, 2, 3, 4, 5]", "[7]")
        .replace("layers: 1", "layers: 2")
    )
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        PROFILE.format(extra="max_time_s: 5.0").replace("[0, 1, 2, 3, 4, 5]", "[0, 1]")
        + f"measured_with: [{off}]\n"
    )
    out = tmp_path / "runs" / "grid"
    res = companion_cmd("sweep", "--profile", str(grid), "--out", str(out), "--quiet", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "2 runs in" in res.stdout and "1 runs in" in res.stdout
    grid_records, off_records = load_records(out), load_records(tmp_path / "runs" / "off")
    assert len(grid_records) == 2 and {r["profile"] for r in grid_records} == {"grid"}
    assert len(off_records) == 1 and off_records[0]["profile"] == "off"
    assert off_records[0]["config"]["model"]["layers"] == 2
    # one launch ran all three, the other profile's run between the grid's two
    log = (out / "logs" / "ws1.log").read_text()
    assert log.count("\n=== ") == 1
    started = [line.split()[1] for line in log.splitlines() if line.startswith("run-start: ")]
    ids = {r["run_id"]: r["profile"] for r in grid_records + off_records}
    assert [ids[i] for i in started] == ["grid", "off", "grid"]
    # resuming skips both; --alone leaves the other profile out
    res = companion_cmd("sweep", "--profile", str(grid), "--out", str(out), "--quiet", timeout=300)
    assert (
        res.returncode == 0
        and "0 ok, 0 failed, 2 already done" in res.stdout
        and "1 already done" in res.stdout
    )
    res = companion_cmd("sweep", "--profile", str(grid), "--out", str(out), "--quiet", "--alone", timeout=300)
    assert res.returncode == 0 and "measured with" not in res.stdout and res.stdout.count("runs in") == 1


def test_emitted_cluster_plans_carry_the_profiles_measured_alongside(tmp_path, capsys):
    """--emit writes the named profiles' runs into the same per-world-size plans, in the sweep's order, each
    with its own profile and folder (the worker's ``destinations``); --alone leaves them out."""
    import json

    from companion.cli import main
    from companion.runs.train import _plan_destinations

    off = tmp_path / "off.yaml"
    off.write_text(
        PROFILE.format(extra="max_time_s: 5.0")
        .replace("[0, 1, 2, 3, 4, 5]", "[7]")
        .replace("layers: 1", "layers: 2")
        + "    layouts: [tp1-dp1, tp1-dp2]\n"
    )
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        PROFILE.format(extra="max_time_s: 5.0").replace("[0, 1, 2, 3, 4, 5]", "[0, 1]")
        + f"measured_with: [{off}]\n"
    )
    out = tmp_path / "runs" / "grid"
    assert (
        main(
            [
                "sweep",
                "--profile",
                str(grid),
                "--out",
                str(out),
                "--emit",
                "torchrun",
                "--emit-dir",
                str(tmp_path / "e"),
                "--gpus-per-node",
                "4",
            ]
        )
        == 0
    )
    assert "measured with profile off: 2 runs" in capsys.readouterr().out
    ws1 = json.loads((tmp_path / "e" / "plans" / "grid-ws1.json").read_text())
    ws2 = json.loads((tmp_path / "e" / "plans" / "grid-ws2.json").read_text())
    dest1 = _plan_destinations(ws1, len(ws1["runs"]), tmp_path)
    assert [name for name, _ in dest1] == [
        "grid",
        "off",
        "grid",
    ]  # the other profile's run between the grid's
    assert {folder for _, folder in dest1} == {out, tmp_path / "runs" / "off"}
    assert _plan_destinations(ws2, len(ws2["runs"]), tmp_path) == [("off", tmp_path / "runs" / "off")]
    assert [r["model"]["layers"] for r in ws1["runs"]] == [1, 2, 1]
    script = (tmp_path / "e" / "launch-torchrun.sh").read_text()
    assert "profile 'off' (2 runs" in script and "world size 2: 1 runs" in script
    # alone: the grid's runs only, in plans without destinations
    assert (
        main(
            [
                "sweep",
                "--profile",
                str(grid),
                "--out",
                str(out),
                "--emit",
                "torchrun",
                "--alone",
                "--emit-dir",
                str(tmp_path / "alone"),
            ]
        )
        == 0
    )
    alone = json.loads((tmp_path / "alone" / "plans" / "grid-ws1.json").read_text())
    assert "destinations" not in alone and len(alone["runs"]) == 2
    assert not (tmp_path / "alone" / "plans" / "grid-ws2.json").exists()


def test_an_out_folder_named_as_a_profile_measured_alongside_is_refused(tmp_path):
    """The cpu sweep files its off-grid runs beside its own folder, each under its profile's name: an --out of
    that name would be both folders at once."""
    from companion.errors import ConfigError
    from companion.runs.profiles import load_profile
    from companion.runs.sweep import measured_alongside

    cpu = load_profile("cpu")
    assert [p.name for p, _ in measured_alongside(cpu, tmp_path / "cpu")] == list(cpu.measured_with)
    with pytest.raises(ConfigError, match=r"files its 'holdout' runs .*a folder of another name"):
        measured_alongside(cpu, tmp_path / "holdout")
