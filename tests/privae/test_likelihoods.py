"""Observation log-densities against scipy, normalisers included."""
import numpy as np
import pytest
from scipy import integrate, stats

from tfpriv.errors import ConfigError
from tfpriv.privae.likelihoods import (LIKELIHOODS, bernoulli_log_prob, gaussian_log_prob, get_likelihood,
                                       laplace_log_prob, mean_of)

X = np.array([[0.0, 0.2, 0.5, 1.0, 1.7]], np.float32)
LOC = np.array([[0.1, 0.2, 0.9, -0.3, 1.0]], np.float32)


@pytest.mark.parametrize("scale", [0.05, 0.1, 1.0, 3.0])
def test_laplace_matches_scipy(scale):
    np.testing.assert_allclose(laplace_log_prob(X, LOC, scale).numpy(),
                               stats.laplace.logpdf(X, loc=LOC, scale=scale), rtol=1e-5)


@pytest.mark.parametrize("scale", [0.1, 1.0])
def test_gaussian_matches_scipy(scale):
    np.testing.assert_allclose(gaussian_log_prob(X, LOC, scale).numpy(),
                               stats.norm.logpdf(X, loc=LOC, scale=scale), rtol=1e-5)


def test_bernoulli_is_the_cross_entropy_and_broadcasts_x():
    x = np.array([[0.0, 1.0, 0.3]], np.float32)
    logits = np.array([[[-1.0, 2.0, 0.5]], [[0.0, -3.0, 1.0]]], np.float32)   # two decoder draws of one x
    p = 1 / (1 + np.exp(-logits))
    expected = x * np.log(p) + (1 - x) * np.log(1 - p)
    got = bernoulli_log_prob(x, logits).numpy()
    assert got.shape == (2, 1, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(got[:, :, :2], stats.bernoulli.logpmf(x[:, :2], p[:, :, :2]), rtol=1e-5)


def test_laplace_density_integrates_to_one():
    grid = np.linspace(-3, 3, 600001, dtype=np.float64)
    dens = np.exp(laplace_log_prob(grid.astype(np.float32), np.float32(0.4), 0.1).numpy())
    assert integrate.trapezoid(dens, grid) == pytest.approx(1.0, abs=1e-4)


def test_registry_and_means():
    assert set(LIKELIHOODS) == {"bernoulli", "gaussian", "laplace"}
    assert get_likelihood("laplace") is laplace_log_prob
    with pytest.raises(ConfigError, match="^likelihood: .*'poisson'"):
        get_likelihood("poisson")
    np.testing.assert_allclose(mean_of("bernoulli", np.float32([0.0])).numpy(), [0.5])
    np.testing.assert_allclose(mean_of("laplace", LOC).numpy(), LOC)
