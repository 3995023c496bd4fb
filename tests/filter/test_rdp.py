import numpy as np
import pytest

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
