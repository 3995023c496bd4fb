"""Batch sampling for private training: Poisson (what the accountant assumes) or shuffling.

Poisson sampling includes every example independently with probability q, so batch sizes
vary; the datasets here have an unknown batch dimension, so Keras traces the train step
once for all sizes (no padding needed). `--sampling=shuffle` takes fixed-size batches from
a shuffled epoch; its epsilon is computed as if batches were Poisson-sampled, the same
approximation (and caveat) TF Privacy's privacy statement reports.
"""
from __future__ import annotations

import math
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


def poisson_dataset(arrays, sampling_rate: float, seed: int | None = None) -> tf.data.Dataset:
    """Endless dataset of Poisson-sampled batches (each example kept with probability q)."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 0 < sampling_rate <= 1:
        raise ConfigError(f"--batch_size: sampling rate q = B/N must be in (0, 1], got {sampling_rate}")

    def generate():
        rng = np.random.default_rng(seed)
        while True:
            idx = np.flatnonzero(rng.random(n) < sampling_rate)
            yield tuple(p[idx] for p in parts)

    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(parts))
    return ds.map(lambda *b: _unwrap(arrays, b)).prefetch(2)


def shuffle_dataset(arrays, batch_size: int, seed: int | None = None) -> tf.data.Dataset:
    """Endless dataset of fixed-size batches from reshuffled epochs (remainder dropped)."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 1 <= batch_size <= n:
        raise ConfigError(f"--batch_size: must be between 1 and the dataset size {n}, got {batch_size}")

    def generate():
        rng = np.random.default_rng(seed)
        while True:
            order = rng.permutation(n)
            for start in range(0, n - batch_size + 1, batch_size):
                idx = np.sort(order[start:start + batch_size])
                yield tuple(p[idx] for p in parts)

    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(parts))
    return ds.map(lambda *b: _unwrap(arrays, b)).prefetch(2)


def make_dataset(arrays, batch_size: int, sampling: str, seed: int | None = None) -> tuple[tf.data.Dataset, float, int]:
    """(dataset, sampling rate q, steps per epoch) for `--sampling` and `--batch_size`."""
    if sampling not in SAMPLINGS:
        raise ConfigError(f"--sampling: must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    n = len(_as_tuple(arrays)[0])
    if not 1 <= batch_size <= n:
        raise ConfigError(f"--batch_size: must be between 1 and the dataset size {n}, got {batch_size}")
    q = batch_size / n
    steps_per_epoch = max(1, n // batch_size) if sampling == "shuffle" else max(1, round(1 / q))
    if sampling == "poisson":
        return poisson_dataset(arrays, q, seed), q, steps_per_epoch
    return shuffle_dataset(arrays, batch_size, seed), q, steps_per_epoch


def default_max_batch_size(n: int, q: float, tail_sds: float = 6.0) -> int:
    """A cap on Poisson batch sizes exceeded with negligible probability (mean + 6 sd)."""
    mean = n * q
    return int(math.ceil(mean + tail_sds * math.sqrt(mean * (1 - q)))) + 1
