"""Priors: densities integrate/match closed forms, samples follow them."""
import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tfpriv.errors import ConfigError
from tfpriv.privae.priors import GaussianMixture, SparseMixture, StandardNormal, make_prior, prior_from_config


def test_standard_normal_log_prob():
    z = np.array([[0.0, 1.0], [2.0, -1.0]], np.float32)
    expected = stats.norm.logpdf(z).sum(1)
    np.testing.assert_allclose(StandardNormal(2).log_prob(z).numpy(), expected, rtol=1e-6)


def test_sparse_mixture_matches_scipy_and_its_samples():
    p = SparseMixture(3, gamma=0.8, sigma0_sq=0.05)
    z = np.array([[0.0, 0.1, -2.0]], np.float32)
    per_dim = np.log(0.2 * stats.norm.pdf(z) + 0.8 * stats.norm.pdf(z, scale=math.sqrt(0.05)))
    np.testing.assert_allclose(p.log_prob(z).numpy(), per_dim.sum(1), rtol=1e-5)
    s = p.sample(20000, seed=1).numpy()
    # variance of the mixture: 0.2 * 1 + 0.8 * 0.05 = 0.24
    assert np.var(s) == pytest.approx(0.24, rel=0.05)


def test_sparse_mixture_spike_std_reading():
    """sigma0_sq is the spike's variance: Mathieu et al.'s spike sd 0.05 is sigma0_sq = 0.0025."""
    p = SparseMixture(2, gamma=0.8, sigma0_sq=0.05 ** 2)
    assert p.spike_std == pytest.approx(0.05)
    assert SparseMixture(2, sigma0_sq=0.05).spike_std == pytest.approx(math.sqrt(0.05))
    z = np.array([[0.0, 0.07]], np.float32)
    per_dim = np.log(0.2 * stats.norm.pdf(z) + 0.8 * stats.norm.pdf(z, scale=0.05))
    np.testing.assert_allclose(p.log_prob(z).numpy(), per_dim.sum(1), rtol=1e-5)
    s = p.sample(20000, seed=3).numpy().ravel()
    # variance 0.2 * 1 + 0.8 * 0.0025 = 0.202 (0.24 under the variance-0.05 reading); 80% of draws
    # come from the spike, so about 0.8 * P(|N(0, 0.05^2)| < 0.1) + 0.2 * P(|N(0,1)| < 0.1) = 0.78 are within 0.1
    assert np.var(s) == pytest.approx(0.202, rel=0.05)
    assert np.mean(np.abs(s) < 0.1) == pytest.approx(0.8 * 0.9545 + 0.2 * 0.0797, abs=0.015)
    assert p.config()["sigma0_sq"] == pytest.approx(0.0025)


def test_gaussian_mixture_density_and_samples():
    p = GaussianMixture(2, sigma=0.03)
    z = np.array([[0.0, 1.0], [0.5, 0.5]], np.float32)
    dens = sum(0.25 * stats.multivariate_normal(m, 0.03 ** 2 * np.eye(2)).pdf(z) for m in p.means)
    np.testing.assert_allclose(p.log_prob(z).numpy()[0], np.log(dens[0]), rtol=1e-5)
    s = p.sample(4000, seed=2).numpy()
    nearest = np.argmin(((s[:, None] - p.means[None]) ** 2).sum(-1), 1)
    assert np.all(np.bincount(nearest, minlength=4) > 850)        # ~1000 per component
    assert np.max(np.abs(s - p.means[nearest])) < 0.2


def test_sampling_inside_a_graph_is_fresh_each_call():
    p = GaussianMixture(2)

    @tf.function
    def draw():
        return p.sample(8)

    assert not np.allclose(draw().numpy(), draw().numpy())


def test_config_round_trip_and_errors():
    p = SparseMixture(4, gamma=0.5, sigma0_sq=0.1)
    q = prior_from_config(p.config())
    np.testing.assert_allclose(q.log_prob(np.ones([1, 4], np.float32)), p.log_prob(np.ones([1, 4], np.float32)))
    with pytest.raises(ConfigError, match="^prior: "):
        make_prior("laplace", 2)
    with pytest.raises(ConfigError, match="^latent_dim: "):
        make_prior("mixture", 3)
