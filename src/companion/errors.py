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


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise ``Terminated`` where the process is."""
    raise Terminated
