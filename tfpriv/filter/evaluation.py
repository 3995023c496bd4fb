"""Stage 3: fresh adaptive classifiers on privatized codes, accuracy/AUROC, k-NN mutual information.

Classifiers are trained on privatized TRAIN codes and scored on privatized TEST codes. The metrics
are the project's (`tfpriv.metrics.classification`): `accuracy`, `auroc` (binary, or macro
one-vs-rest) and `knn_mutual_information`, Ross (2014)'s k-NN estimator of I(Z; Y) for a
continuous code vector Z and a discrete label Y (k = 3 neighbours, max-norm on the whole vector,
each dimension scaled to unit std and ties broken by seeded noise, as scikit-learn does per
feature; negative estimates reported as 0).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.filter.architectures import build_classifier
from tfpriv.metrics.classification import accuracy, auroc, knn_mutual_information

METRICS_SOURCE = "tfpriv.metrics.classification (accuracy, auroc, knn_mutual_information: Ross 2014, k=3)"


def mutual_information(codes: np.ndarray, labels: np.ndarray, max_points: int = 5000, seed: int = 0) -> float:
    """I(codes; labels) in nats by `knn_mutual_information` (Ross 2014, k = 3) on at most `max_points`
    (a seeded subsample, for speed)."""
    codes, labels = np.asarray(codes), np.asarray(labels)
    if len(codes) > max_points:
        idx = np.random.default_rng(seed).choice(len(codes), max_points, replace=False)
        codes, labels = codes[idx], labels[idx]
    return knn_mutual_information(codes, labels)


def train_classifier(model: keras.Model, x: np.ndarray, y: np.ndarray, epochs: int = 30,
                     batch_size: int = 128, learning_rate: float = 1e-3, min_steps: int = 3000) -> keras.Model:
    """Adam on sparse cross-entropy, all epochs inside one compiled loop (shuffled, remainder dropped).
    Runs at least `min_steps` updates (more epochs on small data) so small sets are not undertrained."""
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
    y = tf.convert_to_tensor(np.asarray(y), tf.int32)
    opt = keras.optimizers.Adam(learning_rate)
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
                    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                        tf.gather(y, idx), logits, from_logits=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
    run()
    return model


def predict_proba(model: keras.Model, x: np.ndarray) -> np.ndarray:
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
