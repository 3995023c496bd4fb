import numpy as np
import pytest
import tensorflow as tf

from tfpriv.errors import UsageError
from tfpriv.metrics.kernels import DEFAULT_SCALES, cauchy_kernel_matrix, cauchy_mmd, mmd_metric


def naive_mmd(x, y, unbiased=True, scales=DEFAULT_SCALES):
    """Double loop over pairs, straight from the formulas in the module docstring."""
    def k(a, b):
        return sum(s / (s + (a[d] - b[d]) ** 2) for s in scales for d in range(len(a)))
    n, m = len(x), len(y)
    sxx = sum(k(x[i], x[j]) for i in range(n) for j in range(n) if i != j or not unbiased)
    syy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j or not unbiased)
    sxy = sum(k(x[i], y[j]) for i in range(n) for j in range(m))
    if unbiased:
        return sxx / (n * (n - 1)) + syy / (m * (m - 1)) - 2 * sxy / (n * m)
    return sxx / n ** 2 + syy / m ** 2 - 2 * sxy / (n * m)


@pytest.mark.parametrize("estimator", ["unbiased", "biased"])
def test_matches_naive_double_loop(estimator):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 3)), rng.normal(0.5, 1.5, size=(5, 3))
    want = naive_mmd(x, y, unbiased=estimator == "unbiased")
    got = cauchy_mmd(tf.constant(x), tf.constant(y), estimator=estimator)
    assert got.dtype == tf.float64
    assert float(got) == pytest.approx(want, rel=1e-10)
    assert mmd_metric(x, y, estimator=estimator, chunk_size=3) == pytest.approx(want, rel=1e-10)


def test_kernel_matrix_values():
    x = tf.constant([[0.0, 0.0]])
    y = tf.constant([[1.0, 0.0]])
    # d=0 differs by 1: sum_s s/(s+1); d=1 equal: one per scale
    want = sum(s / (s + 1.0) for s in DEFAULT_SCALES) + len(DEFAULT_SCALES)
    assert float(cauchy_kernel_matrix(x, y)[0, 0]) == pytest.approx(want, rel=1e-6)


def test_self_mmd_biased_is_zero_unbiased_is_small_negative():
    x = np.random.default_rng(1).normal(size=(64, 4))
    assert float(cauchy_mmd(x, x, estimator="biased")) == pytest.approx(0.0, abs=1e-12)
    # U-statistic with X vs X: 2 (mean_offdiag - mean_all) = -2 (k_max - mean_offdiag) / n
    u = float(cauchy_mmd(x, x))
    k = cauchy_kernel_matrix(x, x).numpy()
    mean_off = (k.sum() - np.trace(k)) / (64 * 63)
    assert u == pytest.approx(-2 * (4 * len(DEFAULT_SCALES) - mean_off) / 64, rel=1e-10)


def test_unbiased_near_zero_for_same_distribution_and_grows_with_shift():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(300, 5)), rng.normal(size=(300, 5))
    same = float(cauchy_mmd(x, y))
    values = [float(cauchy_mmd(x, y + shift)) for shift in (0.25, 0.5, 1.0, 2.0)]
    assert abs(same) < 0.05
    assert values[0] > 0.1
    assert all(a < b for a, b in zip(values, values[1:]))


def test_masking_equals_slicing_per_group():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 6, 2))
    y = rng.normal(1.0, 1.0, size=(3, 5, 2))
    x_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    y_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 1], [0, 1, 1, 1, 0]])
    x_garbage = x.copy()
    x_garbage[x_mask == 0] = np.nan  # padding contents must not matter
    for estimator in ("unbiased", "biased"):
        got = cauchy_mmd(x_garbage, y, x_mask, y_mask, estimator=estimator).numpy()
        want = [float(cauchy_mmd(x[g][x_mask[g] == 1], y[g][y_mask[g] == 1], estimator=estimator))
                for g in range(3)]
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_shared_prior_sample_broadcasts_over_groups():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    y = rng.normal(size=(7, 3)).astype(np.float32)
    got = cauchy_mmd(x, y).numpy()
    np.testing.assert_allclose(got, [float(cauchy_mmd(x[g], y)) for g in range(4)], rtol=1e-5)


def test_masked_rows_and_empty_groups_get_zero_gradient():
    rng = np.random.default_rng(5)
    x = tf.Variable(rng.normal(size=(3, 4, 2)).astype(np.float32))
    y = tf.constant(rng.normal(size=(3, 4, 2)).astype(np.float32))
    x_mask = tf.constant([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    with tf.GradientTape() as tape:
        value = cauchy_mmd(x, y, x_mask=x_mask)
        total = tf.reduce_sum(value)
    grad = tape.gradient(total, x).numpy()
    assert np.all(np.isfinite(value.numpy())) and np.all(np.isfinite(grad))
    assert float(value[1]) == 0.0  # all-masked group
    np.testing.assert_array_equal(grad[1], 0.0)
    np.testing.assert_array_equal(grad[0, 2:], 0.0)
    np.testing.assert_array_equal(grad[2, 1:], 0.0)
    assert np.abs(grad[0, :2]).sum() > 0 and np.abs(grad[2, 0]).sum() > 0


def test_gradient_matches_finite_difference():
    rng = np.random.default_rng(6)
    x0 = rng.normal(size=(5, 2))
    y = tf.constant(rng.normal(size=(4, 2)))
    x = tf.Variable(x0)
    with tf.GradientTape() as tape:
        value = cauchy_mmd(x, y)
    grad = tape.gradient(value, x).numpy()
    eps = 1e-6
    bump = np.zeros_like(x0)
    bump[2, 1] = eps
    fd = (float(cauchy_mmd(x0 + bump, y)) - float(cauchy_mmd(x0 - bump, y))) / (2 * eps)
    assert grad[2, 1] == pytest.approx(fd, rel=1e-6)


def test_bad_arguments_raise_one_line_usage_errors():
    with pytest.raises(UsageError, match="^estimator: "):
        cauchy_mmd(np.zeros((2, 2)), np.zeros((2, 2)), estimator="v")
    with pytest.raises(UsageError, match="^y: last dimension"):
        cauchy_mmd(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(UsageError, match="^scales: "):
        cauchy_mmd(np.zeros((2, 2)), np.zeros((2, 2)), scales=(1.0, -1.0))
    with pytest.raises(UsageError, match="^prior_samples: "):
        mmd_metric(np.zeros((3, 2)), np.zeros((3, 4)))
