"""Dimension-wise sum-of-Cauchy-kernels MMD (Mathieu et al. 2019; term-wise DP-SGD paper, Sec. 1).

Kernel: `k(x, y) = sum_d sum_l s_l / (s_l + (x_d - y_d)^2)` with scales
`s_l in (0.2, 0.4, 1, 2, 4, 10)` (Mathieu et al.'s `C = 2 * scale` for scale in .1 .2 .5 1 2 5).

Estimator (default `"unbiased"`): the U-statistic of Mathieu et al.'s `imq_dim_kernel`
(Gretton et al. 2012, MMD_u^2), generalised to unequal sizes n, m:

    MMD_u^2 = 1/(n(n-1)) sum_{i!=j} k(x_i,x_j) + 1/(m(m-1)) sum_{i!=j} k(y_i,y_j)
              - 2/(nm) sum_{i,j} k(x_i,y_j)

It is unbiased (zero in expectation for two samples of one distribution) but can be negative,
and MMD_u^2(X, X) is slightly negative, not 0. `estimator="biased"` gives the V-statistic
(all pairs including i=j, normalised by n^2, m^2, nm), which is >= 0 and exactly 0 for X vs X.
With a single valid row on one side the U-statistic's within-sample term has no pairs and is
taken as 0 (it would be a constant, without gradient, in the V-statistic).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from tfpriv.errors import UsageError

DEFAULT_SCALES = (0.2, 0.4, 1.0, 2.0, 4.0, 10.0)
ESTIMATORS = ("unbiased", "biased")


def _check_scales(scales: Sequence[float]) -> tuple:
    scales = tuple(float(s) for s in scales)
    if not scales or any(not s > 0 for s in scales):
        raise UsageError(f"scales: must be a non-empty sequence of positive numbers, got {scales}")
    return scales


def _check_estimator(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise UsageError(f"estimator: must be one of {ESTIMATORS}, got {estimator!r}")


def cauchy_kernel_matrix(x: tf.Tensor, y: tf.Tensor, scales: Sequence[float] = DEFAULT_SCALES) -> tf.Tensor:
    """Gram matrix `k(x_i, y_j)`: x [..., n, D], y [..., m, D] -> [..., n, m]."""
    scales = _check_scales(scales)
    sq = tf.square(x[..., :, None, :] - y[..., None, :, :])  # [..., n, m, D]
    total = 0.0
    for s in scales:
        total += tf.reduce_sum(s / (s + sq), axis=-1)
    return total


def _valid(mask: Optional[tf.Tensor], rows: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Float 0/1 row mask [..., n]; all ones when no mask is given."""
    if mask is None:
        return tf.ones(tf.shape(rows)[:-1], dtype=dtype)
    mask = tf.convert_to_tensor(mask)
    return tf.cast(tf.not_equal(mask, tf.zeros([], mask.dtype)), dtype)


