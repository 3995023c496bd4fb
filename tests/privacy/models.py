"""Small deterministic models covering every layer rule, for the engine tests."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

SPEC = TermSpec(sample=("rec", "reg"), batch=("div",))
SAMPLE_ONLY = TermSpec(sample=("rec", "reg"))


def conv_model(seed: int = 0) -> keras.Model:
    """Conv2D -> Conv2DTranspose -> Dense on a rank-3 input -> LayerNorm -> PReLU (fallback) -> Dense."""
    keras.utils.set_random_seed(seed)
    x = keras.Input([6, 6, 2])
    h = keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="tanh")(x)
    h = keras.layers.Conv2D(4, 2, strides=1, padding="valid", activation="tanh")(h)
    h = keras.layers.Conv2DTranspose(2, 3, strides=2, padding="same", activation="tanh")(h)
    h = keras.layers.Conv2DTranspose(2, 2, strides=1, padding="valid")(h)
    h = keras.layers.Reshape([5, 10])(h)
    h = keras.layers.Dense(5, activation="tanh")(h)          # rank-3 input: T = 5 positions
    h = keras.layers.Flatten()(h)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.PReLU(alpha_initializer=keras.initializers.Constant(0.3))(h)  # no fast rule: fallback
    out = keras.layers.Dense(4)(h)
    return keras.Model(x, out)


def mlp_model(seed: int = 0, d_in: int = 7) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input([d_in]),
        keras.layers.Dense(6, activation="tanh"),
        keras.layers.Dense(3),
    ])


def make_loss_fn(model: keras.Model, with_batch_term: bool = True, shared_twice: bool = False):
    """phi_i = ||f(x_i)||^2 + 0.1*sum f(x_i); psi_j = ||mean over partition j of f||^2 * 3."""

    def loss_fn(x, layout: BatchLayout) -> LossTerms:
        z = model(x)
        if shared_twice:  # the same layers applied again to 2 rows per example (example-major)
            twice = tf.reshape(tf.stack([x, 0.5 * x], axis=1), tf.concat([[-1], tf.shape(x)[1:]], 0))
            z2 = tf.reshape(model(twice), [-1, 2, z.shape[-1]])
            z = z + tf.reduce_sum(tf.square(z2), axis=1)
        sample = {"rec": tf.reduce_sum(tf.square(z), axis=1), "reg": 0.1 * tf.reduce_sum(z, axis=1)}
        if not with_batch_term:
            return LossTerms(sample)
        grouped = layout.gather(z)                                  # [P, M, D]
        counts = tf.reduce_sum(layout.mask, axis=1)                 # [P]
        mean = tf.reduce_sum(grouped, axis=1) / tf.maximum(counts, 1.0)[:, None]
        return LossTerms(sample, {"div": 3.0 * tf.reduce_sum(tf.square(mean - 0.3), axis=1) * tf.cast(counts > 0, tf.float32)})

    return loss_fn


def encoder_decoder(seed: int = 0):
    """Two halves, like a VAE: psi will read only the encoder's output."""
    keras.utils.set_random_seed(seed)
    enc = keras.Sequential([keras.Input([7]), keras.layers.Dense(5, activation="tanh"),
                               keras.layers.LayerNormalization(), keras.layers.Dense(3)])
    dec = keras.Sequential([keras.Input([3]), keras.layers.Dense(6, activation="tanh"),
                               keras.layers.Dense(7)])
    return enc, dec


def make_split_loss_fn(enc, dec):
    """phi_i = ||dec(enc(x_i)) - x_i||^2 (all layers); psi_j = ||mean_j enc(x)||^2 (encoder only)."""

    def loss_fn(x, layout: BatchLayout) -> LossTerms:
        z = enc(x)
        rec = tf.reduce_sum(tf.square(dec(z) - x), axis=1)
        grouped = layout.gather(z)
        counts = tf.reduce_sum(layout.mask, axis=1)
        mean = tf.reduce_sum(grouped, axis=1) / tf.maximum(counts, 1.0)[:, None]
        return LossTerms({"rec": rec, "reg": tf.zeros_like(rec)}, {"div": tf.reduce_sum(tf.square(mean + 0.2), axis=1)})

    return loss_fn
