"""Batch sampling for private training: Poisson (amplification by sampling) or shuffling.

Poisson sampling includes every example independently with probability q, so batch sizes
vary; the datasets here have an unknown batch dimension, so Keras traces the train step
once for all sizes (no padding needed). `--sampling=shuffle` takes fixed-size batches from
a fresh uniform permutation each epoch; the accountant charges it one Gaussian at half the
noise multiplier per epoch (docs/privacy.md, "Sampling schemes"), not the Poisson figure.

The accountant assumes a fresh, independent sample at every step, so the batch of global
step s is a function of (seed, s) alone: a stateless Philox uniform keyed by (seed, s) per example
(`poisson_mask`; shuffling: the permutation `default_rng([seed, e])` of epoch e = s // steps_per_epoch). A resumed run passes `start_step` = the steps already taken
and draws exactly the batches the uninterrupted run would have drawn, never a replay; a
Poisson dataset given to several fits starts each at the model's step count. `new_sampling_seed()`
draws the seed from the OS when the user gives none; the runner checkpoints it with the ledger.

Every dataset made here carries a `Sampled` tag (`sampled_by`): how its batches were drawn,
which `fit` reads to account them (a dataset tfpriv did not sample has none, and a private
`fit` refuses it unless the user declares its scheme).

Every element is a global batch. Under `tf.distribute`, every worker runs the same pipeline
with the same seed; the strategy splits each global batch into one piece per replica (in
order) and, with the DATA auto-shard policy set here, each worker keeps its own pieces of that
same batch (never a different batch per worker, never the whole batch on every worker).
"""
from __future__ import annotations

import dataclasses
import math
import secrets
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tfpriv.data.batches import pipeline_options
from tfpriv.errors import ConfigError

SAMPLINGS = ("poisson", "shuffle")


@dataclasses.dataclass
class Sampled:
    """How tfpriv drew a dataset's batches: `scheme` ("poisson" or "shuffle"), the rate
    q = B / `num_examples`, `steps_per_epoch`, and `next_step`, the global step whose batch an
    iteration started now draws first (a private `fit` sets it to the model's step count, so a
    dataset used by several fits never draws a step's batch twice, whatever was prefetched)."""

    scheme: str
    sampling_rate: float
    num_examples: int
    steps_per_epoch: int
    next_step: int


def sampled_by(dataset) -> Sampled | None:
    """The `Sampled` tag of a dataset made here, or None (a dataset tfpriv did not sample, or one
    transformed after it was made: `map`, `batch`, ... make a new dataset without the tag)."""
    return getattr(dataset, "_tfpriv_sampled", None)


def _tagged(ds: tf.data.Dataset, tag: Sampled) -> tf.data.Dataset:
    ds._tfpriv_sampled = tag  # noqa: SLF001 (a plain attribute; tf.data keeps no state of its own there)
    return ds


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
    """`ds` with DATA auto-sharding (split every global batch across all replicas, see above) and
    tfpriv's pipeline options (`batches.pipeline_options`: no autotuner, whose sleeping thread held the
    end of a `fit`, no default rewrites, which copied the arrays at every iterator)."""
    options = pipeline_options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def poisson_mask(seed: int, step: tf.Tensor, num_examples: int, sampling_rate: float) -> tf.Tensor:
    """[N] bool: which examples step `step`'s batch holds, each independently with probability q: a
    float64 stateless uniform keyed by (seed, step) below q (as numpy's `random(n) < q`: 53-bit
    uniforms, so the inclusion probability is q up to 2^-53)."""
    return _poisson_mask(tf.constant(seed, tf.int64), tf.cast(step, tf.int64), tf.constant(num_examples, tf.int64),
                         tf.constant(sampling_rate, tf.float64))


