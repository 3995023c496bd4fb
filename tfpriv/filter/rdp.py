"""Rényi DP of a trained linear filter for a change of the private label (paper 001 Thm 3).

For fixed z, z̃ = z + W_w w + W_y e_y is N(z + W_y e_y, W_w W_wᵀ). Changing y to y' shifts the mean
by Δ = W_y (e_y − e_y'), so the release is a Gaussian mechanism with RDP
    ε(α) = α/2 · max_{y≠y'} Δᵀ (W_w W_wᵀ)⁻¹ Δ .
If W_w W_wᵀ is singular and some Δ leaves its column space the divergence is infinite.
(ε, δ) conversion: the classic bound of Mironov (2017, Prop. 3), ε = min_α ε(α) + log(1/δ)/(α − 1).

A target ε is met by capping s² = max Δᵀ(W_w W_wᵀ)⁻¹Δ (`max_sensitivity_sq`, found by bisection on
the conversion above) and shrinking W_y when s² exceeds the cap (`label_shift_scale`): s² is
quadratic in W_y, so scaling W_y by t scales s² by t².
"""
from __future__ import annotations

import itertools

import numpy as np

from tfpriv.errors import UsageError

DEFAULT_ORDERS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0,
                  24.0, 32.0, 48.0, 64.0, 128.0, 256.0)


def label_change_sensitivity_sq(noise_matrix: np.ndarray, label_matrix: np.ndarray) -> float:
    """max over label pairs of Δᵀ (W_w W_wᵀ)⁻¹ Δ with Δ = W_y (e_y − e_y'); inf if Δ is outside range(W_w)."""
    wn = np.asarray(noise_matrix, np.float64)
    wy = np.asarray(label_matrix, np.float64)
    cov = wn @ wn.T
    pairs = list(itertools.combinations(range(wy.shape[1]), 2))
    if not pairs:
        return 0.0
    deltas = np.stack([wy[:, a] - wy[:, b] for a, b in pairs], axis=1)  # [D, pairs]
    sol, *_ = np.linalg.lstsq(cov, deltas, rcond=None)
    residual = np.linalg.norm(cov @ sol - deltas, axis=0)
    if np.any(residual > 1e-6 * np.maximum(np.linalg.norm(deltas, axis=0), 1e-12)):
        return float("inf")
    return float(max(0.0, np.max(np.sum(deltas * sol, axis=0))))


def rdp_curve(sensitivity_sq: float, orders=DEFAULT_ORDERS) -> list[dict]:
    """[{order, rdp}] of a Gaussian mechanism whose squared Mahalanobis sensitivity is s²: rdp = α/2 · s²."""
    return [{"order": float(a), "rdp": float(a) / 2.0 * sensitivity_sq} for a in orders]


def linear_filter_rdp(noise_matrix: np.ndarray, label_matrix: np.ndarray,
                      orders=DEFAULT_ORDERS) -> list[dict]:
    """[{order, rdp}] for the label-change RDP of the linear filter."""
    return rdp_curve(label_change_sensitivity_sq(noise_matrix, label_matrix), orders)


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


def max_sensitivity_sq(epsilon: float, delta: float, orders=DEFAULT_ORDERS) -> float:
    """The largest s² whose (ε, δ) by `rdp_to_epsilon` is ≤ `epsilon` (bisection; ε grows with s²).
    UsageError when `epsilon` is at or below the floor log(1/δ)/(α_max − 1) that even s² = 0 has."""
    floor = rdp_to_epsilon(rdp_curve(0.0, orders), delta)[0]
    if not floor < epsilon < float("inf"):
        raise UsageError(f"label_epsilon: must be finite and > {floor:.4g} (the epsilon of a filter without label "
                         f"shift at delta={delta:g} and orders up to {max(orders):g}), got {epsilon:g}")
    eps_of = lambda s2: rdp_to_epsilon(rdp_curve(s2, orders), delta)[0]  # noqa: E731
    lo, hi = 0.0, 1.0
    while eps_of(hi) <= epsilon:
        lo, hi = hi, 2.0 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps_of(mid) <= epsilon else (lo, mid)
    return lo


def label_shift_scale(noise_matrix: np.ndarray, label_matrix: np.ndarray, cap: float,
                      margin: float = 1e-4) -> float:
    """Factor t ≤ 1 such that the filter with W_y → t·W_y has s² ≤ cap·(1 − margin) (1 when it already
    has s² ≤ cap; 0 when a label shift leaves range(W_w), where only W_y = 0 is finite)."""
    s2 = label_change_sensitivity_sq(noise_matrix, label_matrix)
    if s2 <= cap:
        return 1.0
    if not np.isfinite(s2):
        return 0.0
    return float(np.sqrt(cap * (1.0 - margin) / s2))
