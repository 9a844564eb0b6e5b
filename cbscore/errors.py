"""Errors that carry a message meant for the user (the CLI prints them without a traceback)."""


class CbsError(Exception):
    """Base of every error whose message is shown to the user as is."""


class ConfigError(CbsError, ValueError):
    """A setting has a value that cannot be used; the message names the field and the value."""

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason}, but got {value!r}.")


class DataError(CbsError):
    """The data source cannot be read, prepared or served as asked."""


class FitError(CbsError):
    """The data cannot support the requested fit; the message says why."""
