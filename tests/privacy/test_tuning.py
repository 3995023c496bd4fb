"""Tuning with a random number of trials (Papernot & Steinke 2022): dp_accounting's
RepeatAndSelectDpEvent against the paper's closed forms, the trial-count samplers, naive composition."""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.stats import norm

from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DEFAULT_ORDERS, epsilon_for, training_event
from tfpriv.privacy.tuning import TrialCount, capped_job_epsilon, job_epsilon, largest_mean, naive_epsilon, smallest_cap

SIGMA, DELTA = 3.0, 1e-6
ORDERS = np.array(DEFAULT_ORDERS)


def gaussian_rdp(orders):
    return orders / (2 * SIGMA ** 2)        # Gaussian mechanism, sensitivity 1 (Mironov 2017)


def expected_trials(eta: float, gamma: float) -> float:
    """E[K] of the truncated negative binomial D_{eta,gamma} (paper, Section 3)."""
    if eta == 0:
        return (1 / gamma - 1) / math.log(1 / gamma)
    return eta * (1 - gamma) / (gamma * (1 - gamma ** eta))


@pytest.mark.parametrize("count", [TrialCount("geometric", 10), TrialCount("logarithmic", 10),
                                   TrialCount("negative_binomial", 10, shape=0.5),
                                   TrialCount("negative_binomial", 5, shape=2.0)], ids=lambda c: c.distribution + str(c.shape))
def test_theorem_2_closed_form(count):
    eta, gamma = count.dp_shape, count.gamma
    assert expected_trials(eta, gamma) == pytest.approx(count.mean, rel=1e-6)
    eps = gaussian_rdp(ORDERS)
    # Theorem 2, minimised over lambda_hat in the same orders; then RDP's monotonicity in lambda.
    const = (1 + eta) * np.min((1 - 1 / ORDERS) * eps + math.log(1 / gamma) / ORDERS)
    rdp = eps + const + math.log(count.mean) / (ORDERS - 1)
    rdp = np.array([rdp[ORDERS >= o].min() for o in ORDERS])
    expected, _ = compute_epsilon(ORDERS, rdp, DELTA)
    assert job_epsilon(dp_accounting.GaussianDpEvent(SIGMA), count, DELTA) == pytest.approx(expected, rel=1e-9)


def test_theorem_6_poisson_with_the_exact_gaussian_delta():
    """The bound holds for any (eps_hat, delta_hat) a trial satisfies; the exact Gaussian delta_hat
    gives a tighter valid bound than the accountant's RDP-derived delta_hat (never looser)."""
    mu = 10.0
    eps = gaussian_rdp(ORDERS)
    eps_hat = np.log1p(1 / (ORDERS - 1))
    a = 1 / (2 * SIGMA)
    delta_hat = norm.cdf(a - eps_hat * SIGMA) - np.exp(eps_hat) * norm.cdf(-a - eps_hat * SIGMA)
    exact, _ = compute_epsilon(ORDERS, eps + mu * delta_hat + math.log(mu) / (ORDERS - 1), DELTA)
    got = job_epsilon(dp_accounting.GaussianDpEvent(SIGMA), TrialCount("poisson", mu), DELTA)
    assert exact <= got <= 1.3 * exact   # measured: 3.38 vs 2.76


def test_a_random_number_of_dp_sgd_trials_costs_less_than_composing_them():
    trial = training_event([(0.01, 1.1, 1000)])
    single = epsilon_for([(0.01, 1.1, 1000)], DELTA)
    for count in (TrialCount("poisson", 20), TrialCount("geometric", 20), TrialCount("logarithmic", 20)):
        job = job_epsilon(trial, count, DELTA)
        assert single < job < naive_epsilon(trial, 20, DELTA)
    assert naive_epsilon(trial, 1, DELTA) == pytest.approx(single)


@pytest.mark.parametrize("count", [TrialCount("poisson", 6), TrialCount("geometric", 6),
                                   TrialCount("logarithmic", 6), TrialCount("negative_binomial", 6, shape=0.5)],
                         ids=lambda c: c.distribution)
def test_samplers_draw_the_stated_mean_and_tail(count):
    rng = np.random.default_rng(0)
    draws = np.array([count.sample(rng) for _ in range(20000)])
    assert draws.mean() == pytest.approx(count.mean, rel=0.05)
    assert draws.min() == (0 if count.distribution == "poisson" else 1)
    for cap in (1, 6, 15):  # P(K > cap), which a cap on the trials is paid with
        assert count.tail(cap) == pytest.approx(np.mean(draws > cap), abs=0.011)  # 3 standard errors


def test_bad_distributions_are_refused():
    with pytest.raises(ConfigError, match="distribution"):
        TrialCount("uniform", 5)
    with pytest.raises(ConfigError, match="mean"):
        TrialCount("geometric", 0.5)
    with pytest.raises(ConfigError, match="shape"):
        TrialCount("negative_binomial", 5, shape=0.0)


def test_a_cap_is_paid_for_in_delta():
    """min(K, cap) trials: (eps, delta' + (1 + e^eps) P(K > cap))-DP with eps the uncapped bound at delta'."""
    trial = training_event([(0.01, 1.1, 1000)])
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(trial)
    rdp = np.asarray(accountant._rdp)
    count, delta = TrialCount("poisson", 5), 1e-5
    eps, delta_bound = capped_job_epsilon(rdp, count, 25, delta)
    assert delta_bound + (1 + math.exp(eps)) * count.tail(25) <= delta
    assert eps == pytest.approx(job_epsilon(trial, count, delta_bound), rel=1e-9)
    assert eps >= job_epsilon(trial, count, delta)  # never below the uncapped job at the full delta
    with pytest.raises(ConfigError, match="max_trials"):  # P(K > 8) = 0.07 does not fit in 1e-5
        capped_job_epsilon(rdp, count, 8, delta)


@pytest.mark.parametrize("count,cap", [(TrialCount("geometric", 5), 3), (TrialCount("poisson", 5), 8)],
                         ids=["geometric", "poisson"])
def test_a_cap_that_does_not_fit_is_refused_with_the_fix(count, cap):
    """The refusal names the smallest cap that fits and, when one exists, the largest mean that fits
    this cap (Poisson: none, P(K > cap) > 0 for every mean); both fixes are accounted without error."""
    trial = training_event([(0.01, 1.1, 1000)])
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(trial)
    rdp = np.asarray(accountant._rdp)
    n, mean = smallest_cap(rdp, count, cap, 1e-5), largest_mean(rdp, count, cap, 1e-5)
    with pytest.raises(ConfigError, match="max_trials") as refused:
        capped_job_epsilon(rdp, count, cap, 1e-5)
    fixes = str(refused.value).split("; use ")[1]
    assert fixes == (f"max_trials={n}" if mean is None else f"max_trials={n} or mean={mean:.3g}")
    capped_job_epsilon(rdp, count, n, 1e-5)
    with pytest.raises(ConfigError):
        capped_job_epsilon(rdp, count, n - 1, 1e-5)
    if count.distribution == "poisson":
        assert mean is None
    else:
        assert 1 < mean < count.mean
        capped_job_epsilon(rdp, TrialCount(count.distribution, mean), cap, 1e-5)


def test_a_mean_of_one_is_one_trial():
    count = TrialCount("geometric", 1.0)
    assert count.sample(np.random.default_rng(0)) == 1 and count.tail(1) == 0.0
