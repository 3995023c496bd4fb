"""`--seed` makes a CPU run reproducible: the same train.py command run twice gives the same results.json
(epsilon, metrics, loss history) and the same trained weights.

One run is in this process and one in a fresh subprocess, so anything that differs between processes
(hash randomisation, thread scheduling, TensorFlow's global state) would show; only wall times differ.
"""
import json

import numpy as np
import tensorflow as tf

from tests.cli.helpers import subprocess_train_py, train_py

ARGS = ["--model=privae", "--dataset=digits", "--aggregation=termwise", "--epochs=1", "--batch_size=512",
        "--seed=11", "--eval_importance_samples=5", "--eval_examples=100", "--verbose=0"]


def _without_times(value):
    """results.json without what legitimately differs between two runs: wall times and start stamps
    (the run folders' paths are replaced by RUN)."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if "seconds" not in k and k != "started"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _weights(folder) -> dict:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder / "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model/")}


def test_same_command_twice_gives_identical_results_and_weights(tmp_path, capsys):
    here, there = tmp_path / "in_process", tmp_path / "subprocess"
    proc = subprocess_train_py(*ARGS, f"--output_dir={there}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert train_py(*ARGS, f"--output_dir={here}", capsys=capsys).returncode == 0
    first, second = (json.loads((d / "results.json").read_text().replace(str(d), "RUN")) for d in (here, there))
    assert first["seed"] == 11 and 0 < first["epsilon"] < float("inf") and first["steps"] > 0
    assert _without_times(first) == _without_times(second)
    w1, w2 = _weights(here), _weights(there)
    assert w1.keys() == w2.keys() and len(w1) >= 8
    for key in w1:
        np.testing.assert_array_equal(w1[key], w2[key], err_msg=key)
