"""A warm start for the DP GAN (issue #47.8; DP-FETA's central images, applied to a generator).

Before its first critic step a run spends a small epsilon on DP class means of its training images
(`tfpriv.privacy.class_means`: images clipped to L2 norm 1, one Gaussian mechanism recorded in the
run's ledger as a release) and pretrains the generator to draw each class's noisy mean. The
pretraining reads only the noisy means: post-processing, no further privacy cost. It aims at the
start-up collapse (blank images) the critic otherwise spends its first few hundred steps leaving.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.accounting import PrivacyLedger
from tfpriv.privacy.class_means import noisy_class_means
from tfpriv.privacy.rng import release_generator

RELEASE = "class_means"  # the ledger's name of the release
CLIP = 1.0  # every image scaled to L2 norm <= 1: each contributes its direction
COUNT_WEIGHT = 1.0  # the count column's weight (κ): sensitivity sqrt(2)
LEARNING_RATE = 1e-3
BATCH_SIZE = 128


def pretraining_targets(means: np.ndarray, image_shape: tuple[int, ...]) -> np.ndarray:
    """Images [K, *image_shape] in [0, 1] from noisy class means of unit-norm images: negative
    pixels set to 0, each class scaled to a maximum pixel of 1 (post-processing of the release)."""
    positive = np.maximum(means, 0.0)
    peak = positive.max(axis=1, keepdims=True)
    return (positive / np.where(peak > 0, peak, 1.0)).reshape(len(means), *image_shape).astype(np.float32)


def pretrain_generator(generator: keras.Model, targets: np.ndarray, steps: int, seed: int) -> float:
    """Fits `generator` to draw target[c] for label c (a single target: unconditional) from any latent,
    by `steps` Adam steps on the mean squared error; returns the last step's loss."""
    conditional = len(generator.inputs) > 1
    latent_size = int(generator.inputs[0].shape[-1])
    optimizer = keras.optimizers.Adam(LEARNING_RATE)
    rng = np.random.default_rng(seed)
    images = tf.constant(targets)

    @tf.function
    def step(latent, labels):
        with tf.GradientTape() as tape:
            fake = generator([latent, labels] if conditional else latent, training=True)
            loss = tf.reduce_mean(tf.square(fake - tf.gather(images, labels)))
        optimizer.apply_gradients(zip(tape.gradient(loss, generator.trainable_variables),
                                      generator.trainable_variables))
        return loss

    loss = np.nan
    for _ in range(steps):
        labels = rng.integers(0, len(targets), BATCH_SIZE).astype(np.int32)
        loss = step(rng.standard_normal((BATCH_SIZE, latent_size)).astype(np.float32), labels)
    return float(loss)


def class_means_warm_start(images: np.ndarray, labels: np.ndarray | None, num_classes: int | None,
                           generator: keras.Model, steps: int, seed: int | None,
                           pretraining_seed: int) -> Callable[[PrivacyLedger, Mapping[str, float]], None]:
    """`fit_private`'s `make_releases` for the warm start: releases the class means of `images`
    (one class when `labels` is None) at the planned noise multiplier, records the release, then
    pretrains `generator` for `steps` steps. The noise comes from (seed, "release") (the OS when
    seed is None); `pretraining_seed` only draws the pretraining's latents and labels."""
    def make(ledger: PrivacyLedger, pending: Mapping[str, float]) -> None:
        noise = pending[RELEASE]
        classes = num_classes or 1
        y = np.zeros(len(images), np.int64) if labels is None else labels
        release = noisy_class_means(images, y, classes, noise, release_generator(seed, RELEASE),
                                    clip=CLIP, count_weight=COUNT_WEIGHT)
        ledger.release(RELEASE, noise)
        pretrain_generator(generator, pretraining_targets(release.means, images.shape[1:]), steps, pretraining_seed)

    return make
