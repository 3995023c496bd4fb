"""Batch sampling for private training: Poisson (what the accountant assumes) or shuffling.

Poisson sampling includes every example independently with probability q, so batch sizes
vary; the datasets here have an unknown batch dimension, so Keras traces the train step
once for all sizes (no padding needed). `--sampling=shuffle` takes fixed-size batches from
a shuffled epoch; its epsilon is computed as if batches were Poisson-sampled, the same
approximation (and caveat) TF Privacy's privacy statement reports.

The accountant assumes a fresh, independent sample at every step, so the batch of global
step s is a function of (seed, s) alone: `default_rng([seed, s])` (shuffling: the permutation
of epoch s // steps_per_epoch). A resumed run passes `start_step` = the steps already taken
and draws exactly the batches the uninterrupted run would have drawn, never a replay.
`new_sampling_seed()` draws the seed from the OS when the user gives none; the runner
checkpoints it with the ledger.

Every element is a global batch. Under `tf.distribute`, every worker runs the same pipeline
with the same seed; the strategy splits each global batch into one piece per replica (in
order) and, with the DATA auto-shard policy set here, each worker keeps its own pieces of that
same batch (never a different batch per worker, never the whole batch on every worker).
"""
from __future__ import annotations

import math
import secrets
from typing import Sequence

import numpy as np
import tensorflow as tf

from tfpriv.errors import ConfigError

SAMPLINGS = ("poisson", "shuffle")

SHUFFLE_CAVEAT = (
    "epsilon assumes Poisson sampling; batches were drawn by shuffling, for which the "
    "reported epsilon is an approximation (as in TF Privacy's privacy statement)")


def _as_tuple(arrays) -> tuple[np.ndarray, ...]:
    return tuple(arrays) if isinstance(arrays, (tuple, list)) else (arrays,)


def _signature(arrays: Sequence[np.ndarray]):
    return tuple(tf.TensorSpec([None, *a.shape[1:]], tf.as_dtype(a.dtype)) for a in arrays)


def _unwrap(arrays, batch):
    return batch if isinstance(arrays, (tuple, list)) else batch[0]


def new_sampling_seed() -> int:
    """A fresh 63-bit sampling seed from the OS (checkpoint it: the mechanism owns its randomness)."""
    return secrets.randbits(63)


def _check_seed(seed: int) -> int:
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed: must be a non-negative integer, got {seed!r}")
    return int(seed)


def _global_batches(ds: tf.data.Dataset) -> tf.data.Dataset:
    """`ds` with DATA auto-sharding: split every global batch across all replicas (see above)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def poisson_dataset(arrays, sampling_rate: float, seed: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless dataset of Poisson-sampled batches; the batch of step s depends on (seed, s) only."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 0 < sampling_rate <= 1:
        raise ConfigError(f"sampling_rate: q = B/N must be in (0, 1], got {sampling_rate}")
    seed = _check_seed(seed)

    def generate():
        step = start_step
        while True:
            idx = np.flatnonzero(np.random.default_rng([seed, step]).random(n) < sampling_rate)
            yield tuple(p[idx] for p in parts)
            step += 1

    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(parts))
    return _global_batches(ds.map(lambda *b: _unwrap(arrays, b)).prefetch(2))


def shuffle_dataset(arrays, batch_size: int, seed: int, start_step: int = 0) -> tf.data.Dataset:
    """Endless fixed-size batches from reshuffled epochs (remainder dropped); epoch e's
    permutation depends on (seed, e) only."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 1 <= batch_size <= n:
        raise ConfigError(f"batch_size: must be between 1 and the dataset size {n}, got {batch_size}")
    seed = _check_seed(seed)
    per_epoch = n // batch_size

    def generate():
        epoch, slot = divmod(start_step, per_epoch)
        while True:
            order = np.random.default_rng([seed, epoch]).permutation(n)
            for k in range(slot, per_epoch):
                idx = np.sort(order[k * batch_size:(k + 1) * batch_size])
                yield tuple(p[idx] for p in parts)
            epoch, slot = epoch + 1, 0

    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(parts))
    return _global_batches(ds.map(lambda *b: _unwrap(arrays, b)).prefetch(2))


def sampling_rate_and_steps(num_examples: int, batch_size: int, sampling: str) -> tuple[float, int]:
    """(sampling rate q = B/N, steps per epoch) for a sampling scheme."""
    if sampling not in SAMPLINGS:
        raise ConfigError(f"sampling: must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if not 1 <= batch_size <= num_examples:
        raise ConfigError(f"batch_size: must be between 1 and the dataset size {num_examples}, got {batch_size}")
    q = batch_size / num_examples
    steps_per_epoch = max(1, num_examples // batch_size) if sampling == "shuffle" else max(1, round(1 / q))
    return q, steps_per_epoch


def make_dataset(arrays, batch_size: int, sampling: str, seed: int,
                 start_step: int = 0) -> tuple[tf.data.Dataset, float, int]:
    """(dataset, sampling rate q, steps per epoch); the dataset's first batch is step `start_step`'s."""
    q, steps_per_epoch = sampling_rate_and_steps(len(_as_tuple(arrays)[0]), batch_size, sampling)
    if sampling == "poisson":
        return poisson_dataset(arrays, q, seed, start_step), q, steps_per_epoch
    return shuffle_dataset(arrays, batch_size, seed, start_step), q, steps_per_epoch


def default_max_batch_size(n: int, q: float, tail_sds: float = 6.0) -> int:
    """A cap on Poisson batch sizes exceeded with negligible probability (mean + 6 sd)."""
    mean = n * q
    return int(math.ceil(mean + tail_sds * math.sqrt(mean * (1 - q)))) + 1
