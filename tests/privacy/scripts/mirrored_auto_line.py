"""Run in a fresh process: 2 logical CPUs, MirroredStrategy, `make_private` with clipping "auto";
one step of fit. The parent reads stderr: the path line is printed once, not once per replica."""
import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import tfpriv  # noqa: E402
from tfpriv.compat import keras  # noqa: E402

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
with strategy.scope():
    model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2, name="dense")])
    dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                   tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                   num_examples=32, batch_size=8, delta=1e-3)
    dp_model.compile(keras.optimizers.SGD(0.1))
dp_model.fit(x, y, epochs=1, steps_per_epoch=1, verbose=0, seed=0)
print(json.dumps({"replicas": strategy.num_replicas_in_sync}))
