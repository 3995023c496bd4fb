"""Hoyer sparsity of latent codes (term-wise DP-SGD paper, eq. 17; Mathieu et al. 2019)."""
from __future__ import annotations

import numpy as np

from tfpriv.errors import UsageError


def hoyer(y: np.ndarray) -> np.ndarray:
    """Hoyer measure `(sqrt(d) - ||y||_1/||y||_2) / (sqrt(d) - 1)` over the last axis.

    0 for a vector with all entries of equal magnitude, 1 for a one-hot vector.
    The all-zero vector (0/0) is defined as 0: it carries no evidence of sparsity,
    and the lowest value cannot inflate a mean over examples.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim < 1:
        raise UsageError("y: expected an array [..., d], got a scalar")
    d = y.shape[-1]
    if d < 2:
        raise UsageError(f"y: Hoyer needs d >= 2 dimensions, got d={d}")
    l1 = np.abs(y).sum(axis=-1)
    l2 = np.sqrt(np.square(y).sum(axis=-1))
    zero = l2 == 0
    ratio = np.where(zero, np.sqrt(d), l1 / np.where(zero, 1.0, l2))
    return (np.sqrt(d) - ratio) / (np.sqrt(d) - 1.0)


def hoyer_sparsity(z: np.ndarray) -> float:
    """Mean Hoyer of per-dimension standardised codes, `mean_i Hoyer(z_i / std(z))` (eq. 17).

    Dividing each dimension by its standard deviation over the dataset keeps collapsed
    (near-constant) dimensions from looking like sparsity. Hoyer is invariant to a global
    scale, so the std's ddof does not matter (ddof=0 is used). If some dimension has zero
    standard deviation the normalisation is undefined and the result is nan.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2:
        raise UsageError(f"z: expected codes of shape [n, d], got shape {z.shape}")
    if z.shape[0] < 2:
        raise UsageError(f"z: need at least 2 codes to estimate per-dimension std, got {z.shape[0]}")
    std = z.std(axis=0)
    if np.any(std == 0):
        return float("nan")
    return float(np.mean(hoyer(z / std)))
