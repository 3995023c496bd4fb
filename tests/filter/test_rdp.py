import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.filter import rdp


def test_rdp_hand_case():
    # W_w = diag(2, 1) -> (W_w W_wᵀ)⁻¹ = diag(1/4, 1); W_y = I: Δ = (1, −1) -> Δᵀ M⁻¹ Δ = 1.25
    curve = rdp.linear_filter_rdp(np.diag([2.0, 1.0]), np.eye(2), orders=(2.0, 10.0))
    assert curve == [{"order": 2.0, "rdp": 1.25}, {"order": 10.0, "rdp": 6.25}]


def test_rdp_takes_the_worst_label_pair():
    wy = np.array([[0.0, 1.0, 3.0], [0.0, 0.0, 0.0]])  # pairs: 1, 9, 4 along the first axis
    assert rdp.label_change_sensitivity_sq(np.eye(2), wy) == pytest.approx(9.0)


def test_rdp_infinite_when_noise_misses_the_shift():
    wn = np.array([[1.0], [0.0]])  # noise only along axis 0
    assert rdp.label_change_sensitivity_sq(wn, np.array([[0.0, 0.0], [0.0, 1.0]])) == float("inf")
    assert rdp.label_change_sensitivity_sq(wn, np.array([[0.0, 2.0], [0.0, 0.0]])) == pytest.approx(4.0)


def test_epsilon_conversion_hand_case():
    delta = 1e-5
    curve = [{"order": 2.0, "rdp": 1.0}, {"order": 11.0, "rdp": 5.5}, {"order": 101.0, "rdp": 50.5}]
    expected = min(1.0 + np.log(1 / delta), 5.5 + np.log(1 / delta) / 10, 50.5 + np.log(1 / delta) / 100)
    eps, order = rdp.rdp_to_epsilon(curve, delta)
    assert eps == pytest.approx(expected) and order == 11.0
    with pytest.raises(ValueError):
        rdp.rdp_to_epsilon(curve, 0.0)


@pytest.mark.parametrize("target", [0.5, 3.0, 10.0])
def test_max_sensitivity_sq_is_the_largest_within_the_target(target):
    cap = rdp.max_sensitivity_sq(target, 1e-5)
    eps = lambda s2: rdp.rdp_to_epsilon(rdp.rdp_curve(s2), 1e-5)[0]  # noqa: E731
    assert eps(cap) <= target < eps(cap * (1 + 1e-6))


@pytest.mark.parametrize("target", [0.0, -1.0, 0.045, float("inf"), float("nan")])
def test_max_sensitivity_sq_refuses_targets_below_the_floor(target):
    # floor: s² = 0 still costs log(1/δ)/(256 − 1) = 0.0451 at the largest order
    with pytest.raises(UsageError, match=r"^label_epsilon: must be finite and > 0.04515"):
        rdp.max_sensitivity_sq(target, 1e-5)


def test_label_shift_scale_brings_the_sensitivity_under_the_cap():
    wn, wy = np.diag([2.0, 1.0]), np.eye(2)  # s² = 1.25 (hand case above)
    assert rdp.label_shift_scale(wn, wy, 2.0) == 1.0
    t = rdp.label_shift_scale(wn, wy, 0.5)
    assert t == pytest.approx(np.sqrt(0.5 / 1.25), rel=1e-3)
    assert rdp.label_change_sensitivity_sq(wn, t * wy) <= 0.5
    assert rdp.label_shift_scale(np.array([[1.0], [0.0]]), np.array([[0.0, 0.0], [0.0, 1.0]]), 1.0) == 0.0
