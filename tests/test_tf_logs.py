"""TF_CPP_MIN_LOG_LEVEL also quiets what TensorFlow logs while loading (Abseil's pre-initialisation
lines on TF >= 2.16), and nothing else is lost."""
import logging
import os
import subprocess
import sys

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


def test_importing_tfpriv_does_not_load_tensorflow():
    """The library leaves the process alone until a name is used (and never touches stderr)."""
    code = "import sys, tfpriv; assert 'tensorflow' not in sys.modules; tfpriv.DPConfig; assert 'tensorflow' in sys.modules"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT,
                   check=True)


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
