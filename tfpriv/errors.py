"""Errors that the command line turns into one line on stderr and exit code 2.

Library code names its own parameters, not command-line flags: a message starts with the
parameter (`"batch_size: must be between 1 and ..."`, `"prior=mixture: ..."`) or the error is
raised with `param=`. The command line maps the parameter to the job's flag when it prints
the error (`tfpriv.jobs.job.flag_message`; e.g. the filter's `batch_size` is `--vae_batch_size`).
"""
from __future__ import annotations

import re

_LEADING_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?=[=:])")


class UsageError(ValueError):
    """Bad input from the user: a flag, a file, a shape. The message names the culprit."""

    def __init__(self, message: str = "", param: str | None = None):
        super().__init__(message)
        self._param = param

    @property
    def param(self) -> str | None:
        """The parameter the error is about: `param=`, else the message's leading `name:`/`name=`."""
        if self._param:
            return self._param
        match = _LEADING_PARAM.match(str(self))
        return match.group(1) if match else None


class ConfigError(UsageError):
    """An invalid or privacy-unsafe configuration (flags or constructor arguments)."""


class DataError(UsageError):
    """A data file is missing, unreadable, malformed or fails its checksum.

    Its parameter is `data_dir` unless the error names another one: a message naming only the
    file (`"<path>: md5 mismatch ..."`) is shown on the command line as `--data_dir: <path>: ...`.
    """

    @property
    def param(self) -> str | None:
        return super().param or "data_dir"
