import numpy as np
import pytest
import tensorflow as tf

from tfpriv.errors import UsageError
from tfpriv.filter import divergence as div


def test_kl_and_chi2_hand_case():
    # Σ = diag(4, 1), Δμ = (2, 1): m = 4/4 + 1 = 2 -> KL = 1, χ² = e² − 1
    precision = np.diag([0.25, 1.0]).astype(np.float32)
    delta = tf.constant([[2.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(div.per_example_divergence("kl", delta, precision), [1.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(div.per_example_divergence("chi2", delta, precision), [np.e ** 2 - 1, 0.0], rtol=1e-5)


def test_kl_matches_general_gaussian_kl_with_shared_covariance():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + np.eye(3)
    mu0, mu1 = rng.normal(size=3), rng.normal(size=3)
    # general KL(N(mu1, S) || N(mu0, S)) = ½[tr(S⁻¹S) − k + (mu0−mu1)ᵀS⁻¹(mu0−mu1) + ln 1]
    ref = 0.5 * ((mu0 - mu1) @ np.linalg.solve(cov, mu0 - mu1))
    got = div.per_example_divergence("kl", tf.constant([mu1 - mu0], tf.float32), np.linalg.inv(cov).astype(np.float32))
    np.testing.assert_allclose(got, [ref], rtol=1e-4)


def test_estimate_precision_is_inverse_sample_covariance():
    rng = np.random.default_rng(0)
    codes = rng.normal(size=(500, 3)) @ np.array([[2.0, 0, 0], [0.5, 1, 0], [0, 0, 0.3]])
    ref = np.linalg.inv(np.cov(codes, rowvar=False))
    np.testing.assert_allclose(div.estimate_precision(codes, ridge=0.0), ref, rtol=1e-4)
    with pytest.raises(UsageError, match="codes"):
        div.estimate_precision(np.zeros((1, 3)))


def test_penalty_zero_within_budget_and_quadratic_outside():
    rho = tf.constant(3.0)
    assert float(div.budget_penalty(tf.constant(0.7), 1.0, rho)) == 0.0
    assert float(div.budget_penalty(tf.constant(1.0), 1.0, rho)) == 0.0
    np.testing.assert_allclose(float(div.budget_penalty(tf.constant(1.5), 1.0, rho)), 3.0 * 0.25)


def test_rho_halves_every_500_epochs_down_to_2():
    got = [div.rho_at_epoch(e, 16.0) for e in (0, 499, 500, 1000, 1500, 2000, 5000)]
    assert got == [16.0, 16.0, 8.0, 4.0, 2.0, 2.0, 2.0]
    tensor = [float(div.rho_at_epoch(tf.constant(e), 16.0)) for e in (0, 500, 1000, 2000)]
    assert tensor == [16.0, 8.0, 4.0, 2.0]
    assert div.rho_at_epoch(10_000, 1.0) == 1.0  # never raised above its start


def test_unknown_divergence_is_a_usage_error():
    with pytest.raises(UsageError, match="--divergence"):
        div.per_example_divergence("tv", tf.zeros((1, 2)), np.eye(2, dtype=np.float32))
