"""Cluster purity of latent codes against a mixture prior's components (pinwheel experiment)."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from tfpriv.errors import UsageError


def cluster_purity(codes: np.ndarray, labels: np.ndarray, component_means: np.ndarray) -> float:
    """Fraction of codes whose nearest prior component is matched to their true label.

    Each code goes to its nearest component mean (Euclidean); components and labels are then
    matched one-to-one to maximise agreement (Hungarian algorithm, `linear_sum_assignment`),
    so the score does not depend on how components are numbered. With more labels than
    components (or the reverse) the unmatched ones count as errors.
    """
    codes = np.asarray(codes, dtype=np.float64)
    labels = np.asarray(labels)
    means = np.asarray(component_means, dtype=np.float64)
    if codes.ndim != 2 or len(codes) == 0:
        raise UsageError(f"codes: expected a non-empty array [n, D], got shape {codes.shape}")
    if labels.shape != (len(codes),):
        raise UsageError(f"labels: expected shape [{len(codes)}], got {labels.shape}")
    if means.ndim != 2 or means.shape[1] != codes.shape[1]:
        raise UsageError(f"component_means: expected shape [K, {codes.shape[1]}], got {means.shape}")
    sq_dist = np.square(codes[:, None, :] - means[None, :, :]).sum(-1)
    assigned = sq_dist.argmin(axis=1)
    label_values, label_idx = np.unique(labels, return_inverse=True)
    counts = np.zeros((len(means), len(label_values)), dtype=np.int64)
    np.add.at(counts, (assigned, label_idx), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / len(codes))
