"""Errors that the command line turns into one line on stderr and exit code 2."""


class UsageError(ValueError):
    """Bad input from the user: a flag, a file, a shape. The message names the culprit."""


class ConfigError(UsageError):
    """An invalid or privacy-unsafe configuration (flags or constructor arguments)."""


class DataError(UsageError):
    """A data file is missing, unreadable or fails its checksum."""
