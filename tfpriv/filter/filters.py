"""Generative filters on latent codes: z̃ = z + W [w ; onehot(y)] (paper eq. 49) and a small MLP variant."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras


class LinearFilter(keras.layers.Layer):
    """Linear generative filter z̃ = z + W_w w + W_y onehot(y), w ~ N(0, I_noise_dim).

    `noise_matrix` (W_w, [D, noise_dim]) and `label_matrix` (W_y, [D, K]) are in the paper's
    column convention; together they form W = [W_w W_y] ∈ R^{D×(noise_dim+K)}."""

    def __init__(self, latent_dim: int, num_private_classes: int, noise_dim: int | None = None,
                 init_scale: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.latent_dim = int(latent_dim)
        self.num_private_classes = int(num_private_classes)
        self.noise_dim = int(noise_dim or latent_dim)
        std = init_scale / np.sqrt(self.latent_dim)
        # Row convention internally: z̃ = z + w @ Wn + e @ Wy.
        self.w_noise = self.add_weight(name="w_noise", shape=(self.noise_dim, self.latent_dim),
                                       initializer=keras.initializers.RandomNormal(stddev=std))
        self.w_label = self.add_weight(name="w_label", shape=(self.num_private_classes, self.latent_dim),
                                       initializer=keras.initializers.RandomNormal(stddev=std))

    @property
    def noise_matrix(self) -> np.ndarray:
        return self.w_noise.numpy().T

    @property
    def label_matrix(self) -> np.ndarray:
        return self.w_label.numpy().T

    def call(self, z, y_onehot, noise=None):
        if noise is None:
            noise = tf.random.normal((tf.shape(z)[0], self.noise_dim), dtype=z.dtype)
        return z + tf.matmul(noise, self.w_noise) + tf.matmul(y_onehot, self.w_label)


class MLPFilter(keras.layers.Layer):
    """Nonlinear filter z̃ = z + g([z; w; onehot(y)]) with g one ELU hidden layer (paper footnote 2).
    Its release depends on z, so the linear filter's RDP formula does not apply to it."""

    def __init__(self, latent_dim: int, num_private_classes: int, noise_dim: int | None = None,
                 hidden: int = 32, **kwargs):
        super().__init__(**kwargs)
        self.latent_dim = int(latent_dim)
        self.num_private_classes = int(num_private_classes)
        self.noise_dim = int(noise_dim or latent_dim)
        self.hidden = keras.layers.Dense(hidden, activation="elu")
        self.out = keras.layers.Dense(self.latent_dim,
                                         kernel_initializer=keras.initializers.RandomNormal(stddev=0.01))
        self.hidden.build((None, self.latent_dim + self.noise_dim + self.num_private_classes))
        self.out.build((None, hidden))

    def call(self, z, y_onehot, noise=None):
        if noise is None:
            noise = tf.random.normal((tf.shape(z)[0], self.noise_dim), dtype=z.dtype)
        return z + self.out(self.hidden(tf.concat([z, noise, y_onehot], axis=-1)))


def build_filter(kind: str, latent_dim: int, num_private_classes: int, noise_dim: int | None = None):
    """'linear' or 'mlp' filter layer."""
    from tfpriv.errors import UsageError
    if kind == "linear":
        return LinearFilter(latent_dim, num_private_classes, noise_dim)
    if kind == "mlp":
        return MLPFilter(latent_dim, num_private_classes, noise_dim)
    raise UsageError(f"--filter_type: must be 'linear' or 'mlp', got {kind!r}")
