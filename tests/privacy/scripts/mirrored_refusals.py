"""Run in a fresh process: 2 logical CPUs, MirroredStrategy; prints JSON: which modes the engine
accepts, and the whole-batch gradient of an accepted termwise (singleton partitions) model."""
import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from tfpriv.compat import keras
from tfpriv.errors import ConfigError  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.terms import LossTerms, TermSpec  # noqa: E402
from tfpriv.training.dp_model import DPModel  # noqa: E402


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


CASES = {
    "batch": dict(aggregation="batch"),
    "micro_with_batch_term": dict(aggregation="micro", max_batch_size=16),
    "termwise_b4": dict(aggregation="termwise", batch_clip=0.5, num_partitions=4),
    "termwise_singleton": dict(aggregation="termwise", batch_clip=0.5, num_partitions=0),
    "termwise_no_batch_clip": dict(aggregation="termwise", batch_clip=0.0, num_partitions=4),
}
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x = np.random.default_rng(0).standard_normal([8, 5]).astype(np.float32)
out = {"replicas": strategy.num_replicas_in_sync}
for name, kw in CASES.items():
    with strategy.scope():
        model = WithBatchTerm()
        model.compile(keras.optimizers.SGD(0.1), dp=DPConfig(
            l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=8, seed=1, verify=False, **kw),
            num_examples=80)
    try:
        model.fit(tf.data.Dataset.from_tensors(x), epochs=1, verbose=0)
        out[name] = "accepted"
    except ConfigError as exc:
        out[name] = "refused: " + str(exc)
print(json.dumps(out))
