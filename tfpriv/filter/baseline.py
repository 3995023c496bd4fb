"""Baseline: additive Gaussian mechanism z̃ = z + σ n, n ~ N(0, I), at the filter's distortion budget.

σ is solved so that the expected per-example divergence (same estimator as the game, see
`divergence.py`: m = σ² nᵀΣ⁻¹n with Σ the training-code covariance) equals the budget:
  KL:  E[½ m] = ½ σ² tr(Σ⁻¹) = b  ⇒  σ² = 2b / tr(Σ⁻¹);
  χ²:  E[exp(m)] − 1 = Π_j (1 − 2σ²λ_j)^(−½) − 1 = b  (λ_j eigenvalues of Σ⁻¹; chi-square MGF),
       solved by bisection on σ² ∈ [0, 1/(2 λ_max)).
`covariance_shaped_scale`/`covariance_mechanism` are a second baseline, z̃ = z + s·L n with
LLᵀ = Σ: the noise follows the code distribution, so m = s² nᵀn, KL: s² = 2b/D and
χ²: (1 − 2s²)^(−D/2) − 1 = b ⇒ s² = (1 − (1+b)^(−2/D))/2. The isotropic mechanism spends much of
its budget on near-constant latent directions (large Σ⁻¹ entries); this one cannot.
"""
from __future__ import annotations

import numpy as np

from tfpriv.errors import UsageError


def gaussian_noise_scale(budget: float, precision: np.ndarray, divergence: str = "kl") -> float:
    """σ of the isotropic Gaussian mechanism whose expected divergence equals `budget`."""
    if budget < 0:
        raise UsageError(f"--budget: must be >= 0, got {budget}")
    lam = np.linalg.eigvalsh(np.asarray(precision, np.float64))
    if divergence == "kl":
        return float(np.sqrt(2.0 * budget / lam.sum()))
    if divergence == "chi2":
        if budget == 0:
            return 0.0
        target = np.log1p(budget)  # compare in log space: −½ Σ log(1 − 2 s λ) = log(1 + b)
        lo, hi = 0.0, (1.0 - 1e-12) / (2.0 * lam.max())
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if -0.5 * np.sum(np.log1p(-2.0 * mid * lam)) < target:
                lo = mid
            else:
                hi = mid
        return float(np.sqrt(0.5 * (lo + hi)))
    raise UsageError(f"--divergence: must be one of ('kl', 'chi2'), got {divergence!r}")


def gaussian_mechanism(z: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """z + N(0, σ² I)."""
    z = np.asarray(z, np.float32)
    return (z + sigma * rng.standard_normal(z.shape)).astype(np.float32)


def covariance_shaped_scale(budget: float, dim: int, divergence: str = "kl") -> float:
    """s of z + s·L n (LLᵀ = Σ) whose expected divergence equals `budget`."""
    if budget < 0:
        raise UsageError(f"--budget: must be >= 0, got {budget}")
    if divergence == "kl":
        return float(np.sqrt(2.0 * budget / dim))
    if divergence == "chi2":
        return float(np.sqrt(0.5 * (1.0 - (1.0 + budget) ** (-2.0 / dim))))
    raise UsageError(f"--divergence: must be one of ('kl', 'chi2'), got {divergence!r}")


def covariance_mechanism(z: np.ndarray, scale: float, precision: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """z + s·L n with LLᵀ = Σ = precision⁻¹."""
    z = np.asarray(z, np.float32)
    chol = np.linalg.cholesky(np.linalg.inv(np.asarray(precision, np.float64)))
    return (z + scale * rng.standard_normal(z.shape) @ chol.T).astype(np.float32)
