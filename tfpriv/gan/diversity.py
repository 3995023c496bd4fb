"""The mode-seeking term of Mao et al. 2019 ("Mode Seeking GANs", eq. 3), per pair of fakes.

Two fakes of the same label from latents z_a, z_b: the generator maximises
    ratio = mean_pixels |G(z_a) - G(z_b)| / mean |z_a - z_b|,
by minimising 1 / (ratio + eps), so that distinct latents give distinct images of one class
(a conditional generator that collapses within a class has ratio -> 0). It is a loss of the
generator alone, on fresh latents: post-processing of the private critic, no privacy cost.
MSGAN's code divides batch means; here each pair has its own ratio, so the loss is a sum
over pairs (rows split across replicas add up to the one-device loss).
"""
from __future__ import annotations

import tensorflow as tf

EPS = 1e-5


def mode_seeking_ratio(fake_a: tf.Tensor, fake_b: tf.Tensor, latent_a: tf.Tensor, latent_b: tf.Tensor) -> tf.Tensor:
    """mean|fake_a_i - fake_b_i| / mean|latent_a_i - latent_b_i| per pair i [P]."""
    image = tf.reduce_mean(tf.abs(tf.reshape(fake_a - fake_b, [tf.shape(fake_a)[0], -1])), axis=1)
    latent = tf.reduce_mean(tf.abs(latent_a - latent_b), axis=1)
    return image / latent


def mode_seeking_loss(ratio: tf.Tensor) -> tf.Tensor:
    """1 / (ratio + eps) per pair [P]: the term the generator minimises."""
    return 1.0 / (ratio + EPS)
