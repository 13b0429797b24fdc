"""The one error type for bad user input, shared by every stage, and the argument parser that reports bad
arguments the same way."""

import argparse


class ConfigError(ValueError):
    """Bad user input. The message is one line: the field, what is wrong, and how to fix it."""


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments get one line naming the field, as every other bad input does."""

    def error(self, message: str):
        # under torchrun every rank parses the same arguments: rank 0 says what is wrong, once
        import os

        main_rank = os.environ.get("RANK", "0") == "0"
        if not main_rank:
            await_main_rank()
        self.exit(2, f"error: {message}; see `{self.prog} --help`\n" if main_rank else None)


BAD_INPUT_WAIT_S = 20.0  # at most this long does a rank other than 0 wait for rank 0 to say what is wrong


def await_main_rank() -> None:
    """Bad input is said by rank 0 alone. A launcher stops every rank as soon as one exits with an error, so a rank
    that found the same error first and exited would have rank 0 stopped before it says why: the others wait for
    the launcher to stop them (SIGTERM) once rank 0 has said it and exited, and go on after ``BAD_INPUT_WAIT_S``
    where nothing stops them, or at Ctrl-C."""
    import time

    try:
        time.sleep(BAD_INPUT_WAIT_S)
    except KeyboardInterrupt:  # asked to stop while waiting: exit as the bad input says, without a traceback
        pass


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's cancel, ``kill``), handled as Ctrl-C is: the run in flight is stopped and has no record,
    every finished record is kept, and one line says so (exit code 143)."""


_stop_asked: list[KeyboardInterrupt] = []  # the stop a signal asked for, kept past whatever caught it


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise ``Terminated`` where the process is."""
    _stop_asked.append(Terminated())
    raise _stop_asked[-1]


def raise_interrupted(signum, frame) -> None:
    """A SIGINT handler: raise ``KeyboardInterrupt`` where the process is, as Python's own does."""
    _stop_asked.append(KeyboardInterrupt())
    raise _stop_asked[-1]


def raise_if_stopped() -> None:
    """Raise the stop a SIGTERM or SIGINT asked for, if one arrived in this process. The exception the handler
    raised can land inside library code that catches it and raises an ordinary error instead (the run would be
    recorded as failed) or swallows it (the run would go on): a run checks this at every step and before it
    writes a record, a command before it writes its output."""
    if _stop_asked:
        raise _stop_asked[0]
