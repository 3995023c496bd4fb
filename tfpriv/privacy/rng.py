"""The mechanism's random streams: DP noise and partitions ("noise"), randomness inside a loss ("loss").

Seeded streams get independent Philox keys derived from (seed, stream) with numpy's
SeedSequence. `tf.random.Generator.from_seed(s)` is not used: it puts s in the counter, so
seeds s and s + 1 give the same stream shifted by one block, and two generators seeded with
the same value (formerly the DP noise and a GAN's latents) drew the same numbers.
Unseeded streams come from the OS; a release made before training draws its noise on the host
(`release_generator`). Generators are variables: the training runner saves
them in every checkpoint, so a resumed run continues each stream where it stopped.

Each example's numbers are its own (`StreamGenerator`): within a training step, the numbers of
row i of a draw are Philox(key of (stream, step, call), counter (row i, column)), a function of
the stream's seed, the step, which draw of the step it is and the example's slot i, never of how
many other rows are drawn. So adding one example to a batch changes no other example's latent,
interpolation weight, reparameterisation noise or partition, nor any partition's prior samples,
even for someone who knows the seed; and a strategy's replica draws exactly the rows one device
would draw for the same examples.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np
import tensorflow as tf

STREAMS = {"noise": 1, "loss": 2, "release": 3}


def replica_offset(n) -> tf.Tensor:
    """int64: how many rows the replicas before this one hold when each holds `n` (0 on one replica)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return tf.constant(0, tf.int64)
    counts = ctx.all_gather(tf.reshape(tf.cast(n, tf.int64), [1]), axis=0)  # [R]: every replica's rows
    return tf.reduce_sum(counts[:ctx.replica_id_in_sync_group])


def replica_rows(n) -> tf.Tensor:
    """This replica's share of `n` rows split across the replicas in sync (n on one replica)."""
    ctx = tf.distribute.get_replica_context()
    replicas = 1 if ctx is None else ctx.num_replicas_in_sync
    n = tf.convert_to_tensor(n, tf.int32)
    if replicas == 1:
        return n
    rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
    return n // replicas + tf.cast(rid < n % replicas, tf.int32)


def box_muller(u_radius: tf.Tensor, u_angle: tf.Tensor, scale=1.0) -> tuple[tf.Tensor, tf.Tensor]:
    """Two independent N(0, scale^2) tensors from two uniform [0, 1) tensors, as TensorFlow's
    normal kernel computes them (its radius uniform is floored at 1e-7, so |z| <= 5.68 scale)."""
    radius = tf.sqrt(-2.0 * tf.math.log(tf.maximum(u_radius, 1e-7))) * scale
    angle = (2.0 * np.pi) * u_angle
    return radius * tf.sin(angle), radius * tf.cos(angle)


_M = (0xD2511F53, 0xCD9E8D57)  # Philox4x32-10's multipliers and key increments (Salmon et al. 2011)
_W = (0x9E3779B9, 0xBB67AE85)
_STEP_KEY = 0x5EED  # tags the counter that derives a (step, call)'s key
PHILOX = 1  # TensorFlow's id of the Philox algorithm in its stateless kernels (`tf.random.Algorithm.PHILOX`)


def philox(key: tuple[tf.Tensor, tf.Tensor], counter: tf.Tensor) -> tf.Tensor:
    """Philox4x32-10 of uint32 counters [..., 4] under the uint32 key words (k0, k1): uint32 [..., 4].

    The generator TensorFlow's stateless ops use (the same bits as `StatelessRandomUniformFullIntV2`
    at that key and counter), written as element-wise ops so that every row of a draw can have a
    counter of its own in one vectorized computation.
    """
    counter = tf.cast(counter, tf.uint32)
    bits = _philox_rounds(tf.cast(key[0], tf.uint32), tf.cast(key[1], tf.uint32), tf.reshape(counter, [-1, 4]))
    return tf.reshape(bits, tf.shape(counter))


def _philox_rounds(k0: tf.Tensor, k1: tf.Tensor, counter: tf.Tensor) -> tf.Tensor:
    """`philox` on [N, 4] counters (traced inside `_row_draw`'s function)."""
    low, shift = tf.constant(0xFFFFFFFF, tf.uint64), tf.constant(32, tf.uint64)
    c = tf.unstack(counter, axis=-1)
    for r in range(10):
        p0 = tf.cast(c[0], tf.uint64) * tf.constant(_M[0], tf.uint64)
        p1 = tf.cast(c[2], tf.uint64) * tf.constant(_M[1], tf.uint64)
        hi0, lo0 = tf.cast(tf.bitwise.right_shift(p0, shift), tf.uint32), tf.cast(tf.bitwise.bitwise_and(p0, low), tf.uint32)
        hi1, lo1 = tf.cast(tf.bitwise.right_shift(p1, shift), tf.uint32), tf.cast(tf.bitwise.bitwise_and(p1, low), tf.uint32)
        c = [tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(hi1, c[1]), k0), lo1,
             tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(hi0, c[3]), k1), lo0]
        if r < 9:
            k0, k1 = k0 + tf.constant(_W[0], tf.uint32), k1 + tf.constant(_W[1], tf.uint32)
    return tf.stack(c, axis=-1)


