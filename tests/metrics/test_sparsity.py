import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.metrics.sparsity import hoyer, hoyer_sparsity


def test_hoyer_known_values():
    assert hoyer(np.array([0.0, 0.0, 5.0, 0.0])) == pytest.approx(1.0)
    assert hoyer(np.array([-2.0, 2.0, 2.0, -2.0])) == pytest.approx(0.0)
    # d=4, y=(1,1,0,0): l1/l2 = 2/sqrt(2) = sqrt(2) -> (2 - sqrt 2)/(2 - 1)
    assert hoyer(np.array([1.0, 1.0, 0.0, 0.0])) == pytest.approx(2.0 - np.sqrt(2.0))


def test_hoyer_batched_and_zero_vector():
    y = np.array([[[0.0, 3.0, 0.0]], [[0.0, 0.0, 0.0]]])  # [2, 1, 3]
    out = hoyer(y)
    assert out.shape == (2, 1)
    np.testing.assert_allclose(out, [[1.0], [0.0]])  # all-zero vector is defined as 0


def test_hoyer_rejects_single_dimension():
    with pytest.raises(UsageError, match="^y: "):
        hoyer(np.ones((3, 1)))


def test_hoyer_sparsity_standardises_each_dimension():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 6))
    scaled = z * np.array([1.0, 100.0, 0.01, 3.0, 7.0, 0.5])
    # eq. 17: dividing by per-dimension std makes the metric blind to per-dimension scale
    assert hoyer_sparsity(scaled) == pytest.approx(hoyer_sparsity(z), rel=1e-12)
    # and equals the naive per-example computation on z / std
    zbar = z / z.std(axis=0)
    d = z.shape[1]
    naive = np.mean([(np.sqrt(d) - np.abs(r).sum() / np.sqrt((r ** 2).sum())) / (np.sqrt(d) - 1) for r in zbar])
    assert hoyer_sparsity(z) == pytest.approx(naive, rel=1e-12)


def test_hoyer_sparsity_orders_sparse_above_dense():
    rng = np.random.default_rng(1)
    dense = rng.normal(size=(500, 10))
    sparse = dense * (rng.random((500, 10)) < 0.1)
    sparse[np.arange(500), rng.integers(0, 10, 500)] += 3.0  # keep every row non-zero
    assert hoyer_sparsity(sparse) > hoyer_sparsity(dense) + 0.3


def test_hoyer_sparsity_constant_dimension_is_nan():
    z = np.random.default_rng(2).normal(size=(20, 3))
    z[:, 1] = 0.5
    assert np.isnan(hoyer_sparsity(z))
