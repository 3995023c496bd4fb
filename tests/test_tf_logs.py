"""TF_CPP_MIN_LOG_LEVEL also quiets what TensorFlow logs while loading (Abseil's pre-initialisation
lines on TF >= 2.16), and nothing else is lost."""
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import logging as absl_logging

from tests.conftest import REPO_ROOT
from tfpriv.tf_logs import BANNER, filtered, quiet_python_logs

INFO = "I0000 00:00:1795696842.665325   14938 port.cc:153] oneDNN custom operations are on.\n"
WARN = "W0000 00:00:1795696842.665325   14938 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
ERROR = "E0000 00:00:1795696842.665325   14938 cuda_dnn.cc:8310] Unable to register cuDNN factory.\n"
OTHER = "error: --bogus: unknown flag (--help lists the flags)\nTraceback (most recent call last):\n"
TEXT = BANNER + "\n" + INFO + WARN + ERROR + OTHER


@pytest.mark.parametrize("level, expected", [
    (0, TEXT),
    (1, WARN + ERROR + OTHER),
    (2, ERROR + OTHER),
    (3, OTHER),
])
def test_filtered_drops_abseil_lines_below_the_level_only(level, expected):
    assert filtered(TEXT, level) == expected


def test_the_command_lines_tensorflow_import_at_level_3_writes_nothing_to_stderr():
    """What `tfpriv.cli.launch` runs before the flags are parsed (TF >= 2.16 writes its banner there)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO_ROOT)}
    code = "from tfpriv.tf_logs import import_tensorflow; import_tensorflow(); import tfpriv.cli.main"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True)
    assert run.stderr == ""


@pytest.mark.parametrize("level, python_level, absl_level", [("1", logging.WARNING, absl_logging.WARNING),
                                                            ("3", logging.ERROR, absl_logging.ERROR)])
def test_quiet_python_logs_follows_the_level(monkeypatch, level, python_level, absl_level):
    tf_logger, verbosity = logging.getLogger("tensorflow"), absl_logging.get_verbosity()
    before = tf_logger.level
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    try:
        quiet_python_logs()
        assert tf_logger.level == python_level and absl_logging.get_verbosity() == absl_level
    finally:
        tf_logger.setLevel(before)
        absl_logging.set_verbosity(verbosity)


LIBRARY_USER = """
import logging, os, sys
import numpy as np
import tfpriv
assert "tensorflow" not in sys.modules, "import tfpriv loaded TensorFlow"
tfpriv.DPConfig
assert "tensorflow" in sys.modules, "using a name of tfpriv did not load TensorFlow"
from tfpriv.compat import keras
import tensorflow as tf
assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # set only while TensorFlow loaded
tf.config.list_physical_devices()  # TensorFlow's CUDA probe (a C++ ERROR line on a machine without CUDA)
x = np.random.default_rng(0).integers(0, 20, size=(16, 5)).astype("int32")
model = keras.Sequential([keras.Input([5], dtype="int32"), keras.layers.Embedding(20, 3), keras.layers.LSTM(2),
                          keras.layers.Dense(2)])
config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0)
dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), config,
                               num_examples=16, batch_size=8, delta=1e-3)
dp_model.compile("sgd")
dp_model.fit(x, x[:, 0] % 2, epochs=1, verbose=0, seed=0)  # TensorFlow warned about IndexedSlices here
assert logging.getLogger("tensorflow").level == logging.NOTSET  # the user's settings are untouched
tf.get_logger().warning("the user's own warning")  # outside tfpriv's calls: shown
"""


def test_library_use_is_as_quiet_as_the_command_line():
    """A library user saw TensorFlow's start-up and C++ lines and its Python warnings from inside `fit`
    (issue 50 item 9); the command line showed neither. Their own warnings still show. And the library
    leaves the process alone until a name is used: `import tfpriv` does not load TensorFlow, the first
    name used (`tfpriv.DPConfig`) does (and neither writes to stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    run = subprocess.run([sys.executable, "-c", LIBRARY_USER], env={**env, "PYTHONPATH": str(REPO_ROOT)},
                         capture_output=True, text=True, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    # TensorFlow prints a record through its handler and the root's, hence possibly twice
    assert lines[0].startswith("tfpriv: clipping auto: ") and lines[1:], run.stderr
    assert all(line.endswith("the user's own warning") for line in lines[1:]), run.stderr


def test_only_tensorflows_records_below_the_level_inside_tfpriv_calls_are_dropped(monkeypatch):
    from tfpriv.privacy.engine import public_batch
    from tfpriv.tf_logs import _InTfpriv
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # the library's level: 3
    keep = _InTfpriv().filter

    def record(path, level=logging.WARNING):
        return logging.LogRecord("tensorflow", level, path, 1, "message", None, None)

    tensorflows, tfprivs = "/site-packages/tensorflow/python/x.py", str(REPO_ROOT / "tfpriv/privacy/pfor_rules.py")
    seen = []

    class LogsWhenConverted:  # converted to a tensor inside tfpriv's `public_batch`
        shape = (1, 2)

        def __array__(self, dtype=None, copy=None):
            seen.extend([keep(record(tensorflows)), keep(record(tfprivs)), keep(record(tensorflows, logging.ERROR))])
            return np.zeros((1, 2), np.float32)

    public_batch(LogsWhenConverted())
    assert seen == [False, True, True]  # TensorFlow's warning dropped; tfpriv's own and an error kept
    assert keep(record(tensorflows))  # outside tfpriv's calls: kept
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's setting wins
    seen.clear()
    public_batch(LogsWhenConverted())
    assert seen == [True, True, True]