def _words(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The low and high uint32 words of an int64 tensor."""
    x = tf.bitcast(tf.cast(x, tf.int64), tf.uint64)
    return tf.cast(x, tf.uint32), tf.cast(tf.bitwise.right_shift(x, tf.constant(32, tf.uint64)), tf.uint32)


def _unit(bits: tf.Tensor, dtype) -> tf.Tensor:
    """Uniform [0, 1) from uint32 bits (their top 24 bits), in float32 or wider."""
    return tf.cast(tf.bitwise.right_shift(bits, 8), _work(dtype)) * (2.0 ** -24)


def _work(dtype: tf.DType) -> tf.DType:
    """The dtype a draw of `dtype` is computed in: float64 for float64, else float32."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def _step_key(state: tf.Tensor, call_word: tf.Tensor) -> tf.Tensor:
    """The Philox key (uint64) of a step's draw: Philox(state key, counter words (state counter lo,
    hi, call, _STEP_KEY)), one kernel op (the element-wise `philox` is ~140 small ops)."""
    as_u64 = lambda v: tf.bitcast(tf.cast(v, tf.int64), tf.uint64)  # noqa: E731
    counter = tf.stack([as_u64(state[0]), call_word])
    words = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[1], key=tf.reshape(as_u64(state[2]), [1]), counter=counter, alg=PHILOX, dtype=tf.uint64)
    return words[0]


_STATE = tf.TensorSpec([3], tf.int64)  # a Philox generator's state: counter (2 words), key
_WORD = tf.TensorSpec([], tf.uint64)
_draw_key_fn = tf.function(_step_key, autograph=False, input_signature=[_STATE, _WORD])