def cauchy_mmd(
    x: tf.Tensor,
    y: tf.Tensor,
    x_mask: Optional[tf.Tensor] = None,
    y_mask: Optional[tf.Tensor] = None,
    scales: Sequence[float] = DEFAULT_SCALES,
    estimator: str = "unbiased",
) -> tf.Tensor:
    """Squared MMD between row sets x [..., n, D] and y [..., m, D], per group -> [...].

    Leading dimensions are independent groups (e.g. the partitions of a batch) and broadcast
    against each other. Masks [..., n] / [..., m] mark valid rows (nonzero = valid); padding
    rows are zeroed before use, so their contents (even NaN) cannot reach the value or the
    gradient. A group with no valid row on either side gives 0 with zero gradient.
    Differentiable; usable as a training loss. See the module docstring for the estimator.
    """
    scales = _check_scales(scales)
    _check_estimator(estimator)
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    y = tf.convert_to_tensor(y, dtype_hint=x.dtype)
    y = tf.cast(y, x.dtype)
    if x.shape.rank is not None and x.shape.rank < 2:
        raise UsageError(f"x: expected shape [..., n, D], got {x.shape}")
    if y.shape.rank is not None and y.shape.rank < 2:
        raise UsageError(f"y: expected shape [..., m, D], got {y.shape}")
    if x.shape[-1] is not None and y.shape[-1] is not None and x.shape[-1] != y.shape[-1]:
        raise UsageError(f"y: last dimension {y.shape[-1]} differs from x's {x.shape[-1]}")

    dtype = x.dtype
    mx = _valid(x_mask, x, dtype)
    my = _valid(y_mask, y, dtype)
    x = tf.where(mx[..., None] > 0, x, tf.zeros_like(x))
    y = tf.where(my[..., None] > 0, y, tf.zeros_like(y))
    nx = tf.reduce_sum(mx, axis=-1)
    ny = tf.reduce_sum(my, axis=-1)

    wxx = mx[..., :, None] * mx[..., None, :]
    wyy = my[..., :, None] * my[..., None, :]
    wxy = mx[..., :, None] * my[..., None, :]
    if estimator == "unbiased":
        wxx *= 1.0 - tf.eye(tf.shape(x)[-2], dtype=dtype)
        wyy *= 1.0 - tf.eye(tf.shape(y)[-2], dtype=dtype)
        dxx, dyy = nx * (nx - 1.0), ny * (ny - 1.0)
    else:
        dxx, dyy = nx * nx, ny * ny
    dxy = nx * ny

    def mean_term(kernel, weight, denom):
        total = tf.reduce_sum(kernel * weight, axis=[-2, -1])
        return total / tf.maximum(denom, 1.0)  # no pairs -> total is 0 -> term 0

    value = (
        mean_term(cauchy_kernel_matrix(x, x, scales), wxx, dxx)
        + mean_term(cauchy_kernel_matrix(y, y, scales), wyy, dyy)
        - 2.0 * mean_term(cauchy_kernel_matrix(x, y, scales), wxy, dxy)
    )
    nonempty = tf.logical_and(nx > 0, ny > 0)
    return tf.where(nonempty, value, tf.zeros_like(value))


@tf.function(reduce_retracing=True)
def _block_sum(a: tf.Tensor, b: tf.Tensor, scales: tf.Tensor) -> tf.Tensor:
    sq = tf.square(a[:, None, :] - b[None, :, :])  # [na, nb, D]
    per_scale = tf.map_fn(lambda s: tf.reduce_sum(s / (s + sq)), scales)
    return tf.reduce_sum(per_scale)


def _kernel_sum(a: np.ndarray, b: np.ndarray, scales: tf.Tensor, chunk_size: int) -> float:
    total = 0.0
    for i in range(0, len(a), chunk_size):
        for j in range(0, len(b), chunk_size):
            total += float(_block_sum(a[i:i + chunk_size], b[j:j + chunk_size], scales))
    return total


def mmd_metric(
    codes: np.ndarray,
    prior_samples: np.ndarray,
    scales: Sequence[float] = DEFAULT_SCALES,
    estimator: str = "unbiased",
    chunk_size: int = 512,
) -> float:
    """MMD^2(q(z), p(z)) between encodings [n, D] and prior samples [m, D], as a float.

    Same kernel and estimator as `cauchy_mmd`, computed in float64 over chunk_size x
    chunk_size blocks so that n and m in the tens of thousands fit in memory (cost O(nmD)).
    """
    scales = _check_scales(scales)
    _check_estimator(estimator)
    x = np.asarray(codes, dtype=np.float64)
    y = np.asarray(prior_samples, dtype=np.float64)
    if x.ndim != 2:
        raise UsageError(f"codes: expected shape [n, D], got {x.shape}")
    if y.ndim != 2 or y.shape[1] != x.shape[1]:
        raise UsageError(f"prior_samples: expected shape [m, {x.shape[1]}], got {y.shape}")
    n, m = len(x), len(y)
    min_rows = 2 if estimator == "unbiased" else 1
    if n < min_rows or m < min_rows:
        raise UsageError(f"codes, prior_samples: need at least {min_rows} rows each, got {n} and {m}")
    if chunk_size < 1:
        raise UsageError(f"chunk_size: must be >= 1, got {chunk_size}")
    s = tf.constant(scales, dtype=tf.float64)
    sxx = _kernel_sum(x, x, s, chunk_size)
    syy = _kernel_sum(y, y, s, chunk_size)
    sxy = _kernel_sum(x, y, s, chunk_size)
    if estimator == "unbiased":
        diag = x.shape[1] * len(scales)  # k(x, x) = D * number of scales
        return (sxx - n * diag) / (n * (n - 1)) + (syy - m * diag) / (m * (m - 1)) - 2.0 * sxy / (n * m)
    return sxx / n**2 + syy / m**2 - 2.0 * sxy / (n * m)
