"""Per-dataset stage-1 encoder/decoder builders, stage-2/3 classifiers and the robust-decoder term.

Encoders map x -> [B, 2*D] (mean ‖ logvar); decoders map z [B, D] -> x-shaped output (logits for a
Bernoulli likelihood, means for a Gaussian one), the contract of `tfpriv.privae.vae.VAE`.
Sizes follow paper 001 §6.7.1 (MNIST 10-d, Adult 10-d with two FC + ELU, Abalone 4-d single linear
layer, CelebA 64x64x3 -> 100 = 50 mean / 50 logvar with a DenseNet-style encoder).
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError

LATENT_DIMS = {"mnist": 10, "adult": 10, "abalone": 4, "celeba": 50}


def build_mnist_encoder(latent_dim: int = 10, hidden: Sequence[int] = (512, 256)) -> keras.Model:
    """28x28x1 image -> [B, 2*latent_dim] through fully connected ReLU layers."""
    x = inp = keras.Input((28, 28, 1))
    x = keras.layers.Flatten()(x)
    for h in hidden:
        x = keras.layers.Dense(h, activation="relu")(x)
    out = keras.layers.Dense(2 * latent_dim)(x)
    return keras.Model(inp, out, name="mnist_encoder")


def build_mnist_decoder(latent_dim: int = 10, hidden: Sequence[int] = (256, 512)) -> keras.Model:
    """z -> Bernoulli logits [B, 28, 28, 1]."""
    x = inp = keras.Input((latent_dim,))
    for h in hidden:
        x = keras.layers.Dense(h, activation="relu")(x)
    x = keras.layers.Dense(784)(x)
    out = keras.layers.Reshape((28, 28, 1))(x)
    return keras.Model(inp, out, name="mnist_decoder")


def build_adult_encoder(num_features: int, latent_dim: int = 10, hidden: int = 64) -> keras.Model:
    """Tabular features -> [B, 2*latent_dim] with two FC + ELU layers (paper §6.7.1)."""
    x = inp = keras.Input((num_features,))
    x = keras.layers.Dense(hidden, activation="elu")(x)
    x = keras.layers.Dense(hidden, activation="elu")(x)
    out = keras.layers.Dense(2 * latent_dim)(x)
    return keras.Model(inp, out, name="adult_encoder")


def build_adult_decoder(num_features: int, latent_dim: int = 10, hidden: int = 64) -> keras.Model:
    """z -> Gaussian means [B, num_features] with two FC + ELU layers."""
    x = inp = keras.Input((latent_dim,))
    x = keras.layers.Dense(hidden, activation="elu")(x)
    x = keras.layers.Dense(hidden, activation="elu")(x)
    out = keras.layers.Dense(num_features)(x)
    return keras.Model(inp, out, name="adult_decoder")


def build_abalone_encoder(num_features: int = 7, latent_dim: int = 4) -> keras.Model:
    """A single linear layer 7 -> 2*4 (paper §6.7.1)."""
    inp = keras.Input((num_features,))
    out = keras.layers.Dense(2 * latent_dim)(inp)
    return keras.Model(inp, out, name="abalone_encoder")


def build_abalone_decoder(num_features: int = 7, latent_dim: int = 4) -> keras.Model:
    """A single linear layer 4 -> 7 (Gaussian means)."""
    inp = keras.Input((latent_dim,))
    out = keras.layers.Dense(num_features)(inp)
    return keras.Model(inp, out, name="abalone_decoder")


def _dense_block(x: tf.Tensor, layers: int, growth: int) -> tf.Tensor:
    for _ in range(layers):
        y = keras.layers.BatchNormalization()(x)
        y = keras.layers.ReLU()(y)
        y = keras.layers.Conv2D(4 * growth, 1, use_bias=False)(y)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.ReLU()(y)
        y = keras.layers.Conv2D(growth, 3, padding="same", use_bias=False)(y)
        x = keras.layers.Concatenate()([x, y])
    return x


def _transition(x: tf.Tensor) -> tf.Tensor:
    channels = int(x.shape[-1]) // 2
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(channels, 1, use_bias=False)(x)
    return keras.layers.AveragePooling2D(2)(x)


def build_celeba_encoder(latent_dim: int = 50, growth: int = 12, layers_per_block: int = 12,
                         image_size: int = 64) -> keras.Model:
    """DenseNet-style encoder (paper Table 6): 3x3 stem, 3 dense blocks with 1x1-bottleneck/3x3
    layers, halving transitions with 2x2 average pooling, batch norm and a 2*latent_dim FC output
    (default 100 = 50 mean / 50 logvar)."""
    x = inp = keras.Input((image_size, image_size, 3))
    x = keras.layers.Conv2D(2 * growth, 3, strides=2, padding="same", use_bias=False)(x)
    for block in range(3):
        x = _dense_block(x, layers_per_block, growth)
        x = _transition(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(2 * latent_dim)(x)
    return keras.Model(inp, out, name="celeba_encoder")


def build_celeba_decoder(latent_dim: int = 50, base_channels: int = 256,
                         image_size: int = 64) -> keras.Model:
    """Transposed-conv decoder (paper Table 7): FC 4096 -> 4x4x256, four 3x3 stride-2 transposed
    convolutions (ReLU + batch norm) to 64x64, a 5x5 stride-1 transposed conv to 3 channels
    (Gaussian means, sigmoid-squashed to [0, 1])."""
    side = image_size // 16
    x = inp = keras.Input((latent_dim,))
    x = keras.layers.Dense(side * side * base_channels)(x)
    x = keras.layers.Reshape((side, side, base_channels))(x)
    channels = base_channels
    for _ in range(4):
        channels = max(channels // 2, 16)
        x = keras.layers.Conv2DTranspose(channels, 3, strides=2, padding="same")(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.BatchNormalization()(x)
    out = keras.layers.Conv2DTranspose(3, 5, strides=1, padding="same", activation="sigmoid")(x)
    return keras.Model(inp, out, name="celeba_decoder")


def build_vae_networks(dataset: str, input_shape: Sequence[int],
                       latent_dim: int | None = None) -> tuple[keras.Model, keras.Model]:
    """(encoder, decoder) for a dataset name; latent_dim defaults to the paper's."""
    d = latent_dim or LATENT_DIMS.get(dataset)
    if dataset == "mnist":
        return build_mnist_encoder(d), build_mnist_decoder(d)
    if dataset == "adult":
        return build_adult_encoder(int(input_shape[-1]), d), build_adult_decoder(int(input_shape[-1]), d)
    if dataset == "abalone":
        return build_abalone_encoder(int(input_shape[-1]), d), build_abalone_decoder(int(input_shape[-1]), d)
    if dataset == "celeba":
        return build_celeba_encoder(d, image_size=int(input_shape[0])), build_celeba_decoder(d, image_size=int(input_shape[0]))
    raise UsageError(f"--dataset: the filter has no architecture for {dataset!r}")


