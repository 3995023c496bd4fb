import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.filter import baseline, divergence as div


def test_kl_noise_scale_hand_case():
    # P = diag(1, 3): ½ σ² tr(P) = b  ->  σ² = 2·1/4
    sigma = baseline.gaussian_noise_scale(1.0, np.diag([1.0, 3.0]), "kl")
    np.testing.assert_allclose(sigma ** 2, 0.5)
    assert baseline.gaussian_noise_scale(0.0, np.eye(2), "kl") == 0.0


@pytest.mark.parametrize("name,budget", [("kl", 0.3), ("chi2", 0.3), ("chi2", 2.0)])
def test_mechanism_meets_budget_in_expectation(name, budget):
    precision = np.diag([0.5, 2.0, 1.0]).astype(np.float32)
    sigma = baseline.gaussian_noise_scale(budget, precision, name)
    z = np.zeros((200_000, 3), np.float32)
    noisy = baseline.gaussian_mechanism(z, sigma, np.random.default_rng(0))
    np.testing.assert_allclose(div.mean_divergence(name, noisy - z, precision), budget, rtol=0.05)


def test_chi2_closed_form_mgf():
    # one dimension, λ = 1: (1 − 2σ²)^(−½) − 1 = b  ->  σ² = (1 − (1+b)^−2)/2
    b = 0.5
    sigma = baseline.gaussian_noise_scale(b, np.eye(1), "chi2")
    np.testing.assert_allclose(sigma ** 2, (1 - (1 + b) ** -2) / 2, rtol=1e-9)


def test_negative_budget_rejected():
    with pytest.raises(UsageError, match=r"^--budget: must be >= 0, got -1"):
        baseline.gaussian_noise_scale(-1, np.eye(2))


@pytest.mark.parametrize("name,budget", [("kl", 0.5), ("chi2", 0.5)])
def test_covariance_shaped_mechanism_meets_budget(name, budget):
    a = np.array([[2.0, 0.0], [1.0, 0.1]])
    cov = a @ a.T
    precision = np.linalg.inv(cov).astype(np.float32)
    scale = baseline.covariance_shaped_scale(budget, 2, name)
    z = np.zeros((200_000, 2), np.float32)
    noisy = baseline.covariance_mechanism(z, scale, precision, np.random.default_rng(0))
    np.testing.assert_allclose(div.mean_divergence(name, noisy - z, precision), budget, rtol=0.05)
    np.testing.assert_allclose(np.cov(noisy, rowvar=False), scale ** 2 * cov, rtol=0.05, atol=1e-3)
