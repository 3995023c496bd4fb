"""Sample-quality scores from a classifier's outputs: inception score and Frechet distance."""
from __future__ import annotations

import warnings
from typing import Tuple

import numpy as np
from scipy import linalg
from scipy.special import rel_entr

from tfpriv.errors import UsageError


def inception_score(probs: np.ndarray, splits: int = 10) -> Tuple[float, float]:
    """`exp(E_x KL(p(y|x) || p(y)))` over classifier probabilities [n, C] (Salimans et al. 2016).

    Standard protocol: the n rows are cut into `splits` consecutive parts, p(y) is the
    marginal within each part, and the mean and std of the per-part scores are returned.
    Ranges from 1 (every output equal to the marginal) to C (confident and balanced).
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise UsageError(f"probs: expected shape [n, C], got {p.shape}")
    if splits < 1 or splits > len(p):
        raise UsageError(f"splits: must be in [1, n={len(p)}], got {splits}")
    if np.any(p < 0) or not np.allclose(p.sum(axis=1), 1.0, atol=1e-3):
        raise UsageError("probs: rows must be probability vectors (non-negative, summing to 1)")
    scores = []
    for part in np.array_split(p, splits):
        marginal = part.mean(axis=0, keepdims=True)
        kl = rel_entr(part, marginal).sum(axis=1)  # 0 * log 0 = 0
        scores.append(np.exp(kl.mean()))
    return float(np.mean(scores)), float(np.std(scores))


def frechet_distance_from_stats(mu_a: np.ndarray, sigma_a: np.ndarray, mu_b: np.ndarray,
                                sigma_b: np.ndarray, eps: float = 1e-6) -> float:
    """`||mu_a - mu_b||^2 + Tr(S_a + S_b - 2 (S_a S_b)^{1/2})` between two Gaussians.

    If sqrtm fails on a near-singular product, eps*I is added to both covariances; a small
    imaginary part from round-off is dropped (a large one raises).
    """
    mu_a, mu_b = np.atleast_1d(mu_a).astype(np.float64), np.atleast_1d(mu_b).astype(np.float64)
    sigma_a, sigma_b = np.atleast_2d(sigma_a).astype(np.float64), np.atleast_2d(sigma_b).astype(np.float64)
    if mu_a.shape != mu_b.shape or sigma_a.shape != sigma_b.shape or sigma_a.shape != mu_a.shape * 2:
        raise UsageError(f"mu/sigma: incompatible shapes {mu_a.shape}, {sigma_a.shape}, {mu_b.shape}, {sigma_b.shape}")
    diff = mu_a - mu_b
    with warnings.catch_warnings():  # singular products are handled below, as in pytorch-fid
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(sigma_a @ sigma_b)
        if not np.isfinite(covmean).all():
            offset = eps * np.eye(len(mu_a))
            covmean = linalg.sqrtm((sigma_a + offset) @ (sigma_b + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise ArithmeticError(f"frechet_distance: sqrtm has imaginary part {np.max(np.abs(covmean.imag)):.3g}")
        covmean = covmean.real
    return float(diff @ diff + np.trace(sigma_a) + np.trace(sigma_b) - 2.0 * np.trace(covmean))


def frechet_distance(feat_a: np.ndarray, feat_b: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to two feature sets [n, d] and [m, d] (FID)."""
    a = np.asarray(feat_a, dtype=np.float64)
    b = np.asarray(feat_b, dtype=np.float64)
    if a.ndim != 2 or len(a) < 2:
        raise UsageError(f"feat_a: expected shape [n >= 2, d], got {a.shape}")
    if b.ndim != 2 or len(b) < 2 or b.shape[1] != a.shape[1]:
        raise UsageError(f"feat_b: expected shape [m >= 2, {a.shape[1]}], got {b.shape}")
    return frechet_distance_from_stats(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))