def build_classifier(input_dim: int, num_classes: int, kind: str = "mlp", hidden: int = 64,
                     name: str | None = None) -> keras.Model:
    """Adversary/utility classifier on latent codes, returning logits.

    kind="mlp": two FC layers with an ELU between (MNIST, CelebA); kind="linear": one FC layer
    (Adult, Abalone), paper §6.7.3."""
    inp = keras.Input((input_dim,))
    if kind == "mlp":
        x = keras.layers.Dense(hidden, activation="elu")(inp)
        out = keras.layers.Dense(num_classes)(x)
    elif kind == "linear":  # zero init: a convex problem, start from the uninformed classifier
        out = keras.layers.Dense(num_classes, kernel_initializer="zeros")(inp)
    else:
        raise UsageError(f"classifier kind: must be 'mlp' or 'linear', got {kind!r}")
    return keras.Model(inp, out, name=name)


CLASSIFIER_KIND = {"mnist": "mlp", "celeba": "mlp", "adult": "linear", "abalone": "linear"}


def make_lipschitz_decoder_term(weight: float = 1.0, eps: float = 1e-6) -> Callable:
    """Robust-decoder term of paper eq. 14 as a per-example function for `VAE(extra_sample_terms=...)`.

    Interpretation (the paper's formula was lost in extraction): with z' ~ N(0, I) and t ~ U(0, 1),
    z_t = t·z + (1−t)·z' lies between the encoder's code z and the prior. We penalise the squared
    finite-difference Lipschitz quotient of the decoder mean between z and z_t,
        weight · ‖dec(z_t) − dec(z)‖² / (‖z_t − z‖² + eps),
    so that latent perturbations (like the filter's) give proportionally small output changes.
    Returns a [B] tensor (added to each example's loss)."""
    def term(vae, x, z):
        del x
        z_prior = vae.rng.normal(tf.shape(z), dtype=z.dtype)  # the model's checkpointed training stream
        t = vae.rng.uniform((tf.shape(z)[0], 1), dtype=z.dtype)
        z_t = t * z + (1.0 - t) * z_prior
        out_z = tf.reshape(vae.decode(z), (tf.shape(z)[0], -1))
        out_t = tf.reshape(vae.decode(z_t), (tf.shape(z)[0], -1))
        num = tf.reduce_sum(tf.square(out_t - out_z), axis=1)
        den = tf.reduce_sum(tf.square(z_t - z), axis=1) + eps
        return weight * num / den
    return term


lipschitz_decoder_term = make_lipschitz_decoder_term(1.0)
