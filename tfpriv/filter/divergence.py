"""Distortion between latent Gaussians before and after filtering, and the budget penalty.

Paper 001 §6.3.1: with a shared covariance Σ, KL(N(μ+Δμ, Σ) ‖ N(μ, Σ)) = ½ Δμᵀ Σ⁻¹ Δμ and
χ² = exp(Δμᵀ Σ⁻¹ Δμ) − 1. Estimation used throughout tfpriv.filter:
  * Σ: the empirical covariance of the (unfiltered) training codes, fixed before the game
    (`estimate_precision`, with a small ridge for invertibility);
  * Δμ: per example, the realised displacement z̃_i − z_i (mean shift plus injected noise), and
    D is the batch mean of the per-example divergence. For the linear filter this is
    E = ½(W_y e_y)ᵀΣ⁻¹(W_y e_y) + ½ tr(Σ⁻¹ W_w W_wᵀ): it charges the noise as well as the shift, so
    the filter and the Gaussian mechanism are measured by the same yardstick.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfpriv.errors import UsageError

DIVERGENCES = ("kl", "chi2")
_MAX_EXPONENT = 60.0  # keeps exp() finite in float32 when a filter wanders far outside the budget


def estimate_precision(codes: np.ndarray, ridge: float = 1e-6) -> np.ndarray:
    """Σ⁻¹ from the empirical covariance of codes [N, D] (ridge·mean variance added to the diagonal)."""
    codes = np.asarray(codes, dtype=np.float64)
    if codes.ndim != 2 or codes.shape[0] < 2:
        raise UsageError(f"codes: need a [N>=2, D] array, got shape {codes.shape}")
    cov = np.atleast_2d(np.cov(codes, rowvar=False))
    cov += ridge * max(np.trace(cov) / cov.shape[0], 1e-12) * np.eye(cov.shape[0])
    prec = np.linalg.inv(cov)
    return (0.5 * (prec + prec.T)).astype(np.float32)


def mahalanobis_sq(delta: tf.Tensor, precision: tf.Tensor) -> tf.Tensor:
    """Per-row δᵀ P δ for delta [B, D] -> [B]."""
    delta = tf.convert_to_tensor(delta)
    precision = tf.cast(precision, delta.dtype)
    return tf.reduce_sum(tf.matmul(delta, precision) * delta, axis=-1)


def per_example_divergence(name: str, delta: tf.Tensor, precision: tf.Tensor) -> tf.Tensor:
    """KL (½ m) or χ² (exp(m) − 1) with m = Δμᵀ Σ⁻¹ Δμ, per example [B]."""
    m = mahalanobis_sq(delta, precision)
    if name == "kl":
        return 0.5 * m
    if name == "chi2":
        return tf.exp(tf.minimum(m, _MAX_EXPONENT)) - 1.0
    raise UsageError(f"--divergence: must be one of {DIVERGENCES}, got {name!r}")


def mean_divergence(name: str, delta, precision) -> float:
    """Batch-mean divergence as a Python float (evaluation helper)."""
    return float(tf.reduce_mean(per_example_divergence(name, tf.convert_to_tensor(delta, tf.float32), precision)))


def budget_penalty(divergence: tf.Tensor, budget: float, rho: tf.Tensor) -> tf.Tensor:
    """ρ·max(0, D − b)² (paper eq. 17): zero inside the budget, quadratic outside."""
    return rho * tf.square(tf.nn.relu(divergence - budget))


def rho_at_epoch(epoch, rho_init: float, halve_every: int = 500, rho_min: float = 2.0):
    """ρ halved every `halve_every` epochs, never below rho_min (or rho_init if that is smaller).
    Works on Python ints and on tensors."""
    floor = min(rho_min, rho_init)
    if isinstance(epoch, (int, np.integer)):
        return max(floor, rho_init * 0.5 ** (int(epoch) // halve_every))
    halvings = tf.cast(epoch // halve_every, tf.float32)
    return tf.maximum(floor, rho_init * tf.pow(0.5, halvings))
