"""The one error type for bad user input, shared by every stage."""


class ConfigError(ValueError):
    """Bad user input. The message is one line: the field, what is wrong, and how to fix it."""
