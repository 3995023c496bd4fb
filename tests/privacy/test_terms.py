"""`tfpriv.privacy.terms.BatchLayout`: the one-partition layout is the general layout of all-zero ids."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.privacy.terms import BatchLayout

FIELDS = ("partition_ids", "num_partitions", "batch_size", "counts", "max_size", "index", "mask")


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
