"""Run in a fresh process: 2 logical CPUs, MirroredStrategy; prints JSON with measured values: the
noise std of one update on 2 replicas, and how far the noisy update is from one device's."""
import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.terms import LossTerms, TermSpec  # noqa: E402
from tfpriv.training.dp_model import DPModel  # noqa: E402


class Linear(DPModel):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(200, kernel_initializer="zeros")

    def term_spec(self):
        return TermSpec(sample=("loss",))

    def loss_terms(self, x, layout, training=True):
        return LossTerms({"loss": tf.reduce_sum(self.dense(x), axis=1)})


def weights_after_one_step(strategy, noise: float):
    with strategy.scope():
        model = Linear()
        model.compile(keras.optimizers.SGD(1.0), dp=DPConfig(
            aggregation="micro", l2_norm_clip=0.5, noise_multiplier=noise, expected_batch_size=32, seed=1, verify=False),
            num_examples=320)
    x = np.random.default_rng(0).standard_normal([32, 40]).astype(np.float32)
    model.fit(tf.data.Dataset.from_tensors(x), epochs=1, verbose=0)
    return np.concatenate([w.ravel() for w in model.get_weights()]), int(model.ledger.steps.numpy())


two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
one = tf.distribute.get_strategy()
clean, _ = weights_after_one_step(two, 0.0)
noisy, steps = weights_after_one_step(two, 2.0)
clean_one, _ = weights_after_one_step(one, 0.0)
noisy_one, _ = weights_after_one_step(one, 2.0)
print(json.dumps({"noise_std": float(np.std(noisy - clean)), "expected": 2.0 * 0.5 / 32,
                  "coordinates": int(clean.size), "steps": steps, "replicas": two.num_replicas_in_sync,
                  "max_diff_to_one_device": float(np.max(np.abs(noisy - noisy_one))),
                  "noise_scale": float(np.max(np.abs(noisy_one - clean_one)))}))
