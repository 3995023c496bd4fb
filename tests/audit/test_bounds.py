"""The one-run (Steinke et al. 2023) and many-run (Clopper-Pearson) epsilon lower bounds."""
import math

import numpy as np
import pytest
import scipy.stats

from tfpriv.audit.bounds import (clopper_pearson_upper, guesses, many_run_epsilon_lower_bound, one_run_audit,
                                 one_run_epsilon_lower_bound, one_run_p_value)


def test_p_value_known_case():
    """m=10, r=4, v=3, eps=0: tail P[Bin(4,1/2) >= 3] = 5/16; the delta term's max window is P[Bin = 2] / 1 = 6/16."""
    assert one_run_p_value(10, 4, 3, 0.0, 0.0) == pytest.approx(5 / 16)
    assert one_run_p_value(10, 4, 3, 0.0, 0.01) == pytest.approx(5 / 16 + 2 * 10 * 0.01 * 6 / 16)


def test_perfect_guesses_pure_dp_closed_form():
    """delta = 0, v = r: p-value q^r, so the bound is log(q / (1 - q)) with q = beta^(1/r)."""
    for r in (10, 100, 1000):
        q = 0.05 ** (1 / r)
        assert one_run_epsilon_lower_bound(r, r, r, 0.0, 0.95) == pytest.approx(math.log(q / (1 - q)), abs=1e-6)
    assert one_run_epsilon_lower_bound(1000, 1000, 1000, 0.0) > 5.5


def test_random_guesses_give_zero():
    assert one_run_epsilon_lower_bound(1000, 1000, 500, 1e-5) == 0.0
    assert one_run_epsilon_lower_bound(1000, 100, 55, 1e-5) == 0.0


def test_monotone_in_correct_guesses_confidence_and_delta():
    values = [one_run_epsilon_lower_bound(1000, 200, v, 1e-5) for v in (120, 140, 160, 180, 200)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert one_run_epsilon_lower_bound(1000, 200, 180, 1e-5, 0.99) < one_run_epsilon_lower_bound(1000, 200, 180, 1e-5, 0.9)
    assert one_run_epsilon_lower_bound(1000, 200, 180, 1e-3) < one_run_epsilon_lower_bound(1000, 200, 180, 1e-6)
    p = [one_run_p_value(1000, 200, 180, eps, 1e-5) for eps in (0.5, 1, 2, 3)]
    assert all(a < b for a, b in zip(p, p[1:]))


def test_one_run_bound_is_valid_for_randomized_response():
    """Guesses from eps0-randomized response (the worst case of eps0-DP): the 95 % bound exceeds eps0
    in about 5 % of trials or fewer."""
    rng = np.random.default_rng(0)
    eps0, r, trials = 1.0, 300, 300
    q = math.exp(eps0) / (1 + math.exp(eps0))
    correct = rng.binomial(r, q, size=trials)
    exceed = sum(one_run_epsilon_lower_bound(r, r, int(v), 0.0) > eps0 for v in correct)
    assert exceed <= 0.09 * trials
    assert np.mean([one_run_epsilon_lower_bound(r, r, int(v), 0.0) for v in correct[:30]]) > 0.5 * eps0


def test_guesses_top_and_bottom():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    included = np.array([True, False, True, False, False, True])
    assert guesses(scores, included, 2, 2) == (4, 1 + 1)   # top {5: in, 4: out}, bottom {1: out, 0: in}
    assert guesses(scores, included, 1, 0) == (1, 1)


def test_one_run_audit_grid_uses_bonferroni():
    m = 1000
    included = np.random.default_rng(1).random(m) < 0.5
    perfect = one_run_audit(included.astype(float), included, 0.0, fractions=(0.25,))
    grid = one_run_audit(included.astype(float), included, 0.0, fractions=(0.1, 0.25))
    assert perfect["epsilon_lower_bound"] > grid["grid"][1]["epsilon_lower_bound"] > 0
    r = perfect["best"]["guesses"]
    q = 0.05 ** (1 / r)
    assert perfect["epsilon_lower_bound"] == pytest.approx(math.log(q / (1 - q)), abs=1e-6)


def test_clopper_pearson_upper_known_values():
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.05) == 1.0
    assert clopper_pearson_upper(10, 100, 0.05) == pytest.approx(scipy.stats.beta.ppf(0.95, 11, 90))


def test_many_run_perfect_separation_closed_form():
    s_in, s_out = np.ones(100), np.zeros(100)
    out = many_run_epsilon_lower_bound(s_in, s_out, delta=1e-5, thresholds=[0.5])
    ub = 1 - (0.05 / 2) ** (1 / 100)
    assert out["epsilon_lower_bound"] == pytest.approx(math.log((1 - 1e-5 - ub) / ub))
    # indistinguishable scores: no bound
    rng = np.random.default_rng(0)
    assert many_run_epsilon_lower_bound(rng.normal(size=100), rng.normal(size=100), 1e-5)["epsilon_lower_bound"] == 0.0
