"""`tfpriv.privacy.terms.BatchLayout`: the one-partition layout is the general layout of all-zero ids;
sums by partition equal the naive per-partition sums."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.privacy.terms import BatchLayout

FIELDS = ("partition_ids", "num_partitions", "batch_size", "counts", "max_size", "index", "mask", "order", "sorted_ids")


@pytest.mark.parametrize("n", [0, 1, 5])
def test_single_is_the_general_layout_of_one_partition(n):
    general, single = BatchLayout(tf.zeros([n], tf.int32), 1), BatchLayout.single(n)
    for name in FIELDS:
        a, b = getattr(general, name), getattr(single, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    rows = tf.reshape(tf.range(n * 2, dtype=tf.float32), [n, 2])
    np.testing.assert_array_equal(general.gather(rows).numpy(), single.gather(rows).numpy())


def test_single_in_a_traced_function_with_an_unknown_batch_size():
    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def layouts(x):
        n = tf.shape(x)[0]
        general, single = BatchLayout(tf.zeros([n], tf.int32), 1), BatchLayout.single(n)
        return [getattr(general, f) for f in FIELDS], [getattr(single, f) for f in FIELDS]

    general, single = layouts(tf.ones([4, 3]))
    for name, a, b in zip(FIELDS, general, single):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


@pytest.mark.parametrize("ids", [[2, 0, 2, 1, 0], [0, 0, 1], [], [3, 3]], ids=["all", "top-empty", "empty", "one"])
def test_sum_by_partition_is_the_naive_sum_and_keeps_nan_in_its_partition(ids):
    """Partitions above the largest id present are empty (zeros); a NaN row spoils only its own partition."""
    num_partitions = 4
    rows = np.random.default_rng(0).normal(size=[len(ids), 2, 3]).astype(np.float32)
    if len(ids) > 1:
        rows[1, 0, 0] = np.nan
    layout = BatchLayout(tf.constant(ids, tf.int32), num_partitions)
    want = np.zeros([num_partitions, 2, 3], np.float32)
    for i, p in enumerate(ids):
        want[p] += rows[i]
    np.testing.assert_allclose(layout.sum_by_partition(rows).numpy(), want, rtol=1e-6)
    if len(ids) > 1:
        assert np.isnan(want[ids[1]]).any() and all(np.isfinite(want[p]).all() for p in set(range(4)) - {ids[1]})
