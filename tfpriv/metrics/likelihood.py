"""Test log-likelihood of a VAE by importance sampling (Burda et al. 2016, the IWAE bound).

`log p(x) ~= log (1/K) sum_k p(x|z_k) p(z_k) / q(z_k|x)`, z_k ~ q(z|x) a diagonal Gaussian.
It is a stochastic lower bound in expectation (Jensen), tightening as K grows, and exact for
any K when q is the true posterior. Always report K next to the number.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Tuple

import numpy as np
import tensorflow as tf
from scipy.special import logsumexp

from tfpriv.errors import UsageError

_LOG_2PI = math.log(2.0 * math.pi)


def _log_normal_diag(z: np.ndarray, mean: np.ndarray, logvar: np.ndarray) -> np.ndarray:
    """log N(z; mean, diag(exp(logvar))) summed over the last axis."""
    return -0.5 * np.sum(_LOG_2PI + logvar + np.square(z - mean) * np.exp(-logvar), axis=-1)


def _as_vector(value, expected: int, name: str) -> np.ndarray:
    value = np.asarray(value, dtype=np.float64)
    if value.shape != (expected,):
        raise UsageError(f"{name}: must return shape [{expected}], got {value.shape}")
    return value


def importance_sampled_log_likelihood(
    x: np.ndarray,
    encode: Callable[[tf.Tensor], Tuple[tf.Tensor, tf.Tensor]],
    log_px_given_z: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    log_prior: Callable[[tf.Tensor], tf.Tensor],
    num_samples: int = 1000,
    batch_size: int = 100,
    sample_chunk: int = 100,
    seed: int = 0,
) -> np.ndarray:
    """Per-example importance-sampled estimate of log p(x) in nats -> float64 [n].

    encode(x) -> (mean, logvar) [b, D] of q(z|x); log_px_given_z(x, z) -> [b] and
    log_prior(z) -> [b] for paired rows. Examples are encoded batch_size at a time; the
    decoder sees at most batch_size * sample_chunk rows per call (x repeated sample-major).
    """
    if num_samples < 1:
        raise UsageError(f"num_samples: must be >= 1, got {num_samples}")
    if batch_size < 1:
        raise UsageError(f"batch_size: must be >= 1, got {batch_size}")
    if sample_chunk < 1:
        raise UsageError(f"sample_chunk: must be >= 1, got {sample_chunk}")
    x = np.asarray(x)
    if x.ndim < 1 or len(x) == 0:
        raise UsageError(f"x: expected a non-empty batch [n, ...], got shape {x.shape}")
    rng = np.random.default_rng(seed)
    out = np.empty(len(x), dtype=np.float64)
    for start in range(0, len(x), batch_size):
        xb = x[start:start + batch_size]
        b = len(xb)
        mean, logvar = encode(tf.convert_to_tensor(xb))
        dtype = tf.as_dtype(getattr(mean, "dtype", tf.float32))
        mean = np.asarray(mean, dtype=np.float64)
        logvar = np.asarray(logvar, dtype=np.float64)
        if mean.ndim != 2 or mean.shape[0] != b or logvar.shape != mean.shape:
            raise UsageError(f"encode: must return (mean, logvar) of shape [{b}, D], got {mean.shape}, {logvar.shape}")
        log_w = np.empty((num_samples, b), dtype=np.float64)
        for k0 in range(0, num_samples, sample_chunk):
            k = min(sample_chunk, num_samples - k0)
            z = mean + np.exp(0.5 * logvar) * rng.standard_normal((k,) + mean.shape)  # [k, b, D]
            z_flat = z.reshape(k * b, -1)
            x_rep = np.broadcast_to(xb, (k,) + xb.shape).reshape((k * b,) + xb.shape[1:])
            z_tf = tf.constant(z_flat, dtype=dtype)
            log_px = _as_vector(log_px_given_z(tf.convert_to_tensor(x_rep), z_tf), k * b, "log_px_given_z")
            log_pz = _as_vector(log_prior(z_tf), k * b, "log_prior")
            # log q at the z actually fed to the model (cast to its dtype), for consistency
            z_fed = np.asarray(z_tf, dtype=np.float64).reshape(z.shape)
            log_qz = _log_normal_diag(z_fed, mean, logvar).reshape(k * b)
            log_w[k0:k0 + k] = (log_px + log_pz - log_qz).reshape(k, b)
        out[start:start + b] = logsumexp(log_w, axis=0) - math.log(num_samples)
    return out


def log_likelihood_record(values: np.ndarray, num_samples: int) -> Dict[str, float]:
    """Summary for results.json: mean/std over examples of the estimate, with K stated."""
    values = np.asarray(values, dtype=np.float64)
    return {
        "test_log_likelihood": float(values.mean()),
        "test_log_likelihood_std": float(values.std()),
        "test_log_likelihood_num_importance_samples": int(num_samples),
        "test_log_likelihood_num_examples": int(values.size),
    }
