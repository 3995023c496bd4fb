"""Rényi DP of a trained linear filter for a change of the private label (paper 001 Thm 3).

For fixed z, z̃ = z + W_w w + W_y e_y is N(z + W_y e_y, W_w W_wᵀ). Changing y to y' shifts the mean
by Δ = W_y (e_y − e_y'), so the release is a Gaussian mechanism with RDP
    ε(α) = α/2 · max_{y≠y'} Δᵀ (W_w W_wᵀ)⁻¹ Δ .
If W_w W_wᵀ is singular and some Δ leaves its column space the divergence is infinite.
(ε, δ) conversion: the classic bound of Mironov (2017, Prop. 3), ε = min_α ε(α) + log(1/δ)/(α − 1).
"""
from __future__ import annotations

import itertools

import numpy as np

DEFAULT_ORDERS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0,
                  24.0, 32.0, 48.0, 64.0, 128.0, 256.0)


def label_change_sensitivity_sq(noise_matrix: np.ndarray, label_matrix: np.ndarray) -> float:
    """max over label pairs of Δᵀ (W_w W_wᵀ)⁻¹ Δ with Δ = W_y (e_y − e_y'); inf if Δ is outside range(W_w)."""
    wn = np.asarray(noise_matrix, np.float64)
    wy = np.asarray(label_matrix, np.float64)
    cov = wn @ wn.T
    k = wy.shape[1]
    best = 0.0
    for a, b in itertools.combinations(range(k), 2):
        delta = wy[:, a] - wy[:, b]
        sol, *_ = np.linalg.lstsq(cov, delta, rcond=None)
        if np.linalg.norm(cov @ sol - delta) > 1e-6 * max(np.linalg.norm(delta), 1e-12):
            return float("inf")
        best = max(best, float(delta @ sol))
    return best


def linear_filter_rdp(noise_matrix: np.ndarray, label_matrix: np.ndarray,
                      orders=DEFAULT_ORDERS) -> list[dict]:
    """[{order, rdp}] for the label-change RDP of the linear filter."""
    s2 = label_change_sensitivity_sq(noise_matrix, label_matrix)
    return [{"order": float(a), "rdp": float(a) / 2.0 * s2} for a in orders]


def rdp_to_epsilon(rdp: list[dict], delta: float) -> tuple[float, float]:
    """(ε, best order) from RDP curve via ε = min_α rdp(α) + log(1/δ)/(α − 1)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta: must be in (0, 1), got {delta}")
    best = (float("inf"), float("nan"))
    for entry in rdp:
        a = entry["order"]
        if a <= 1:
            continue
        eps = entry["rdp"] + np.log(1.0 / delta) / (a - 1.0)
        if eps < best[0]:
            best = (float(eps), float(a))
    return best
