"""A run killed with SIGKILL at arbitrary points and restarted in the same folder resumes from its
last complete checkpoint and ends exactly where the uninterrupted run ends (weights, steps, epsilon).
The runs that are killed are processes; the uninterrupted run and the final resume run in this
process (a seeded run is the same in any process: tests/training/test_reproducibility.py)."""
import signal
import subprocess
import sys
import time

import numpy as np

from tests.conftest import REPO_ROOT, script_env
from tests.training.scripts.train_small import train
from tfpriv.training.runner import read_ledger
from tfpriv.privacy.accounting import RDP

SCRIPT = str(REPO_ROOT / "tests/training/scripts/train_small.py")
EPOCHS = 5


def _latest(folder):
    import tensorflow as tf
    return tf.train.latest_checkpoint(str(folder / "checkpoints"))


def test_sigkill_at_any_point_then_resume_equals_the_uninterrupted_run(tmp_path):
    straight = train(str(tmp_path / "straight"), EPOCHS)
    killed = tmp_path / "killed"
    reported = []
    for pause in (0.3, 0.0, 0.6):   # after a new checkpoint appears: mid-epoch, right after the save, later
        before = _latest(killed)
        proc = subprocess.Popen([sys.executable, SCRIPT, str(killed), str(EPOCHS)], env=script_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while _latest(killed) == before and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(pause)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reported.append(RDP.epsilon(read_ledger(str(killed)).segments(), 1e-4))   # the last complete checkpoint reads
    assert reported == sorted(reported) and reported[0] > 0   # saved epsilon only grows
    final = train(str(killed), EPOCHS)
    assert final["resumed"] and final["steps"] == straight["steps"]
    assert final["epsilon"] == straight["epsilon"] >= max(reported)
    a, b = np.load(tmp_path / "straight" / "final.npz"), np.load(killed / "final.npz")
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])
