"""The command line's entry point (`train.py`, `tfpriv-train`, `python -m tfpriv.gan`): the Ctrl-C
handler first, then TensorFlow.

Importing TensorFlow takes seconds; Ctrl-C during them ends the process with one line and exit
code 130 instead of an import traceback. This module imports neither tfpriv's modules nor
TensorFlow before the handler is installed, then TensorFlow through `tfpriv.tf_logs` (its start-up
lines filtered by TF_CPP_MIN_LOG_LEVEL, 3 unless set); `tfpriv.cli.main.main` replaces it with the handler
of a run (which stops training at the next step and says how to resume).

The command line's process holds only tfpriv's own Keras 2 models (`tf_keras` beside Keras 3), so it sets
TF_USE_LEGACY_KERAS=1 unless set: TensorFlow then loads `tf_keras`, which tfpriv imports anyway, at its
import instead of Keras 3 (on TF 2.21, 0.4 s of the 5 s a `train.py --help` takes, median of 15). The library
never sets it (`tfpriv.compat`): a user's process keeps the Keras that TensorFlow gives it.
"""
import importlib.metadata
import importlib.util
import os
import signal
import sys


def interrupted_while_starting(signum, frame) -> None:
    """SIGINT before any run started: one line on the real stderr (TensorFlow's import may be
    capturing fd 2, `tfpriv.tf_logs`), exit 130 (nothing was written yet)."""
    sys.stderr.flush()
    tf_logs = sys.modules.get("tfpriv.tf_logs")
    fd = tf_logs.console_fd() if tf_logs is not None else 2
    os.write(fd, b"interrupted while starting (nothing was written)\n")
    os._exit(130)  # not an exception: it would unwind through TensorFlow's import machinery


def keras2_is_tf_keras() -> bool:
    """Whether Keras 2 is the `tf_keras` package beside Keras 3 (TensorFlow >= 2.16), read from the
    installed packages without importing them."""
    try:
        keras3 = int(importlib.metadata.version("keras").split(".")[0]) >= 3
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return keras3 and importlib.util.find_spec("tf_keras") is not None


def entry_point() -> None:
    signal.signal(signal.SIGINT, interrupted_while_starting)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if keras2_is_tf_keras():
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from tfpriv.tf_logs import import_tensorflow
    import_tensorflow()  # TF_CPP_MIN_LOG_LEVEL also for the lines TensorFlow writes while it loads
    from tfpriv.cli import main

    main.entry_point()
