"""Coupled randomness for the sensitivity audit: the same random numbers for a batch and its neighbour.

The sensitivity argument behind every epsilon (docs/privacy.md) compares the clipped sums of D
and D' = D + {x} under a *coupling* of the mechanism's internal randomness: each existing
example keeps its reparameterisation noise and its partition, and every partition that x does
not join keeps its prior samples. Given that coupling the untouched blocks are identical, and
the audit measures how far the touched ones move. Resetting one stateful generator to the same
state before both evaluations is another coupling, but not that one: the loss draws the
reparameterisation noise [B, L, D] first and the prior samples [P*M, D] after it, so one more
example shifts every later draw, and the prior samples of partition j sit at rows
j*M..j*M+M-1, so an example that enlarges the largest partition (M -> M+1) moves every
partition's rows. Under it every partition's term changes, so the measured change can exceed
the sensitivity without any leak (privacy needs *some* coupling under which the change is
bounded); `coupling="stream"` keeps that naive reset to show the difference.

`CoupledRandomness` replaces the model's loss generator (`model.rng`) and, for a model with a
`prior` (the VAE), its prior while the audit runs:

  * draws from `model.rng` of shape [n, ...] are rows 0..n-1 of a fixed table per call (call k
    of an evaluation reads table k): row i belongs to example i. The audit always puts the added
    example last, so the first rows (the existing examples) are the same in D and D'.
  * prior draws (`prior.sample(P*M)`, reshaped [P, M, D] by the divergences) are keyed by
    (partition, slot): slot (j, k) reads table row j*M_cap + k whatever M is, so an untouched
    partition gets exactly the same prior samples in D and D', and the partition x joins keeps
    its first |s_j| samples and gets one more for x's slot (x is its last member: the layout
    orders members by batch row).

Both are i.i.d. draws of the law the model asked for, so this is a valid coupling of the
mechanism's randomness, the one the derivation uses.
"""
from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from tfpriv.privacy.terms import BatchLayout


def _static_shape(shape) -> list[int]:
    return [int(s) for s in np.asarray(tf.convert_to_tensor(shape, tf.int32).numpy()).reshape([-1])]


class _Tables:
    """Fixed tables of i.i.d. draws: table (kind, k, trailing shape, dtype) for call k of an evaluation."""

    def __init__(self, seed: int, rows: int, salt: int):
        self.seed, self.rows, self.salt = int(seed), int(rows), int(salt)
        self._cache: dict = {}
        self.calls = 0

    def table(self, kind: str, trailing: tuple[int, ...], dtype, minval=None, maxval=None) -> tf.Tensor:
        k = self.calls
        self.calls += 1
        key = (kind, k, trailing, dtype, minval, maxval)
        if key not in self._cache:
            shape = [self.rows, *trailing]
            seed = tf.constant([self.seed * 1009 + self.salt, k], tf.int64)
            if kind == "normal":
                value = tf.random.stateless_normal(shape, seed=seed, dtype=dtype)
            elif dtype.is_integer:
                value = tf.random.stateless_uniform(shape, seed=seed, minval=minval, maxval=maxval, dtype=dtype)
            else:
                value = tf.random.stateless_uniform(shape, seed=seed, dtype=dtype)
            self._cache[key] = value
        return self._cache[key]


class RowCoupledGenerator:
    """Stands in for a `tf.random.Generator` inside a loss: draw k's row i is fixed per (k, i)."""

    def __init__(self, seed: int, max_rows: int = 256, salt: int = 0):
        self.tables = _Tables(seed, max_rows, salt)

    def begin(self) -> None:
        """Call before each evaluation of the loss: call k reads table k again."""
        self.tables.calls = 0

    def _rows(self, kind, shape, dtype, minval=None, maxval=None) -> tf.Tensor:
        dims = _static_shape(shape)
        if not dims:
            dims = [1]
            scalar = True
        else:
            scalar = False
        if dims[0] > self.tables.rows:
            raise ValueError(f"coupled randomness: {dims[0]} rows exceed the table's {self.tables.rows}")
        table = self.tables.table(kind, tuple(dims[1:]), tf.as_dtype(dtype), minval, maxval)
        out = table[:dims[0]]
        return out[0] if scalar else out

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=tf.float32, name=None) -> tf.Tensor:
        return mean + stddev * self._rows("normal", shape, dtype)

    def uniform(self, shape, minval=0, maxval=None, dtype=tf.float32, name=None) -> tf.Tensor:
        dtype = tf.as_dtype(dtype)
        if dtype.is_integer:
            return self._rows("uniform", shape, dtype, int(minval), int(maxval))
        maxval = 1.0 if maxval is None else maxval
        return minval + (maxval - minval) * self._rows("uniform", shape, dtype)


