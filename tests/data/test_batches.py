"""Non-private batches of arrays (tfpriv/data/batches.py): what Keras' `fit(x, y, shuffle=True)` takes,
in a pipeline with tfpriv's options."""
import numpy as np
import pytest

from tfpriv.data.batches import shuffled_batches

X = np.arange(23, dtype=np.float32)[:, None] * np.ones([1, 3], np.float32)
Y = np.arange(23, dtype=np.int32)


def epochs(ds, n: int) -> list:
    """n iterations of `ds` (what n epochs of a `fit` read), each a list of (x, y) batches."""
    return [[(bx.numpy(), by.numpy()) for bx, by in ds] for _ in range(n)]


def test_every_iteration_is_a_new_permutation_in_batches_with_the_rows_kept_together():
    ds = shuffled_batches(X, Y, 5, seed=3)
    orders = []
    for epoch in epochs(ds, 3):
        assert [len(by) for _, by in epoch] == [5, 5, 5, 5, 3]   # the last batch smaller, as Keras' own
        for bx, by in epoch:
            np.testing.assert_array_equal(bx[:, 0], by.astype(np.float32))  # x and y rows stay paired
        order = np.concatenate([by for _, by in epoch])
        assert sorted(order) == list(range(23))                  # each row once an epoch
        orders.append(tuple(order))
    assert len(set(orders)) == 3                                 # reshuffled at every iteration
    again = [tuple(np.concatenate([by for _, by in e])) for e in epochs(shuffled_batches(X, Y, 5, seed=3), 3)]
    assert again == orders                                       # a function of the seed
    other = [tuple(np.concatenate([by for _, by in e])) for e in epochs(shuffled_batches(X, Y, 5, seed=4), 1)]
    assert other[0] != orders[0]


def test_the_pipeline_has_tfprivs_options_and_rows_are_checked():
    options = shuffled_batches(X, Y, 5, seed=0).options()
    assert options.autotune.enabled is False
    assert options.experimental_optimization.apply_default_optimizations is False
    with pytest.raises(ValueError, match="^x, y: must have as many rows, got 23 and 22"):
        shuffled_batches(X, Y[:-1], 5, seed=0)