# Traced once per process: the dataset of every private `fit` calls it, and tracing the draw anew
# cost ~20 ms a fit.
@tf.function(autograph=False, input_signature=[tf.TensorSpec([], tf.int64)] * 3 + [tf.TensorSpec([], tf.float64)])
def _poisson_mask(seed: tf.Tensor, step: tf.Tensor, num_examples: tf.Tensor, sampling_rate: tf.Tensor) -> tf.Tensor:
    u = tf.random.stateless_uniform(tf.reshape(num_examples, [1]), seed=tf.stack([seed, step]), dtype=tf.float64,
                                    alg="philox")
    return u < sampling_rate


def poisson_dataset(arrays, sampling_rate: float, seed: int, start_step: int = 0,
                    pack: Callable | None = None) -> tf.data.Dataset:
    """Endless dataset of Poisson-sampled batches; the batch of step s depends on (seed, s) only.
    `pack` makes an element of the batch's arrays (default: `arrays`' own structure).

    TensorFlow ops throughout (`poisson_mask`, a gather from the arrays held as one dataset element,
    as Keras holds arrays), except one Python call per iteration that reads where it starts: a Python
    generator per batch held the GIL against the training loop (1.3 ms a step on the README's MLP).
    One `map` draws and packs a batch: every dataset function is traced when the dataset is made,
    at every `fit` (about 25 ms each)."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 0 < sampling_rate <= 1:
        raise ConfigError(f"sampling_rate: q = B/N must be in (0, 1], got {sampling_rate}")
    seed = _check_seed(seed)

    tag = Sampled("poisson", sampling_rate, n, max(1, round(1 / sampling_rate)), start_step)

    def first_step() -> np.int64:  # read when an iteration starts: `fit` sets it to the model's step count
        return np.int64(tag.next_step)

    def steps_from(_):
        start = tf.reshape(tf.py_function(first_step, [], tf.int64), [])
        return tf.data.Dataset.range(start, np.iinfo(np.int64).max)

    pack = pack or (lambda *b: _unwrap(arrays, b))

    @tf.autograph.experimental.do_not_convert  # no Python control flow here; converting costs a trace
    def batch(step, data):
        idx = tf.where(poisson_mask(seed, step, n, sampling_rate))[:, 0]
        return pack(*(tf.gather(p, idx) for p in data))

    steps = tf.data.Dataset.range(1).flat_map(steps_from)
    data = tf.data.Dataset.from_tensors(tuple(tf.convert_to_tensor(p) for p in parts)).repeat()
    return _tagged(_global_batches(tf.data.Dataset.zip((steps, data)).map(batch).prefetch(2)), tag)


def poisson_batches(x, y=None, *, batch_size: int, seed: int | None = None) -> tf.data.Dataset:
    """Endless Poisson-sampled batches of `x` (and `y`) at rate q = batch_size / len(x), tagged so
    that a private model's `fit` accounts them as Poisson steps (`fit(dataset, steps_per_epoch=...)`).
    The batch of global step s is a function of (seed, s); each `fit` starts the dataset at the
    model's step count, so no step's batch is used twice. Transforming the result (`map`, ...) drops
    the tag; transform the arrays before instead.

    Example:
        >>> import numpy as np
        >>> from tfpriv.data.sampling import poisson_batches, sampled_by
        >>> x = np.arange(100, dtype="float32").reshape(100, 1)
        >>> ds = poisson_batches(x, batch_size=10, seed=0)
        >>> sampled_by(ds).scheme, sampled_by(ds).sampling_rate
        ('poisson', 0.1)
    """
    arrays = x if y is None else (x, y)
    n = len(_as_tuple(x)[0]) if isinstance(x, (tuple, list)) else len(x)
    if not 1 <= batch_size <= n:
        raise ConfigError(f"batch_size: must be between 1 and the number of examples {n}, got {batch_size}")
    structure = (tuple(x) if isinstance(x, (tuple, list)) else x) if y is None else \
        (tuple(x) if isinstance(x, (tuple, list)) else x, y)
    flat = tuple(np.asarray(a) for a in tf.nest.flatten(structure))
    return poisson_dataset(flat, batch_size / n, new_sampling_seed() if seed is None else seed,
                           pack=packer(structure))


def packer(structure) -> Callable:
    """A `pack` for the samplers here: a batch's flat arrays back into `structure` (as `tf.nest` flattens it)."""
    return lambda *parts: tf.nest.pack_sequence_as(structure, list(parts))


