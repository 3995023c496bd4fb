"""Tuning with a random number of trials (Papernot & Steinke 2022): the trial-count samplers and
the cap on K paid for in delta (the job's epsilon itself: tests/training/test_tuner.py)."""
import math

import dp_accounting
import numpy as np
import pytest

from tests.privacy.reference import repeat_and_select_epsilon
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DEFAULT_ORDERS, training_event
from tfpriv.privacy.tuning import TrialCount, capped_job_epsilon, largest_mean, smallest_cap


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
    assert eps == pytest.approx(repeat_and_select_epsilon(trial, count, delta_bound), rel=1e-9)
    assert eps >= repeat_and_select_epsilon(trial, count, delta)  # never below the uncapped job at the full delta
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
