"""The local CPU launcher's own arguments (its ranks are exercised by every multi-rank sweep of the tests)."""

import pytest

from companion.runs import launch


@pytest.mark.parametrize("argv, fragment", [
    ([], "usage: python -m companion.runs.launch --nproc-per-node=N"),
    (["--plan", "p.json"], "usage: python -m companion.runs.launch --nproc-per-node=N"),
    (["--nproc-per-node=two", "--plan", "p.json"], "must name a positive number of ranks"),
    (["--nproc-per-node=0", "--plan", "p.json"], "must name a positive number of ranks"),
])
def test_bad_launcher_arguments_are_one_line(argv, fragment, capsys):
    assert launch.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]


def test_the_ranks_run_the_runner_through_torchrun_forked():
    from companion.runs import train

    args = launch.torchrun_args(4, ["--plan", "p.json", "--out", "runs"])
    assert args[:4] == ["--standalone", "--nproc-per-node=4", "--start-method=fork", "--run-path"]
    assert args[4] == train.__file__ and args[5:] == ["--plan", "p.json", "--out", "runs"]
