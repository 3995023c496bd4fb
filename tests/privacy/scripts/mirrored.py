"""Run in a fresh process: 2 logical CPUs, MirroredStrategy; prints JSON with measured values.
"noise": the noise std of one update on 2 replicas, and how far the noisy update is from one
device's. "refusals": which modes the engine accepts on 2 replicas. "auto": one step of a
`make_private` model with clipping "auto" (the parent counts its path lines on stderr). One process
for all: each check would otherwise pay its own TensorFlow start-up."""
import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import tfpriv  # noqa: E402
from tfpriv.compat import keras  # noqa: E402
from tfpriv.errors import ConfigError  # noqa: E402
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


class WithBatchTerm(DPModel):
    """A linear model with a sample-wise term and a batch-wise term (the partition's mean output)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def term_spec(self):
        return TermSpec(sample=("phi",), batch=("psi",))

    def loss_terms(self, x, layout, training=True):
        h = self.dense(x)
        grouped = layout.gather(h)
        counts = tf.maximum(tf.reduce_sum(layout.mask, axis=1), 1.0)
        psi = tf.reduce_sum(tf.square(tf.reduce_sum(grouped, axis=1) / counts[:, None]), axis=1)
        return LossTerms({"phi": tf.reduce_sum(tf.square(h), axis=1)}, {"psi": psi})


def weights_after_one_step(strategy, noise: float):
    with strategy.scope():
        model = Linear()
        model.compile(keras.optimizers.SGD(1.0), dp=DPConfig(
            aggregation="micro", l2_norm_clip=0.5, noise_multiplier=noise, expected_batch_size=32, seed=1, verify=False),
            num_examples=320)
    x = np.random.default_rng(0).standard_normal([32, 40]).astype(np.float32)
    model.fit(tf.data.Dataset.from_tensors(x), epochs=1, verbose=0, sampling="fixed")
    return np.concatenate([w.ravel() for w in model.get_weights()]), model.ledger.total_steps


def noise(two) -> dict:
    one = tf.distribute.get_strategy()
    clean, _ = weights_after_one_step(two, 0.0)
    noisy, steps = weights_after_one_step(two, 2.0)
    clean_one, _ = weights_after_one_step(one, 0.0)
    noisy_one, _ = weights_after_one_step(one, 2.0)
    return {"noise_std": float(np.std(noisy - clean)), "expected": 2.0 * 0.5 / 32,
            "coordinates": int(clean.size), "steps": steps, "replicas": two.num_replicas_in_sync,
            "max_diff_to_one_device": float(np.max(np.abs(noisy - noisy_one))),
            "noise_scale": float(np.max(np.abs(noisy_one - clean_one)))}


REFUSAL_CASES = {
    "batch": dict(aggregation="batch"),
    "micro_with_batch_term": dict(aggregation="micro", max_batch_size=16),
    "termwise_b4": dict(aggregation="termwise", batch_clip=0.5, num_partitions=4),
    "termwise_singleton": dict(aggregation="termwise", batch_clip=0.5, num_partitions=0),
    "termwise_no_batch_clip": dict(aggregation="termwise", batch_clip=0.0, num_partitions=4),
}


def refusals(strategy) -> dict:
    x = np.random.default_rng(0).standard_normal([8, 5]).astype(np.float32)
    out = {"replicas": strategy.num_replicas_in_sync}
    for name, kw in REFUSAL_CASES.items():
        with strategy.scope():
            model = WithBatchTerm()
            model.compile(keras.optimizers.SGD(0.1), dp=DPConfig(
                l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=8, seed=1, verify=False, **kw),
                num_examples=80)
        try:
            model.fit(tf.data.Dataset.from_tensors(x), epochs=1, verbose=0, sampling="fixed")
            out[name] = "accepted"
        except ConfigError as exc:
            out[name] = "refused: " + str(exc)
    return out


def auto_line(strategy) -> dict:
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2, name="probe")])
        dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                       DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                       num_examples=32, batch_size=8, delta=1e-3)
        dp_model.compile(keras.optimizers.SGD(0.1))
    dp_model.fit(x, y, epochs=1, steps_per_epoch=1, verbose=0, seed=0)
    return {"replicas": strategy.num_replicas_in_sync}


# One strategy for all parts (each always used one for all its models): with a second
# MirroredStrategy in this process, its first all-reduce fails (collective shape mismatch).
two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print(json.dumps({"noise": noise(two), "refusals": refusals(two), "auto": auto_line(two)}))
