"""The mechanism's random streams: DP noise and partitions ("noise"), randomness inside a loss ("loss").

Seeded streams get independent Philox keys derived from (seed, stream) with numpy's
SeedSequence. `tf.random.Generator.from_seed(s)` is not used: it puts s in the counter, so
seeds s and s + 1 give the same stream shifted by one block, and two generators seeded with
the same value (formerly the DP noise and a GAN's latents) drew the same numbers.
Unseeded streams come from the OS. Generators are variables: the training runner saves
them in every checkpoint, so a resumed run continues each stream where it stopped.

Under a `tf.distribute` strategy the draws do not depend on how a batch is split across
replicas (`StreamGenerator`): a step draws the numbers one device would draw, and each replica
uses its rows of them.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

STREAMS = {"noise": 1, "loss": 2}


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


class StreamGenerator(tf.random.Generator):
    """A Philox generator whose numbers are the same whatever the number of replicas.

    The stock generator hashes the replica id into its key inside a strategy, so two replicas
    draw other numbers than one device would. Here `normal`/`uniform` treat the leading axis as
    rows: every replica draws the rows of ALL replicas (their counts all-gathered) from the
    shared, unhashed state and keeps its own block, so replica r's rows are the rows one device
    would draw for the same examples, and every replica's state advances alike.
    `normal_once` draws one tensor that is identical on every replica (the DP noise).
    """

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=tf.float32, name=None):
        def draw(full, key, counter):
            z = tf.raw_ops.StatelessRandomNormalV2(shape=full, key=key, counter=counter, alg=self.algorithm,
                                                   dtype=dtype)
            return z * tf.cast(stddev, dtype) + tf.cast(mean, dtype)
        return self._rows(shape, draw)

    def uniform(self, shape, minval=0, maxval=None, dtype=tf.float32, name=None):
        dtype = tf.as_dtype(dtype)
        if dtype.is_integer:
            if maxval is None:
                raise ValueError("maxval: needed for integer draws")

            def draw(full, key, counter):
                return tf.raw_ops.StatelessRandomUniformIntV2(
                    shape=full, key=key, counter=counter, alg=self.algorithm,
                    minval=tf.cast(minval, dtype), maxval=tf.cast(maxval, dtype))
        else:
            maxval = 1.0 if maxval is None else maxval

            def draw(full, key, counter):
                u = tf.raw_ops.StatelessRandomUniformV2(shape=full, key=key, counter=counter, alg=self.algorithm,
                                                        dtype=dtype)
                return u * (tf.cast(maxval, dtype) - tf.cast(minval, dtype)) + tf.cast(minval, dtype)
        return self._rows(shape, draw)

    def normal_once(self, shape, stddev=1.0, dtype=tf.float32) -> tf.Tensor:
        """N(0, stddev^2) of `shape`, the same numbers on every replica (and on one device).

        The Box-Muller transform of TensorFlow's normal kernel (`BoxMullerFloat`/`Double`: the
        same uniforms, the same floor of 1e-7 on the radius' uniform, so the same distribution),
        written as vectorized ops on one uniform draw of [2, ceil(n/2)]: the kernel computes
        log, sqrt, sin and cos one scalar at a time, which made it 2-3x slower than the
        uniform bits themselves (the DP noise is drawn for every parameter at every step).
        Half-precision dtypes are computed in float32.
        """
        shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
        n = tf.reduce_prod(shape)
        half = (n + 1) // 2
        work = dtype if dtype in (tf.float32, tf.float64) else tf.float32
        key, counter = self._key_counter(2 * half)
        u = tf.raw_ops.StatelessRandomUniformV2(shape=tf.stack([2, half]), key=key, counter=counter,
                                                alg=self.algorithm, dtype=work)
        z = tf.concat(box_muller(u[0], u[1], tf.cast(stddev, work)), 0)[:n]
        return tf.cast(tf.reshape(z, shape), dtype)

    def _key_counter(self, count):
        """(key, counter) for `count` numbers from the shared state, which advances by `count`
        (what the stock generator does, without hashing in the replica id)."""
        state = self.skip(count)
        return tf.bitcast(state[2:3], tf.uint64), tf.bitcast(state[:2], tf.uint64)

    def _rows(self, shape, draw):
        shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
        ctx = tf.distribute.get_replica_context()
        if ctx is None or ctx.num_replicas_in_sync == 1 or shape.shape[0] == 0:
            key, counter = self._key_counter(tf.reduce_prod(shape))
            return draw(shape, key, counter)
        counts = ctx.all_gather(shape[:1], axis=0)  # [R]: every replica's rows
        rid = ctx.replica_id_in_sync_group
        offset = tf.reduce_sum(counts[:rid])
        full = tf.concat([tf.reduce_sum(counts, keepdims=True), shape[1:]], axis=0)
        key, counter = self._key_counter(tf.reduce_prod(full))
        return draw(full, key, counter)[offset:offset + shape[0]]


def stream_generator(seed: int | None, stream: str) -> StreamGenerator:
    """A Philox generator for `stream`; independent of every other stream of the same seed."""
    if stream not in STREAMS:
        raise ValueError(f"stream: must be one of {', '.join(STREAMS)}, got {stream!r}")
    if seed is None:
        return StreamGenerator.from_non_deterministic_state(alg="philox")
    key = int(np.random.SeedSequence([int(seed), STREAMS[stream]]).generate_state(1, np.uint64)[0]) >> 1
    return StreamGenerator.from_key_counter(key=key, counter=[0, 0], alg="philox")
