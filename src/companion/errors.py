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

        self.exit(
            2, f"error: {message}; see `{self.prog} --help`\n" if os.environ.get("RANK", "0") == "0" else None
        )


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