class SlotCoupledGenerator(RowCoupledGenerator):
    """A generator for prior samples drawn as P*M rows (partition-major): row j*M + k reads
    table row j*max_slots + k, so partition j's k-th sample does not depend on M."""

    def __init__(self, seed: int, max_partitions: int, max_slots: int, salt: int = 1):
        super().__init__(seed, max_partitions * max_slots, salt)
        self.max_slots = int(max_slots)
        self.partitions: int | None = None
        self.slots: int | None = None

    def begin_layout(self, partitions: int) -> None:
        self.begin()
        self.partitions = int(partitions)

    def _rows(self, kind, shape, dtype, minval=None, maxval=None) -> tf.Tensor:
        dims = _static_shape(shape)
        p = self.partitions
        if p is None or not dims or dims[0] % max(p, 1) or dims[0] // max(p, 1) > self.max_slots:
            raise ValueError(f"coupled prior: expected a draw of P*M rows for P = {p} partitions, got shape {dims}")
        m = dims[0] // max(p, 1)
        table = self.tables.table(kind, tuple(dims[1:]), tf.as_dtype(dtype), minval, maxval)
        rows = (np.arange(p)[:, None] * self.max_slots + np.arange(m)[None, :]).reshape([-1])
        return tf.gather(table, rows)


class CoupledPrior:
    """The model's prior with `sample(P*M)` served from a slot-coupled generator; the rest delegated."""

    def __init__(self, prior, generator: SlotCoupledGenerator):
        self._prior, self._generator = prior, generator

    def sample(self, n, seed=None, rng=None):
        return self._prior.sample(n, rng=self._generator)

    def __getattr__(self, name):
        return getattr(self._prior, name)


class CoupledRandomness:
    """Couples the loss randomness of a model between evaluations on a batch and its neighbours.

    mode "example" (default): the coupling of the module docstring. mode "stream": `model.rng`
    reset to one fixed Philox state before every evaluation (the naive reset; not a coupling
    of the untouched partitions, kept to show the difference). mode "none": the model's own
    generator, unreset (fresh randomness per evaluation).
    """

    MODES = ("example", "stream", "none")

    def __init__(self, model, seed: int = 0, mode: str = "example", max_batch: int = 256):
        if mode not in self.MODES:
            raise ValueError(f"coupling: must be one of {', '.join(self.MODES)}, got {mode!r}")
        self.model, self.seed, self.mode, self.max_batch = model, int(seed), mode, int(max_batch)
        self.slots: SlotCoupledGenerator | None = None  # the prior's generator while installed ("example")

    @contextlib.contextmanager
    def installed(self):
        """Swaps the model's loss generator (`dp_state.rng`) and prior for coupled ones; restores them
        on exit. The prior is a model attribute, not DP state: a plain object, swapped on the model."""
        model, prior = self.model, getattr(self.model, "prior", None)
        self.slots = None
        with contextlib.ExitStack() as restore:
            if self.mode == "example":
                self.rows = RowCoupledGenerator(self.seed, self.max_batch)
                restore.enter_context(model.dp_state.swapped(rng=self.rows))
                if prior is not None:
                    self.slots = SlotCoupledGenerator(self.seed, max_partitions=self.max_batch,
                                                      max_slots=self.max_batch)
                    model.prior = CoupledPrior(prior, self.slots)
                    restore.callback(setattr, model, "prior", prior)
            elif self.mode == "stream":
                self.stream = tf.random.Generator.from_seed(self.seed, alg="philox")
                self._state = self.stream.state.numpy().copy()
                restore.enter_context(model.dp_state.swapped(rng=self.stream))
            yield self

    def begin(self, layout: BatchLayout) -> None:
        """Call before each evaluation of the loss on a batch with this partition layout."""
        if self.mode == "example":
            self.rows.begin()
            if self.slots is not None:
                self.slots.begin_layout(int(layout.num_partitions))
        elif self.mode == "stream":
            self.stream.state.assign(self._state)

    def describe(self) -> str:
        return {
            "example": "per-example draws keyed by example, prior samples keyed by (partition, slot); "
                       "partition ids of existing examples fixed",
            "stream": "model.rng reset to one Philox state before every evaluation (naive; shifts draws)",
            "none": "fresh randomness per evaluation (not a coupling)",
        }[self.mode]
