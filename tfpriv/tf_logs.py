"""TF_CPP_MIN_LOG_LEVEL applied to all of TensorFlow's log lines, not only its C++ ones after start-up.

TensorFlow >= 2.16 logs through Abseil, which writes what is logged before `absl::InitializeLog()`
(the oneDNN and CUDA notices printed while TensorFlow loads) to stderr, after the banner
`WARNING: All log messages before absl::InitializeLog() is called are written to STDERR`, whatever
TF_CPP_MIN_LOG_LEVEL says. So the import runs with file descriptor 2 sent to a temporary file,
and what it wrote is then passed on to stderr without those Abseil lines below the level (nor the
banner, once INFO is hidden). Everything else written meanwhile is passed on unchanged. Nothing is
filtered when TensorFlow is already imported or the level is 0 (its default). The command line also
applies the level to TensorFlow's and Keras's Python log lines (`quiet_python_logs`), so that what
it prints itself (an error, an interruption) is all that stderr shows.
"""
import logging
import os
import re
import sys
import tempfile

from absl import logging as absl_logging

SEVERITIES = "IWEF"  # Abseil's INFO, WARNING, ERROR, FATAL: TF_CPP_MIN_LOG_LEVEL 0..3
ABSL_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ [^\]\s]+:\d+\] ")
BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def min_log_level() -> int:
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it (0 when unset or not a number)."""
    value = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "")
    return int(value) if value.isdigit() else 0


def filtered(text: str, level: int) -> str:
    """`text` without the Abseil log lines below `level`, and without the banner when level >= 1."""
    kept = []
    for line in text.splitlines(keepends=True):
        match = ABSL_LINE.match(line)
        if (match and SEVERITIES.index(match.group(1)) < level) or (level >= 1 and line.startswith(BANNER)):
            continue
        kept.append(line)
    return "".join(kept)


_console = None  # while `import_tensorflow` captures fd 2: a duplicate of the real stderr


def console_fd() -> int:
    """The file descriptor of the process's real stderr, also while TensorFlow's import is captured
    (a signal handler that prints during the import writes here)."""
    return 2 if _console is None else _console


def import_tensorflow() -> None:
    """Imports TensorFlow, filtering what it writes to stderr meanwhile (see the module docstring).
    Only the command line calls it (`tfpriv.cli.launch`): importing tfpriv as a library leaves the
    process's stderr alone."""
    level = min_log_level()
    if "tensorflow" in sys.modules or level == 0:
        import tensorflow  # noqa: F401
        return
    global _console
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        _console = saved
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            _console = None
            os.close(saved)
            capture.seek(0)
            sys.stderr.write(filtered(capture.read().decode(errors="replace"), level))
            sys.stderr.flush()


def quiet_python_logs() -> None:
    """Hides TensorFlow's and Keras's Python log lines below the level: INFO from level 1 on, WARNING
    too from level 2 on (e.g. Keras's "callback is slow" and checkpoint notices)."""
    level = min_log_level()
    if level >= 1:
        logging.getLogger("tensorflow").setLevel(logging.WARNING if level == 1 else logging.ERROR)
        absl_logging.set_verbosity("warning" if level == 1 else "error")
