"""Private steps with the previous DP noise draw against the current one, interleaved in one process.

The previous draw (TensorFlow's normal kernel once per variable, the engine before commit 606fe8e)
is traced into a second copy of each private model; sections as in bench/throughput.py; prints and
records the per-round speed-up of the current draw.

    ROUNDS=15 python experiments/throughput/noise_before_after.py noise_before_after.json
(committed: the line noise_before_after of experiments/throughput/runs.jsonl)
"""
import json
import os
import sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import numpy as np
import tensorflow as tf
from absl import app
from bench import throughput as T
from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine

NEW = DPGradientEngine._add_noise


def old_add_noise(self, grads, psi_reaches=None):
    """engine._add_noise and StreamGenerator.normal_once before commit 606fe8e."""
    std = self.noise_stddev
    if std == 0.0:
        return grads
    ctx = tf.distribute.get_replica_context()
    first = (tf.constant(True) if ctx is None or ctx.num_replicas_in_sync == 1
             else tf.equal(ctx.replica_id_in_sync_group, 0))

    def normal_once(shape, stddev, dtype):
        shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
        key, counter = self.generator._prepare_key_counter(shape)  # one skip of the shared state per variable
        z = tf.raw_ops.StatelessRandomNormalV2(shape=shape, key=key, counter=counter, alg=self.generator.algorithm,
                                               dtype=dtype)
        return z * tf.cast(stddev, dtype)
    return [g + tf.cast(first, g.dtype) * normal_once(tf.shape(g), std, g.dtype) for g in grads]


def with_old_noise(build, name):
    DPGradientEngine._add_noise = old_add_noise
    try:
        c = build()      # traced (twice) here, so its graph keeps the old draw
    finally:
        DPGradientEngine._add_noise = NEW
    c.name = name
    return c


def clf(private, b):
    rng = np.random.default_rng(0)
    data = (rng.random([b, 784]).astype(np.float32), rng.integers(0, 10, [b]).astype(np.int64))
    m = T._Classifier()
    dp = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=b,
                  verify=False) if private else None
    m.compile(keras.optimizers.SGD(1e-3), dp=dp, num_examples=b if private else None)
    return T.Config("tfpriv micro" if private else "none", T.keras_step(m, data))


def main(argv):
    b, rounds = 256, int(os.environ.get("ROUNDS", 11))
    out = []
    for kind in ("mlp", "conv"):
        configs = [T.vae_config(kind, "none", b), T.vae_config(kind, "none (16 partitions)", b)]
        for name in ("termwise", "batch"):
            configs.append(with_old_noise(lambda: T.vae_config(kind, name, b), f"{name} (previous noise)"))
            configs.append(T.vae_config(kind, name, b))
        configs[2].reference = "none (16 partitions)"
        out.append(T.run_section(f"{kind}_vae", configs, 3, rounds, {"batch_size": b}))
        del configs
        keras.backend.clear_session()
    configs = [clf(False, b), with_old_noise(lambda: clf(True, b), "tfpriv micro (previous noise)"), clf(True, b)]
    out.append(T.run_section("mlp_classifier", configs, 3, rounds, {"batch_size": b}))
    for sec in out:
        T.record_speedups(sec, " (previous noise)", "speedup_over_previous_noise")
    with open(argv[1], "w") as f:
        command = "python experiments/throughput/noise_before_after.py " + " ".join(argv[1:])
        json.dump({"command": command, "sections": out}, f, indent=1)


app.run(main)
