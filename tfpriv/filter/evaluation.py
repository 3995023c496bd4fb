"""Stage 3: fresh adaptive classifiers on privatized codes, accuracy/AUROC, k-NN mutual information.

Classifiers are trained on privatized TRAIN codes and scored on privatized TEST codes. Metric
functions come from `tfpriv.metrics.classification` when that module is present; otherwise the
private fallbacks below (same definitions) are used and `metrics_source()` says so.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf
from scipy.special import digamma
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KDTree, NearestNeighbors

from tfpriv.filter.architectures import build_classifier


def _accuracy(labels: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.asarray(predicted) == np.asarray(labels)))


def _auroc(labels: np.ndarray, probs: np.ndarray) -> float:
    """Binary: AUROC of p(class 1); multiclass: macro one-vs-rest AUROC."""
    labels = np.asarray(labels)
    if probs.shape[1] == 2:
        return float(roc_auc_score(labels, probs[:, 1]))
    present = np.unique(labels)
    scores = [roc_auc_score(labels == c, probs[:, c]) for c in present if 0 < np.mean(labels == c) < 1]
    return float(np.mean(scores))


def _knn_mutual_information(codes: np.ndarray, labels: np.ndarray, k: int = 3, seed: int = 0,
                            max_points: int = 5000) -> float:
    """I(codes; labels) in nats for continuous codes and a discrete label: the k-NN estimator of
    Ross (2014) (the mixed-pair form of Gao et al. 2015/2017):
    I = ψ(N) + ψ(k) − ⟨ψ(N_y)⟩ − ⟨ψ(m_i)⟩, m_i = #points within the distance to the k-th
    same-label neighbour. Classes with <= k points are dropped; large inputs are subsampled."""
    codes = np.asarray(codes, np.float64).reshape(len(codes), -1)
    labels = np.asarray(labels)
    if len(codes) > max_points:
        idx = np.random.default_rng(seed).choice(len(codes), max_points, replace=False)
        codes, labels = codes[idx], labels[idx]
    radius = np.empty(len(codes))
    counts = np.empty(len(codes))
    keep = np.zeros(len(codes), bool)
    for c in np.unique(labels):
        mask = labels == c
        nc = int(mask.sum())
        if nc <= k:
            continue
        dist, _ = NearestNeighbors(n_neighbors=k + 1).fit(codes[mask]).kneighbors(codes[mask])
        radius[mask] = np.nextafter(dist[:, -1], 0)
        counts[mask] = nc
        keep |= mask
    codes, radius, counts = codes[keep], radius[keep], counts[keep]
    m = KDTree(codes).query_radius(codes, radius, count_only=True)
    mi = digamma(len(codes)) + digamma(k) - np.mean(digamma(counts)) - np.mean(digamma(m))
    return float(max(mi, 0.0))


try:  # the project's metrics module (written concurrently); fall back to the private helpers
    from tfpriv.metrics import classification as _project_metrics
    accuracy = _project_metrics.accuracy
    auroc = _project_metrics.auroc
    knn_mutual_information = _project_metrics.knn_mutual_information
    _SOURCE = "tfpriv.metrics.classification"
except (ImportError, AttributeError):  # pragma: no cover - depends on the other engineer's module
    accuracy, auroc, knn_mutual_information = _accuracy, _auroc, _knn_mutual_information
    _SOURCE = "tfpriv.filter.evaluation (private fallback)"


def metrics_source() -> str:
    return _SOURCE


def mutual_information(codes: np.ndarray, labels: np.ndarray, max_points: int = 5000, seed: int = 0) -> float:
    """k-NN I(codes; labels) in nats on at most `max_points` (seeded subsample) for speed."""
    codes, labels = np.asarray(codes), np.asarray(labels)
    if len(codes) > max_points:
        idx = np.random.default_rng(seed).choice(len(codes), max_points, replace=False)
        codes, labels = codes[idx], labels[idx]
    return knn_mutual_information(codes, labels)


def train_classifier(model: tf.keras.Model, x: np.ndarray, y: np.ndarray, epochs: int = 30,
                     batch_size: int = 128, learning_rate: float = 1e-3, min_steps: int = 3000) -> tf.keras.Model:
    """Adam on sparse cross-entropy, all epochs inside one compiled loop (shuffled, remainder dropped).
    Runs at least `min_steps` updates (more epochs on small data) so small sets are not undertrained."""
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
    y = tf.convert_to_tensor(np.asarray(y), tf.int32)
    opt = tf.keras.optimizers.Adam(learning_rate)
    opt.build(model.trainable_variables)
    bs = min(batch_size, int(x.shape[0]))
    epochs = max(int(epochs), -(-min_steps // max(int(x.shape[0]) // bs, 1)))

    @tf.function
    def run():
        n = tf.shape(x)[0]
        for _ in tf.range(epochs):
            perm = tf.random.shuffle(tf.range(n))
            for s in tf.range(n // bs):
                idx = perm[s * bs:(s + 1) * bs]
                with tf.GradientTape() as tape:
                    logits = model(tf.gather(x, idx), training=True)
                    loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                        tf.gather(y, idx), logits, from_logits=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
    run()
    return model


def predict_proba(model: tf.keras.Model, x: np.ndarray) -> np.ndarray:
    return tf.nn.softmax(model(tf.convert_to_tensor(np.asarray(x, np.float32)))).numpy()


def evaluate_release(train_codes: np.ndarray, test_codes: np.ndarray,
                     train_labels: Mapping[str, np.ndarray], test_labels: Mapping[str, np.ndarray],
                     num_classes: Mapping[str, int], classifier_kind: str = "mlp", epochs: int = 30,
                     batch_size: int = 128, learning_rate: float = 1e-3,
                     min_steps: int = 3000) -> dict[str, dict[str, float]]:
    """{label name: {accuracy, auroc}} of a fresh classifier per label, train -> test."""
    out = {}
    for name, y_train in train_labels.items():
        clf = build_classifier(train_codes.shape[1], num_classes[name], classifier_kind)
        train_classifier(clf, train_codes, y_train, epochs, batch_size, learning_rate, min_steps)
        probs = predict_proba(clf, test_codes)
        y = np.asarray(test_labels[name])
        out[name] = {"accuracy": accuracy(y, np.argmax(probs, axis=1)), "auroc": auroc(y, probs)}
    return out
