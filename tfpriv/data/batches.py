"""`tf.data` pipelines of arrays with tfpriv's pipeline options, for the private samplers
(`sampling.py`) and for the non-private `fit`s tfpriv runs itself (its evaluation classifiers).

Keras' own pipeline of arrays (`fit(x, y, batch_size=..., shuffle=True)`) runs tf.data's autotuner,
whose thread sleeps 10, 20, 40, ... ms between rounds; destroying an iterator waits for that sleep
to end, so a `fit` whose iterator lived t seconds returned at the next 10 * (2^k - 1) ms after t
(an evaluation classifier's 21.6 s of epochs returned at 41.6 s; experiments/throughput/README.md).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def pipeline_options() -> tf.data.Options:
    """No autotuner (nothing here is AUTOTUNE: one map behind a fixed prefetch) and no default graph
    rewrites (none applies, and they serialize the arrays a pipeline holds whenever an iterator is made:
    194 ms for 60,000 MNIST images against 24 ms without)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    return options


def shuffled_batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int | None) -> tf.data.Dataset:
    """(x, y) in batches of `batch_size` (the last one smaller), in a new order at every iteration,
    as Keras' `fit(x, y, batch_size=batch_size, shuffle=True)` takes them: each epoch of a `fit`, and each
    `fit` given the same dataset, a fresh permutation, a function of `seed` (and of TensorFlow's global
    seed when `seed` is None, as Keras' shuffle is)."""
    if len(x) != len(y):
        raise ValueError(f"x, y: must have as many rows, got {len(x)} and {len(y)}")
    order = tf.data.Dataset.range(len(x)).shuffle(len(x), seed=seed, reshuffle_each_iteration=True).batch(batch_size)
    arrays = tf.data.Dataset.from_tensors((tf.convert_to_tensor(x), tf.convert_to_tensor(y))).repeat()
    ds = tf.data.Dataset.zip((order, arrays)).map(lambda idx, xy: (tf.gather(xy[0], idx), tf.gather(xy[1], idx)))
    return ds.prefetch(2).with_options(pipeline_options())
