import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.metrics.generative import frechet_distance, frechet_distance_from_stats, inception_score


def test_uniform_outputs_score_one():
    mean, std = inception_score(np.full((100, 10), 0.1))
    assert mean == pytest.approx(1.0) and std == pytest.approx(0.0, abs=1e-12)


def test_balanced_one_hot_outputs_score_number_of_classes():
    probs = np.eye(7)[np.tile(np.arange(7), 20)]  # each split of 14 holds every class twice
    mean, std = inception_score(probs, splits=10)
    assert mean == pytest.approx(7.0) and std == pytest.approx(0.0, abs=1e-9)


def test_known_intermediate_score():
    # two classes, all rows (0.75, 0.25) and (0.25, 0.75) in equal number: p(y) uniform,
    # KL = 0.75 log 1.5 + 0.25 log 0.5 for every row
    probs = np.array([[0.75, 0.25], [0.25, 0.75]] * 50)
    mean, _ = inception_score(probs, splits=5)
    assert mean == pytest.approx(np.exp(0.75 * np.log(1.5) + 0.25 * np.log(0.5)))


def test_split_protocol_mean_and_std():
    # first half collapsed on class 0, second half balanced one-hot over 2 classes
    probs = np.concatenate([np.eye(2)[np.zeros(50, int)], np.eye(2)[np.tile([0, 1], 25)]])
    mean, std = inception_score(probs, splits=2)
    assert mean == pytest.approx(1.5) and std == pytest.approx(0.5)


def test_inception_score_rejects_non_probabilities():
    with pytest.raises(UsageError, match="^probs: "):
        inception_score(np.full((20, 3), 0.5))


def test_identical_features_have_zero_distance():
    a = np.random.default_rng(0).normal(size=(500, 8))
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)


def test_shifted_features_distance_is_squared_shift():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2000, 5)) @ rng.normal(size=(5, 5))
    delta = np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    assert frechet_distance(a, a + delta) == pytest.approx(delta @ delta, rel=1e-6)
    # independent samples: approximately; the sampling std of ||mean_b - mean_c||^2 is
    # about 2 ||delta|| sqrt(2 / 4000) ~ 0.17
    b = rng.normal(size=(4000, 5)) + delta
    c = rng.normal(size=(4000, 5))
    assert frechet_distance(c, b) == pytest.approx(delta @ delta, abs=0.6)


def test_diagonal_gaussians_closed_form():
    va, vb = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    mu_a, mu_b = np.zeros(3), np.array([1.0, 0.0, 0.0])
    want = 1.0 + np.sum((np.sqrt(va) - np.sqrt(vb)) ** 2)  # = 1 + 4 + 1 + 0
    assert frechet_distance_from_stats(mu_a, np.diag(va), mu_b, np.diag(vb)) == pytest.approx(want)


def test_singular_covariances_are_handled():
    rng = np.random.default_rng(2)
    a = np.zeros((50, 4))
    a[:, 0] = rng.normal(size=50)  # rank-1 covariance
    value = frechet_distance(a, a + np.array([0.0, 1.0, 0.0, 0.0]))
    assert value == pytest.approx(1.0, abs=1e-3)
