"""The command line's start (`tfpriv.cli.launch`): where Keras 2 is `tf_keras` beside Keras 3, its process
loads Keras 2 only (TF_USE_LEGACY_KERAS=1), not Keras 3 and keras-tuner, unless the run tunes."""
import json
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tfpriv.cli import launch
from tfpriv.compat import KERAS3_TF, tf_version

PROBE = """
import atexit, json, os, sys
report = sys.argv[1]
def write():
    with open(report, "w") as f:
        json.dump({"loaded": {m: m in sys.modules for m in ("keras", "keras_tuner")},
                   "legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS")}, f)
atexit.register(write)
from tfpriv.cli import launch
sys.argv = ["train.py", "--help"]
launch.entry_point()
"""


def test_keras2_is_tf_keras_exactly_on_the_tensorflow_that_moved_it():
    """Read from the installed packages (nothing imported): the same answer as TensorFlow's own version."""
    assert launch.keras2_is_tf_keras() == (tf_version() >= KERAS3_TF)


def test_the_command_line_loads_neither_keras3_nor_keras_tuner(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    run = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "report.json")], cwd=REPO_ROOT, text=True,
                         capture_output=True, env={**env, "PYTHONPATH": str(REPO_ROOT)})
    assert run.returncode == 0 and "--output_dir" in run.stdout, run.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["loaded"]["keras_tuner"]  # only --tune imports it
    if tf_version() >= KERAS3_TF:
        assert report == {"loaded": {"keras": False, "keras_tuner": False}, "legacy_keras": "1"}
    else:  # TF 2.15: Keras 2 is the `keras` package itself; the variable stays unset
        assert report["legacy_keras"] is None
