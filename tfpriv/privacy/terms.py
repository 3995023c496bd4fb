"""Loss terms as the DP engine sees them, and the partition layout of a batch.

A model declares its loss as named terms. A *sample-wise* term has one value per example
(phi(x_i) in the term-wise paper); a *batch-wise* term has one value per partition
(psi(s_j)). The engine, not the model, builds the partitions: a batch-wise term receives
its partition's rows through `BatchLayout.gather`, so it cannot see other partitions.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class TermSpec:
    """Names of a model's loss terms, known before training (the accountant needs them).

    Example:
        A VAE with a per-example ELBO and a batch-wise MMD term (sensitivity by `DPConfig`):

        >>> from tfpriv.privacy import TermSpec
        >>> TermSpec(sample=("nll", "kld"), batch=("mmd",)).has_batch_terms
        True
    """

    sample: tuple[str, ...]
    batch: tuple[str, ...] = ()

    @property
    def has_batch_terms(self) -> bool:
        return bool(self.batch)


@dataclasses.dataclass
class LossTerms:
    """Values of the loss terms on one batch.

    sample: name -> [B] per-example values (already weighted, e.g. beta * kld).
    batch: name -> [P] per-partition values (already weighted, e.g. alpha * mmd).

    Example:
        >>> import tensorflow as tf
        >>> from tfpriv.privacy import LossTerms
        >>> terms = LossTerms(sample={"nll": tf.constant([1.0, 2.0]), "kld": tf.constant([0.5, 0.5])})
        >>> terms.sample_total().numpy().tolist(), terms.batch_total(1).numpy().tolist()
        ([1.5, 2.5], [0.0])
    """

    sample: Mapping[str, tf.Tensor]
    batch: Mapping[str, tf.Tensor] = dataclasses.field(default_factory=dict)

    def sample_total(self) -> tf.Tensor:
        """phi_i summed over sample-wise terms: [B]."""
        return tf.add_n(list(self.sample.values()))

    def batch_total(self, num_partitions: tf.Tensor) -> tf.Tensor:
        """psi_j summed over batch-wise terms: [P] (zeros, in the sample-wise terms' dtype, when there are none)."""
        if not self.batch:
            return tf.zeros([num_partitions], next(iter(self.sample.values())).dtype if self.sample else tf.float32)
        return tf.add_n(list(self.batch.values()))


class BatchLayout:
    """Random disjoint partitions s_1..s_P of a batch of B examples.

    Each example's partition is drawn independently and uniformly, so adding or removing
    one example changes exactly one partition (the property the sensitivity analysis
    needs; assignment by position after a shuffle would move many examples).
    `num_partitions=0` puts every example in a partition of its own.

    Example:
        >>> import tensorflow as tf
        >>> from tfpriv.privacy import BatchLayout
        >>> layout = BatchLayout(tf.constant([0, 1, 0]), 2)   # examples 0 and 2 in partition 0
        >>> layout.counts.numpy().tolist(), layout.gather(tf.constant([10, 20, 30])).numpy().tolist()
        ([2, 1], [[10, 30], [20, 0]])
    """

    def __init__(self, partition_ids: tf.Tensor, num_partitions: tf.Tensor):
        self.partition_ids = tf.cast(partition_ids, tf.int32)
        self.num_partitions = tf.cast(num_partitions, tf.int32)
        self.batch_size = tf.shape(self.partition_ids)[0]
        counts = tf.math.bincount(self.partition_ids, minlength=self.num_partitions,
                                  maxlength=self.num_partitions, dtype=tf.int32)
        self.counts = counts
        self.max_size = tf.reduce_max(tf.concat([counts, [0]], axis=0))
        self.order = order = tf.argsort(self.partition_ids, stable=True)
        self.sorted_ids = sorted_ids = tf.gather(self.partition_ids, order)
        starts = tf.cumsum(counts, exclusive=True)
        slot = tf.range(self.batch_size) - tf.gather(starts, sorted_ids)
        coords = tf.stack([sorted_ids, slot], axis=1)
        shape = tf.stack([self.num_partitions, self.max_size])
        # index[p, m] is the batch row of the m-th member of partition p (0 where padded).
        self.index = tf.scatter_nd(coords, order, shape)
        self.mask = tf.scatter_nd(coords, tf.ones_like(order, tf.float32), shape)

    @classmethod
    def random(cls, batch_size: tf.Tensor, num_partitions: int, generator: tf.random.Generator) -> "BatchLayout":
        if num_partitions == 0:
            return cls(tf.range(batch_size), batch_size)
        ids = generator.uniform([batch_size], minval=0, maxval=num_partitions, dtype=tf.int32)
        return cls(ids, num_partitions)

    @classmethod
    def single(cls, batch_size: tf.Tensor) -> "BatchLayout":
        """The whole batch as one partition (micro/batch modes, evaluation): what `BatchLayout(zeros, 1)`
        computes, written out directly (a few graph ops instead of a sort, a bincount and two scatters)."""
        layout = cls.__new__(cls)
        n = tf.cast(batch_size, tf.int32)
        layout.partition_ids = tf.zeros([n], tf.int32)
        layout.num_partitions = tf.constant(1, tf.int32)
        layout.batch_size = n
        layout.counts = tf.reshape(n, [1])
        layout.max_size = n
        layout.index = tf.range(n)[None, :]
        layout.mask = tf.ones([1, n], tf.float32)
        layout.order, layout.sorted_ids = tf.range(n), layout.partition_ids
        return layout

    def sum_by_partition(self, rows: tf.Tensor) -> tf.Tensor:
        """[B, ...] -> [P, ...], each partition's rows summed; a row's NaN/inf reaches its own partition
        only. A sorted segment sum: on CPU about twice as fast as an unsorted one, and unlike `gather`
        it makes no padded [P, largest partition, ...] copy."""
        rows = tf.convert_to_tensor(rows)
        summed = tf.math.segment_sum(tf.gather(rows, self.order), self.sorted_ids)
        # segment_sum stops at the largest id present: the partitions above it are empty.
        empty = tf.zeros(tf.concat([[self.num_partitions - tf.shape(summed)[0]], tf.shape(summed)[1:]], 0), summed.dtype)
        return tf.concat([summed, empty], 0)

    def gather(self, rows: tf.Tensor) -> tf.Tensor:
        """[B, ...] -> [P, M, ...], padded rows zeroed (use `mask` to ignore them).

        Padded slots repeat row 0; they are selected away (not multiplied by 0), so a NaN/inf
        in row 0 stays in row 0's partition.
        """
        rows = tf.convert_to_tensor(rows)
        grouped = tf.gather(rows, self.index)
        if rows.shape.rank is not None:  # the usual case: a static shape, no shape ops in the graph
            mask = tf.reshape(self.mask, [self.num_partitions, -1] + [1] * (rows.shape.rank - 1))
        else:
            mask = tf.reshape(self.mask, tf.concat([tf.shape(self.mask), tf.ones([tf.rank(rows) - 1], tf.int32)], 0))
        return tf.where(mask > 0, grouped, tf.zeros_like(grouped))
