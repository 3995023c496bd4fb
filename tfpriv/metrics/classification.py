"""Classification metrics for the privacy filter and downstream evaluations.

`knn_mutual_information` estimates I(Z; Y) between a continuous code vector Z and a discrete
label Y with Ross (2014)'s nearest-neighbour estimator applied to the whole vector.
scikit-learn's `mutual_info_classif` runs the same estimator on one feature at a time; its
per-feature values neither sum nor max to I(Z; Y) for a vector Z.
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KDTree, NearestNeighbors

from tfpriv.errors import UsageError


def _labels(y: np.ndarray, name: str, n: int | None = None) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or len(y) == 0:
        raise UsageError(f"{name}: expected a non-empty vector [n], got shape {y.shape}")
    if n is not None and len(y) != n:
        raise UsageError(f"{name}: expected {n} entries, got {len(y)}")
    return y


def accuracy(y_true: np.ndarray, y_pred_labels: np.ndarray) -> float:
    """Fraction of predicted labels equal to the true labels."""
    y_true = _labels(y_true, "y_true")
    y_pred = _labels(y_pred_labels, "y_pred_labels", len(y_true))
    return float(np.mean(y_true == y_pred))


def auroc(y_true: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve.

    Binary: labels in {0, 1}, scores [n] (higher = class 1) or [n, 2] (column 1 is used).
    Multiclass: integer labels 0..C-1, scores [n, C] (probabilities or logits; only the
    ranking within each column matters), one-vs-rest AUROC per class, macro-averaged.
    A class absent from y_true has no ROC curve and is skipped.
    """
    y_true = _labels(y_true, "y_true")
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1 or (scores.ndim == 2 and scores.shape[1] == 2):
        s = scores if scores.ndim == 1 else scores[:, 1]
        if len(s) != len(y_true):
            raise UsageError(f"scores: expected {len(y_true)} rows, got {len(s)}")
        if not np.all(np.isin(y_true, (0, 1))):
            raise UsageError(f"y_true: binary AUROC needs labels in {{0, 1}}, got {np.unique(y_true)[:10]}")
        if len(np.unique(y_true)) < 2:
            raise UsageError("y_true: AUROC needs both classes present")
        return float(roc_auc_score(y_true, s))
    if scores.ndim != 2 or len(scores) != len(y_true):
        raise UsageError(f"scores: expected shape [{len(y_true)}] or [{len(y_true)}, C], got {scores.shape}")
    num_classes = scores.shape[1]
    if not np.all(np.isin(y_true, np.arange(num_classes))):
        raise UsageError(f"y_true: labels must be integers in [0, {num_classes}), got {np.unique(y_true)[:10]}")
    per_class = [roc_auc_score(y_true == c, scores[:, c])
                 for c in range(num_classes) if 0 < np.sum(y_true == c) < len(y_true)]
    if not per_class:
        raise UsageError("y_true: AUROC needs at least two classes present")
    return float(np.mean(per_class))


def knn_mutual_information(codes: np.ndarray, labels: np.ndarray, n_neighbors: int = 3, seed: int = 0) -> float:
    """I(Z; Y) in nats for continuous codes [n, D] and a discrete label [n] (Ross 2014).

    `I = psi(N) + <psi(k)> - <psi(N_y)> - <psi(m)>`, where for each point the radius is the
    distance to its k-th nearest neighbour with the same label and m counts all points within
    that radius (max-norm on the whole vector). As in scikit-learn: each dimension is scaled
    to unit std, tiny noise (seeded) breaks ties, points whose label is unique are dropped,
    and a negative estimate is reported as 0. For D = 1 it equals `mutual_info_classif`.
    """
    z = np.array(codes, dtype=np.float64)
    if z.ndim == 1:
        z = z[:, None]
    if z.ndim != 2 or len(z) == 0:
        raise UsageError(f"codes: expected a non-empty array [n, D], got shape {z.shape}")
    y = _labels(labels, "labels", len(z))
    if n_neighbors < 1:
        raise UsageError(f"n_neighbors: must be >= 1, got {n_neighbors}")
    std = z.std(axis=0)
    z /= np.where(std > 0, std, 1.0)
    rng = np.random.default_rng(seed)
    z += 1e-10 * np.maximum(1.0, np.abs(z).mean(axis=0)) * rng.standard_normal(z.shape)

    radius = np.zeros(len(z))
    label_counts = np.zeros(len(z))
    k_all = np.zeros(len(z))
    for label in np.unique(y):
        mask = y == label
        count = int(mask.sum())
        label_counts[mask] = count
        if count > 1:
            k = min(n_neighbors, count - 1)
            nn = NearestNeighbors(n_neighbors=k, metric="chebyshev").fit(z[mask])
            dist = nn.kneighbors()[0][:, -1]
            # strictly inside the k-th neighbour's distance; the point itself is counted,
            # so m includes the k-th neighbour (Ross's m_i) but not points tied with it
            radius[mask] = np.nextafter(dist, 0)
            k_all[mask] = k
    keep = label_counts > 1
    if keep.sum() < 2:
        raise UsageError("labels: need at least one label value that occurs twice")
    z, radius, label_counts, k_all = z[keep], radius[keep], label_counts[keep], k_all[keep]
    m_all = KDTree(z, metric="chebyshev").query_radius(z, radius, count_only=True)
    mi = digamma(len(z)) + np.mean(digamma(k_all)) - np.mean(digamma(label_counts)) - np.mean(digamma(m_all))
    return float(max(0.0, mi))
