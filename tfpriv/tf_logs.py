"""TF_CPP_MIN_LOG_LEVEL applied to all of TensorFlow's log lines, not only its C++ ones after start-up.

TensorFlow >= 2.16 logs through Abseil, which writes what is logged before `absl::InitializeLog()`
(the oneDNN and CUDA notices printed while TensorFlow loads) to stderr, after the banner
`WARNING: All log messages before absl::InitializeLog() is called are written to STDERR`, whatever
TF_CPP_MIN_LOG_LEVEL says. So the import runs with file descriptor 2 sent to a temporary file,
and what it wrote is then passed on to stderr without those Abseil lines below the level (nor the
banner, once INFO is hidden). Everything else written meanwhile is passed on unchanged. Nothing is
filtered when TensorFlow is already imported or the level is 0. The command line also
applies the level to TensorFlow's and Keras's Python log lines (`quiet_python_logs`), so that what
it prints itself (an error, an interruption) is all that stderr shows.

Library use is as quiet (`quiet_library`, run by `import tfpriv`): the level is the user's
TF_CPP_MIN_LOG_LEVEL or, unset, the command line's 3. TensorFlow's first import after `import
tfpriv` is filtered as above, with the variable set only during that import (TensorFlow keeps the
level it read: its later C++ lines, e.g. CUDA's, stay hidden; the environment is left as it was),
and TensorFlow's Python log records below the level are dropped while tfpriv's code runs (the
retracing and IndexedSlices warnings of a `fit`). The user's logger levels and handlers are not
changed; outside tfpriv's calls their TensorFlow log lines show as before.
"""
import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile

from absl import logging as absl_logging

LIBRARY_LEVEL = 3  # the command line's TF_CPP_MIN_LOG_LEVEL (tfpriv.cli.launch), for library use unless set
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


_console = None  # while `captured_stderr` captures fd 2: a duplicate of the real stderr


def console_fd() -> int:
    """The file descriptor of the process's real stderr, also while TensorFlow's import is captured
    (a signal handler that prints during the import writes here)."""
    return 2 if _console is None else _console


def import_tensorflow() -> None:
    """Imports TensorFlow, filtering what it writes to stderr meanwhile at TF_CPP_MIN_LOG_LEVEL (see
    the module docstring). The command line calls it (`tfpriv.cli.launch`) after setting the level."""
    quiet_library()
    import tensorflow  # noqa: F401  (through `_QuietImport`, unless already imported)


@contextlib.contextmanager
def captured_stderr(level: int):
    """File descriptor 2 sent to a temporary file meanwhile; then its text, `filtered` at `level`, to stderr."""
    global _console
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        _console = saved
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            _console = None
            os.close(saved)
            capture.seek(0)
            sys.stderr.write(filtered(capture.read().decode(errors="replace"), level))
            sys.stderr.flush()


def library_level() -> int:
    """The level of library use: TF_CPP_MIN_LOG_LEVEL if set, else the command line's."""
    return min_log_level() if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").isdigit() else LIBRARY_LEVEL


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run with the library's level set and stderr `captured_stderr`."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # TensorFlow sees its own loader
        level, unset = library_level(), "TF_CPP_MIN_LOG_LEVEL" not in os.environ
        if unset:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = str(level)  # read once by TensorFlow's C++ logging
        try:
            with captured_stderr(level) if level else contextlib.nullcontext():
                self.loader.exec_module(module)
        finally:
            if unset:
                os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` on its first import after `import tfpriv`, to load it with `_QuietLoader`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietImport)]  # once
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class _InTfpriv(logging.Filter):
    """Drops TensorFlow's Python log records below the library's level that are logged while
    tfpriv's code runs (a frame of tfpriv/ on the stack), except tfpriv's own (e.g. the engine's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        level = library_level()
        shown = logging.WARNING if level <= 1 else logging.ERROR
        if level == 0 or record.levelno >= shown or record.pathname.startswith(_PACKAGE_DIR):
            return True
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.startswith(_PACKAGE_DIR):
                return False
            frame = frame.f_back
        return True


def quiet_library() -> None:
    """Library use as quiet as the command line (the module docstring): TensorFlow's next import
    filtered, unless it is already imported, and its Python records logged in tfpriv's calls dropped.
    Idempotent; touches neither logger levels nor handlers."""
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _InTfpriv) for f in logger.filters):
        logger.addFilter(_InTfpriv())


def quiet_python_logs() -> None:
    """Hides TensorFlow's and Keras's Python log lines below the level: INFO from level 1 on, WARNING
    too from level 2 on (e.g. Keras's "callback is slow" and checkpoint notices)."""
    level = min_log_level()
    if level >= 1:
        logging.getLogger("tensorflow").setLevel(logging.WARNING if level == 1 else logging.ERROR)
        absl_logging.set_verbosity("warning" if level == 1 else "error")