@functools.cache
def _row_draw(kind: str, dtype: tf.DType) -> tf.types.experimental.PolymorphicFunction:
    """The traced function of a draw's rows ("normal" or "uniform" in `dtype`): (state, call word,
    rows, groups, width, a, b) -> [len(rows), width], row r of group g from the Philox counters
    (column block, r, g, 0) under the draw's key; `a, b` are (mean, stddev) or (minval, maxval - minval).
    One call op in a traced step instead of ~150 small ones, paid at every draw of every trace."""
    param = tf.int64 if dtype.is_integer else _work(dtype)
    spec = [_STATE, _WORD, tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([], tf.int64), tf.TensorSpec([], param), tf.TensorSpec([], param)]

    def transform(bits, a, b):
        if kind == "normal":
            u = _unit(bits, dtype)
            # Box-Muller on (u0, u1) and (u2, u3) of each block, as TensorFlow's normal kernel pairs them.
            z = tf.stack(box_muller(u[:, 0::2], u[:, 1::2]), axis=-1)
            return tf.cast(tf.reshape(z, tf.shape(u)) * b + a, dtype)
        if dtype.is_integer:
            return tf.cast(a + tf.cast(bits, tf.int64) % b, dtype)
        return tf.cast(_unit(bits, dtype) * b + a, dtype)

    def draw(state, call_word, rows, groups, width, a, b):
        k0, k1 = _words(_step_key(state, call_word))
        size = tf.stack([tf.shape(rows, tf.int64)[0], (width + 3) // 4])
        block = tf.broadcast_to(tf.range(size[1])[None, :], size)
        row = tf.broadcast_to(rows[:, None], size)
        group = tf.broadcast_to(groups[:, None], size)
        counter = tf.stack([_words(block)[0], _words(row)[0], _words(group)[0], tf.zeros(size, tf.uint32)], -1)
        return transform(tf.reshape(philox((k0, k1), counter), [size[0], -1]), a, b)[:, :width]
    return tf.function(draw, autograph=False, input_signature=spec)


# The open steps of this thread, by generator: a strategy traces each replica's step in a thread of its own.
_STEPS = threading.local()


class _Step:
    """The draws of one training step: the stream state read once, the draws numbered in call order."""

    def __init__(self, state: tf.Tensor):
        self.state = state
        self.calls = 0
        self.replay: tuple[int, tf.Tensor, tf.Tensor | None] | None = None


@functools.cache
def _noise_draw(dtype: tf.DType, alg: int) -> tf.types.experimental.PolymorphicFunction:
    """The traced function of `StreamGenerator.normal_once`: (state, call word, n, stddev) -> n draws
    in `dtype`, one call op in a traced step."""
    work = _work(dtype)

    def draw(state, call_word, n, stddev):
        half = (n + 1) // 2
        key = _step_key(state, call_word)
        u = tf.raw_ops.StatelessRandomUniformV2(shape=tf.stack([2, half]), key=tf.reshape(key, [1]),
                                                counter=tf.zeros([2], tf.uint64), alg=alg, dtype=work)
        return tf.cast(tf.concat(box_muller(u[0], u[1], stddev), 0)[:n], dtype)
    return tf.function(draw, autograph=False, input_signature=[_STATE, _WORD, tf.TensorSpec([], tf.int64),
                                                                tf.TensorSpec([], work)])


class StreamGenerator(tf.random.Generator):
    """A Philox stream whose numbers are keyed by (step, call, row): each example's are its own.

    Inside `with generator.step():` (one training step) the state is read once and the k-th draw
    of the step has the key Philox(stream key, (step counter, k)); row i of that draw is
    Philox(that key, (column block, row i, group)). Outside a step every draw reads and advances
    the state by itself (fresh numbers each call). `normal`/`uniform` treat the leading axis as
    rows (under a strategy, a replica's rows are numbered after the other replicas', so the
    numbers are those one device would draw); `slots(parts)` keys draws of parts * m rows by
    (group j, row k) instead; `replaying(start, rows, group)` repeats draws of the step for
    chosen rows (an example, or a partition, recomputed alone); `normal_once` draws one tensor
    identical on every replica (the DP noise).
    """

    @property
    def _scope(self) -> _Step | None:
        return getattr(_STEPS, "open", {}).get(id(self))

    @contextlib.contextmanager
    def step(self):
        """Within the block the draws are those of one step: keyed by the state at entry and by
        their order, which a traced step fixes, so they do not depend on the data."""
        if not hasattr(_STEPS, "open"):
            _STEPS.open = {}
        _STEPS.open[id(self)] = _Step(self.skip(1))
        try:
            yield self
        finally:
            del _STEPS.open[id(self)]

    @property
    def calls(self) -> int | None:
        """Draws so far in the current step (None outside one)."""
        return None if self._scope is None else self._scope.calls

    @contextlib.contextmanager
    def replaying(self, start: int, rows: tf.Tensor, group: tf.Tensor | None = None):
        """Within the block the draws repeat the step's draws numbered from `start`, each at rows
        `rows` (and slot draws at `group`), without advancing anything."""
        scope = self._scope
        if scope is None:
            raise RuntimeError("replaying: only within a step (`with generator.step():`)")
        saved = (scope.calls, scope.replay)
        scope.calls, scope.replay = start, (start, tf.cast(rows, tf.int64), group)
        try:
            yield self
        finally:
            scope.calls, scope.replay = saved

    def _draw(self) -> tuple[tf.Tensor, tf.Tensor]:
        """The (state, call word) that key the next draw: the step's state and the draw's number."""
        scope = self._scope
        if scope is None:
            state, call = self.skip(1), 0
        else:
            state, call = scope.state, scope.calls
            scope.calls += 1
        return state, tf.constant(call | _STEP_KEY << 32, tf.uint64)

    def _draw_key(self) -> tf.Tensor:
        """The Philox key (uint64) of the next draw: derived from (step state, call number)."""
        return _draw_key_fn(*self._draw())

    def _row_ids(self, n: tf.Tensor) -> tf.Tensor:
        """Slots of this draw's n rows: the replayed rows, else 0..n-1 after the rows of the
        replicas before this one."""
        scope = self._scope
        if scope is not None and scope.replay is not None:
            return scope.replay[1]
        return replica_offset(n) + tf.range(tf.cast(n, tf.int64))

    def _rows(self, kind: str, dtype: tf.DType, shape, a, b, groups_per_row=None) -> tf.Tensor:
        shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
        if shape.shape[0] == 0:
            return tf.reshape(self._rows(kind, dtype, tf.ones([1], tf.int64), a, b), [])
        n, trailing = shape[0], shape[1:]
        if groups_per_row is None:
            rows = self._row_ids(n)
            groups = tf.zeros_like(rows)
        else:
            rows, groups = groups_per_row(n)
        values = _row_draw(kind, dtype)(*self._draw(), rows, groups, tf.reduce_prod(trailing), a, b)
        return tf.reshape(values, tf.concat([tf.shape(rows, tf.int64)[:1], trailing], 0))

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=tf.float32, name=None, groups_per_row=None):
        dtype = tf.as_dtype(dtype)
        return self._rows("normal", dtype, shape, mean, stddev, groups_per_row)

    def uniform(self, shape, minval=0, maxval=None, dtype=tf.float32, name=None, groups_per_row=None):
        dtype = tf.as_dtype(dtype)
        if dtype.is_integer:
            if maxval is None:
                raise ValueError("maxval: needed for integer draws")
            span = tf.cast(maxval, tf.int64) - tf.cast(minval, tf.int64)
            return self._rows("uniform", dtype, shape, tf.cast(minval, tf.int64), span, groups_per_row)
        maxval = 1.0 if maxval is None else maxval
        return self._rows("uniform", dtype, shape, minval, maxval - minval, groups_per_row)

    def slots(self, parts) -> "_Slots":
        """A view whose draws of parts * m rows (partition-major) key row j * m + k by (group j, row k):
        partition j's k-th sample is the same whatever m and the other partitions are."""
        return _Slots(self, parts)

    def normal_once(self, shape, stddev=1.0, dtype=tf.float32) -> tf.Tensor:
        """N(0, stddev^2) of `shape`, the same numbers on every replica (and on one device).

        The Box-Muller transform of TensorFlow's normal kernel (`BoxMullerFloat`/`Double`: the
        same uniforms, the same floor of 1e-7 on the radius' uniform, so the same distribution),
        written as vectorized ops on one uniform draw of [2, ceil(n/2)]: the kernel computes
        log, sqrt, sin and cos one scalar at a time, which made it 2-3x slower than the
        uniform bits themselves (the DP noise is drawn for every parameter at every step).
        The uniforms come from TensorFlow's Philox kernel at this draw's key. Half-precision
        dtypes are computed in float32.
        """
        shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
        draw = _noise_draw(tf.as_dtype(dtype), self.algorithm)
        flat = draw(*self._draw(), tf.reduce_prod(shape), tf.cast(stddev, _work(tf.as_dtype(dtype))))
        return tf.reshape(flat, shape)


class _Slots:
    """`StreamGenerator.slots`: draws of parts * m rows keyed by (partition j, slot k)."""

    def __init__(self, generator: StreamGenerator, parts):
        self.generator, self.parts = generator, tf.cast(parts, tf.int64)

    def _keys(self, n):
        m = tf.maximum(tf.cast(n, tf.int64) // tf.maximum(self.parts, 1), 1)
        k = tf.range(tf.cast(n, tf.int64))
        rows, groups = k % m, k // m
        replay = self.generator._scope.replay if self.generator._scope is not None else None
        if replay is not None and replay[2] is not None:
            return rows, tf.fill(tf.shape(k), tf.cast(replay[2], tf.int64))
        # Under a strategy only singleton partitions run on several replicas: partition j of this
        # replica holds the example in slot offset + j.
        return rows, replica_offset(self.parts) + groups

    def normal(self, shape, *args, **kwargs):
        return self.generator.normal(shape, *args, groups_per_row=self._keys, **kwargs)

    def uniform(self, shape, *args, **kwargs):
        return self.generator.uniform(shape, *args, groups_per_row=self._keys, **kwargs)


def slots(generator, parts):
    """`generator.slots(parts)` for a `StreamGenerator`; any other generator as it is."""
    return generator.slots(parts) if isinstance(generator, StreamGenerator) else generator


def in_step(generator):
    """`generator.step()` for a `StreamGenerator`, else a no-op context."""
    return generator.step() if isinstance(generator, StreamGenerator) else contextlib.nullcontext()


def stream_generator(seed: int | None, stream: str) -> StreamGenerator:
    """A Philox generator for `stream`; independent of every other stream of the same seed."""
    if stream not in STREAMS:
        raise ValueError(f"stream: must be one of {', '.join(STREAMS)}, got {stream!r}")
    if seed is None:
        return StreamGenerator.from_non_deterministic_state(alg="philox")
    key = int(np.random.SeedSequence([int(seed), STREAMS[stream]]).generate_state(1, np.uint64)[0]) >> 1
    return StreamGenerator.from_key_counter(key=key, counter=[0, 0], alg="philox")


def release_generator(seed: int | None, name: str) -> np.random.Generator:
    """The host generator of the noise of release `name` (`PrivacyLedger.release`): a function of
    (seed, "release", name), independent of the other streams; from the OS when `seed` is None."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence([int(seed), STREAMS["release"], *name.encode()]))
