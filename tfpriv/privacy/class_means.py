"""DP class means: one Gaussian mechanism on the whole data set, released before training.

Each example is flattened, scaled to L2 norm at most `clip` (an example with a non-finite entry
counts as the zero vector) and added to its class's row of a [K, d + 1] table whose last column
counts it with weight `count_weight` (κ). Adding or removing one example changes one row by a vector
of norm at most Δ = √(C² + κ²), so Gaussian noise of std z·Δ on every entry is one Gaussian
mechanism with noise multiplier z under add-or-remove-one adjacency; the ledger records it as one
event at rate 1 (`PrivacyLedger.release`). The means are post-processing of the noisy table:
noisy sum / max(noisy count, 1).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfpriv.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class NoisyClassMeans:
    """The release: noisy per-class sums [K, d] and counts [K], and the means they give."""
    sums: np.ndarray
    counts: np.ndarray
    noise_stddev: float  # z * sensitivity, on every entry of sums and (times 1/κ) counts

    @property
    def means(self) -> np.ndarray:
        return self.sums / np.maximum(self.counts, 1.0)[:, None]


def sensitivity(clip: float, count_weight: float) -> float:
    """Δ: the largest L2 change of the [K, d + 1] table when one example is added or removed."""
    return float(np.hypot(clip, count_weight))


def clipped_rows(examples: np.ndarray, clip: float) -> np.ndarray:
    """Every example flattened to float64 and scaled to L2 norm <= `clip`; a non-finite one is zeros."""
    flat = np.asarray(examples, np.float64).reshape(len(examples), -1)
    finite = np.all(np.isfinite(flat), axis=1)
    flat = np.where(finite[:, None], flat, 0.0)
    peak = np.max(np.abs(flat), axis=1, keepdims=True)  # the norm as peak * ||x / peak||: no overflow at 1e300
    scale = np.where(peak > 0, peak, 1.0)
    norms = scale * np.linalg.norm(flat / scale, axis=1, keepdims=True)
    return flat * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


def noisy_class_means(examples: np.ndarray, labels: np.ndarray, num_classes: int, noise_multiplier: float,
                      rng: np.random.Generator, clip: float = 1.0, count_weight: float = 1.0) -> NoisyClassMeans:
    """The Gaussian mechanism above on `examples` [N, ...] with integer `labels` [N] in [0, num_classes)."""
    for name, value in (("clip", clip), ("count_weight", count_weight), ("noise_multiplier", noise_multiplier)):
        if not (np.isfinite(value) and value > 0):
            raise ConfigError(f"{name}: must be positive and finite, got {value}")
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(examples):
        raise ConfigError(f"labels: {len(labels)} labels for {len(examples)} examples")
    if num_classes < 1 or (len(labels) and (labels.min() < 0 or labels.max() >= num_classes)):
        raise ConfigError(f"labels: must lie in [0, num_classes) = [0, {num_classes})")
    rows = clipped_rows(examples, clip)
    sums = np.zeros((num_classes, rows.shape[1]))
    np.add.at(sums, labels.astype(np.int64), rows)
    counts = count_weight * np.bincount(labels.astype(np.int64), minlength=num_classes).astype(np.float64)
    std = noise_multiplier * sensitivity(clip, count_weight)
    return NoisyClassMeans(sums + rng.normal(0.0, std, sums.shape),
                           (counts + rng.normal(0.0, std, num_classes)) / count_weight, std)
