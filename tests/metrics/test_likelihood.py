import math

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.errors import UsageError
from tfpriv.metrics.likelihood import importance_sampled_log_likelihood, log_likelihood_record

# Linear-Gaussian model per dimension: z ~ N(0, 1), x | z ~ N(z, 1)  =>  x ~ N(0, 2),
# exact posterior z | x ~ N(x / 2, 1 / 2).
D = 3


def log_normal(v, mean, var):
    return tf.reduce_sum(-0.5 * (math.log(2 * math.pi) + tf.math.log(var) + (v - mean) ** 2 / var), axis=-1)


def log_px_given_z(x, z):
    return log_normal(x, z, tf.constant(1.0, x.dtype))


def log_prior(z):
    return log_normal(z, tf.zeros_like(z), tf.constant(1.0, z.dtype))


def exact_posterior(x):
    return x / 2.0, tf.fill(tf.shape(x), tf.constant(math.log(0.5), x.dtype))


def true_log_px(x):
    return np.sum(-0.5 * (np.log(2 * np.pi * 2.0) + x ** 2 / 2.0), axis=-1)


@pytest.fixture
def x():
    return np.random.default_rng(0).normal(0.0, math.sqrt(2.0), size=(23, D))


@pytest.mark.parametrize("k", [1, 5])
def test_exact_posterior_gives_exact_log_likelihood_for_any_k(x, k):
    got = importance_sampled_log_likelihood(x, exact_posterior, log_px_given_z, log_prior,
                                            num_samples=k, batch_size=10, sample_chunk=2)
    assert got.shape == (23,)
    np.testing.assert_allclose(got, true_log_px(x), rtol=0, atol=1e-10)


def test_poor_proposal_is_a_lower_bound_that_tightens_with_k():
    def broad_q(xb):  # right mean, variance 1 instead of 1/2
        return xb / 2.0, tf.zeros_like(xb)
    x = np.random.default_rng(1).normal(0.0, math.sqrt(2.0), size=(400, D))
    truth = true_log_px(x).mean()
    k1 = importance_sampled_log_likelihood(x, broad_q, log_px_given_z, log_prior, num_samples=1, seed=1).mean()
    k500 = importance_sampled_log_likelihood(x, broad_q, log_px_given_z, log_prior, num_samples=500, seed=1).mean()
    # K=1 is the ELBO: truth - KL(q || posterior) = truth - D * 0.5 * (2 - 1 - log 2);
    # its sampling std over 400 examples is sqrt(D * 0.5 / 400) ~ 0.06
    assert k1 == pytest.approx(truth - D * 0.5 * (1 - math.log(2.0)), abs=0.25)
    # K=500: bias ~ -Var(w)/(2K) ~ -5e-4, sampling std of the mean ~ 2e-3
    assert k1 < k500 - 0.3
    assert k500 == pytest.approx(truth, abs=0.01)


def test_chunking_does_not_change_the_estimate(x):
    def broad_q(xb):
        return xb / 2.0, tf.zeros_like(xb)
    a = importance_sampled_log_likelihood(x, broad_q, log_px_given_z, log_prior, num_samples=12,
                                          batch_size=100, sample_chunk=12)
    b = importance_sampled_log_likelihood(x, broad_q, log_px_given_z, log_prior, num_samples=12,
                                          batch_size=100, sample_chunk=5)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_float32_model_and_record(x):
    x32 = x.astype(np.float32)
    got = importance_sampled_log_likelihood(x32, exact_posterior, log_px_given_z, log_prior, num_samples=4)
    np.testing.assert_allclose(got, true_log_px(x), atol=1e-4)
    record = log_likelihood_record(got, 4)
    assert record["test_log_likelihood_num_importance_samples"] == 4
    assert record["test_log_likelihood"] == pytest.approx(true_log_px(x).mean(), abs=1e-4)


def test_wrong_output_shape_is_reported():
    with pytest.raises(UsageError, match="^log_prior: must return shape"):
        importance_sampled_log_likelihood(np.zeros((4, D)), exact_posterior, log_px_given_z,
                                          lambda z: tf.zeros((1,)), num_samples=2)
