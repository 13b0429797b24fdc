"""The local CPU launcher's own arguments (its ranks are exercised by every multi-rank sweep of the tests)."""

import pytest

from companion.runs import launch, parallel


@pytest.mark.parametrize(
    "argv, fragment",
    [
        ([], "usage: python -m companion.runs.launch --nproc-per-node=N"),
        (["--plan", "p.json"], "usage: python -m companion.runs.launch --nproc-per-node=N"),
        (["--nproc-per-node=two", "--plan", "p.json"], "must name a positive number of ranks"),
        (["--nproc-per-node=0", "--plan", "p.json"], "must name a positive number of ranks"),
    ],
)
def test_bad_launcher_arguments_are_one_line(argv, fragment, capsys):
    assert launch.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]


def test_the_ranks_run_the_runner_through_torchrun_forked():
    from companion.runs import train

    args = launch.torchrun_args(4, ["--plan", "p.json", "--out", "runs"], log_dir="logs")
    assert args[:3] == ["--standalone", "--nproc-per-node=4", "--start-method=fork"]
    # the agent looks at its ranks once a second, not ten times (a launch waiting between a sweep's passes), and
    # keeps its files in the launch's own folder
    assert args[3:6] == ["--monitor-interval=1", "--log-dir=logs", "--run-path"]
    assert args[6] == train.__file__ and args[7:] == ["--plan", "p.json", "--out", "runs"]


def test_a_forked_rank_drops_the_agents_signal_handlers(monkeypatch):
    """torchrun's agent turns SIGINT/SIGTERM into an Exception in its own process; ranks forked from it inherit
    that, and a run would record Ctrl-C or a stopped launch as its own failure. A rank restores the defaults
    (SIGINT: a KeyboardInterrupt, the stop recorded as in every command)."""
    import signal

    from companion.runs.train import _signal_handlers

    def agent_handler(signum, frame):
        raise RuntimeError(f"got signal {signum}")

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in saved:
            signal.signal(s, agent_handler)
        monkeypatch.delenv(parallel.LAUNCHER_ENV, raising=False)
        _signal_handlers()  # a new interpreter's handlers are its own: left alone
        assert signal.getsignal(signal.SIGINT) is agent_handler
        monkeypatch.setenv(parallel.LAUNCHER_ENV, parallel.FORKED_LAUNCHER)
        _signal_handlers()
        from companion.errors import raise_interrupted

        assert signal.getsignal(signal.SIGINT) is raise_interrupted  # KeyboardInterrupt, and recorded
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        # a new interpreter's own SIGINT handler (a sweep's one-rank launch) records the stop as well
        monkeypatch.delenv(parallel.LAUNCHER_ENV, raising=False)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _signal_handlers()
        assert signal.getsignal(signal.SIGINT) is raise_interrupted
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