def shuffle_dataset(arrays, batch_size: int, seed: int, start_step: int = 0,
                    pack: Callable | None = None) -> tf.data.Dataset:
    """Endless fixed-size batches from reshuffled epochs (remainder dropped); epoch e's
    permutation depends on (seed, e) only. `pack` as for `poisson_dataset`."""
    parts = _as_tuple(arrays)
    n = len(parts[0])
    if not 1 <= batch_size < n:
        raise ConfigError(f"batch_size: shuffled batches must be smaller than the dataset size {n}, got {batch_size}")
    seed = _check_seed(seed)
    per_epoch = shuffle_steps_per_epoch(n, batch_size)

    def generate():
        epoch, slot = divmod(start_step, per_epoch)
        while True:
            order = np.random.default_rng([seed, epoch]).permutation(n)
            for k in range(slot, per_epoch):
                idx = np.sort(order[k * batch_size:(k + 1) * batch_size])
                yield tuple(p[idx] for p in parts)
            epoch, slot = epoch + 1, 0

    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(parts))
    return _tagged(_global_batches(ds.map(pack or (lambda *b: _unwrap(arrays, b))).prefetch(2)),
                   Sampled("shuffle", batch_size / n, n, per_epoch, start_step))


def shuffle_steps_per_epoch(num_examples: int, batch_size: int) -> int:
    """Batches per shuffled epoch: positions [0, K·B) of each permutation, K = (N - 1) // B, so at
    least one position is always dropped (the coupling in docs/privacy.md needs it)."""
    return max(1, (num_examples - 1) // batch_size)


def first_rows(arrays):
    """A batch of `arrays`' first row with the structure, trailing shapes and dtypes of `make_dataset`'s
    batches: what `DPModel.prepare` reads, without copying the arrays or building a pipeline."""
    return _unwrap(arrays, tuple(tf.convert_to_tensor(p[:1]) for p in _as_tuple(arrays)))


def sampling_rate_and_steps(num_examples: int, batch_size: int, sampling: str) -> tuple[float, int]:
    """(sampling rate q = B/N, steps per epoch) for a sampling scheme."""
    if sampling not in SAMPLINGS:
        raise ConfigError(f"sampling: must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if not 1 <= batch_size <= num_examples or (sampling == "shuffle" and batch_size == num_examples):
        bound = "smaller than" if sampling == "shuffle" else "between 1 and"
        raise ConfigError(f"batch_size: must be {bound} the dataset size {num_examples}, got {batch_size}")
    q = batch_size / num_examples
    steps_per_epoch = (shuffle_steps_per_epoch(num_examples, batch_size) if sampling == "shuffle"
                       else max(1, round(1 / q)))
    return q, steps_per_epoch


def make_dataset(arrays, batch_size: int, sampling: str, seed: int, start_step: int = 0,
                 pack: Callable | None = None) -> tuple[tf.data.Dataset, float, int]:
    """(dataset, sampling rate q, steps per epoch); the dataset's first batch is step `start_step`'s;
    `pack` makes an element of a batch's arrays (default: `arrays`' own structure)."""
    q, steps_per_epoch = sampling_rate_and_steps(len(_as_tuple(arrays)[0]), batch_size, sampling)
    if sampling == "poisson":
        return poisson_dataset(arrays, q, seed, start_step, pack), q, steps_per_epoch
    return shuffle_dataset(arrays, batch_size, seed, start_step, pack), q, steps_per_epoch


def default_max_batch_size(n: int, q: float, tail_sds: float = 6.0) -> int:
    """A cap on Poisson batch sizes exceeded with negligible probability (mean + 6 sd)."""
    mean = n * q
    return int(math.ceil(mean + tail_sds * math.sqrt(mean * (1 - q)))) + 1
