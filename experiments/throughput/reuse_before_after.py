"""Private steps with and without reusing instantiated gradients in the clipped sums, in one process.

Before commit "Clipped sums of direct-norm layers from their instantiated gradients", a layer
whose per-example (per-partition) norm instantiated its kernel gradient still ran its own pass
over the rows for the clipped sum. The previous behaviour is traced into a second copy of each
private model (`FastPass._instantiated_sum` returning None at trace time); sections as in
bench/throughput.py; prints and records the per-round speed-up of the current step.

    ROUNDS=15 python experiments/throughput/reuse_before_after.py reuse_before_after.json
(committed: the line reuse_before_after of experiments/throughput/runs.jsonl)
"""
import json
import os
import sys
from unittest import mock
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import numpy as np
import tensorflow as tf
from absl import app
from bench import throughput as T
from tfpriv.compat import keras
from tfpriv.privacy.clipping import FastPass
from tfpriv.privacy.config import DPConfig


def previous(build, name):
    with mock.patch.object(FastPass, "_instantiated_sum", lambda self, *args: None):
        c = build()      # traced here, so its graph keeps the previous clipped sums
    c.name = name
    return c


def conv_classifier(private, b):
    import tfpriv
    rng = np.random.default_rng(0)
    data = (rng.random([b, *T.IMAGE], dtype=np.float32), rng.integers(0, 10, b).astype(np.int32))
    if not private:
        return T.Config("none (Keras)", T._keras(T._convnet(), keras.optimizers.SGD(1e-3),
                                                 keras.losses.SparseCategoricalCrossentropy(from_logits=True), data))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    m = tfpriv.make_private(T._convnet(), loss=xent, num_examples=60000, batch_size=b,
                            config=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, verify=False))
    m.compile(keras.optimizers.SGD(1e-3))
    return T.Config("make_private", T.keras_step(m, data))


def main(argv):
    b, rounds = 256, int(os.environ.get("ROUNDS", 11))
    out = []
    configs = [T.vae_config("conv", "none", b), T.vae_config("conv", "none (16 partitions)", b)]
    for name in ("termwise", "micro (+MMD, cross terms)"):
        configs.append(previous(lambda: T.vae_config("conv", name, b), f"{name} (previous)"))
        configs.append(T.vae_config("conv", name, b))
    configs[2].reference = "none (16 partitions)"
    out.append(T.run_section("conv_vae", configs, 3, rounds, {"batch_size": b}))
    del configs
    keras.backend.clear_session()
    configs = [conv_classifier(False, b), previous(lambda: conv_classifier(True, b), "make_private (previous)"),
               conv_classifier(True, b)]
    out.append(T.run_section("conv_classifier", configs, 3, rounds, {"batch_size": b}))
    for sec in out:
        T.record_speedups(sec, " (previous)", "speedup_over_previous")
    with open(argv[1], "w") as f:
        command = "python experiments/throughput/reuse_before_after.py " + " ".join(argv[1:])
        json.dump({"command": command, "sections": out}, f, indent=1)


app.run(main)
