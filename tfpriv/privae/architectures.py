"""Built-in encoders/decoders. Encoders map x -> [B, 2D] (mean ‖ log-variance); decoders map
z [B, D] -> logits (Bernoulli images) or means (Gaussian data) shaped like x.

Every layer here has a fast clipping rule (Dense, Conv2D, Conv2DTranspose), so private
training never falls back to per-example Jacobians.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError

L = keras.layers
CONV_ENCODER_UNITS = 256


def conv_encoder_28(latent_dim: int = 50, input_shape=(28, 28, 1), units: int = CONV_ENCODER_UNITS) -> keras.Model:
    """Conv encoder for 28x28 images, in the style of Mathieu et al. 2019's Fashion-MNIST net
    (strided 4x4 convolutions, one hidden FC layer of `units`). That layer holds most of the weights
    (3136 x 256 of 862,148 at latent_dim 50), so `units` sets the norm of the DP noise on the encoder."""
    x = keras.Input(input_shape)
    h = L.Conv2D(32, 4, strides=2, padding="same", activation="relu")(x)     # 14x14
    h = L.Conv2D(64, 4, strides=2, padding="same", activation="relu")(h)     # 7x7
    h = L.Flatten()(h)
    h = L.Dense(units, activation="relu")(h)
    return keras.Model(x, L.Dense(2 * latent_dim)(h), name="conv_encoder")


def conv_decoder_28(latent_dim: int = 50, channels: int = 1) -> keras.Model:
    z = keras.Input([latent_dim])
    h = L.Dense(256, activation="relu")(z)
    h = L.Dense(7 * 7 * 64, activation="relu")(h)
    h = L.Reshape([7, 7, 64])(h)
    h = L.Conv2DTranspose(32, 4, strides=2, padding="same", activation="relu")(h)   # 14x14
    out = L.Conv2DTranspose(channels, 4, strides=2, padding="same")(h)               # 28x28 logits
    return keras.Model(z, out, name="conv_decoder")


def mlp_encoder(input_shape: Sequence[int], latent_dim: int, hidden: Sequence[int] = (256, 128),
                activation: str = "relu") -> keras.Model:
    x = keras.Input(tuple(input_shape))
    h = L.Flatten()(x) if len(input_shape) > 1 else x
    for width in hidden:
        h = L.Dense(width, activation=activation)(h)
    return keras.Model(x, L.Dense(2 * latent_dim)(h), name="mlp_encoder")


def mlp_decoder(latent_dim: int, output_shape: Sequence[int], hidden: Sequence[int] = (128, 256),
                activation: str = "relu") -> keras.Model:
    z = keras.Input([latent_dim])
    h = z
    for width in hidden:
        h = L.Dense(width, activation=activation)(h)
    out = L.Dense(int(np.prod(output_shape)))(h)
    if len(output_shape) > 1:
        out = L.Reshape(tuple(output_shape))(out)
    return keras.Model(z, out, name="mlp_decoder")


@keras.utils.register_keras_serializable(package="tfpriv")
class Shift(L.Layer):
    """Adds a fixed vector (no trainable variables): places the origin of a pinwheel net at `offset`."""

    def __init__(self, offset: Sequence[float], **kwargs):
        super().__init__(**kwargs)
        self.offset = [float(v) for v in offset]

    def call(self, inputs):
        return inputs + tf.constant(self.offset, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "offset": self.offset}


@keras.utils.register_keras_serializable(package="tfpriv")
class FixedStd(L.Layer):
    """Posterior means [B, D] -> mean ‖ log-variance [B, 2D] with every std fixed at `std` (no variables)."""

    def __init__(self, std: float, **kwargs):
        super().__init__(**kwargs)
        self.std = float(std)

    def call(self, inputs):
        return tf.concat([inputs, tf.fill(tf.shape(inputs), tf.cast(2.0 * np.log(self.std), inputs.dtype))], -1)

    def get_config(self):
        return {**super().get_config(), "std": self.std}


PINWHEEL_ANCHORS = ("none", "decoder", "both", "odd")


def pinwheel_nets(input_shape: Sequence[int], latent_dim: int, hidden: Sequence[int], anchor: str = "none",
                  centre=None, posterior_std: float | None = None) -> tuple[keras.Model, keras.Model]:
    """Tanh FC encoder/decoder for 2-D points, the decoder mirroring the encoder's widths.

    Default (`anchor` none, no `posterior_std`): `mlp_encoder`/`mlp_decoder` with tanh units.
    `anchor` ties the nets to `centre` (the prior's mean, a public constant), so a common shift
    of all codes, which the plain nets' reconstruction cannot see, is no longer free:
      `decoder`: the decoder reads z - centre through hidden layers without biases, i.e. it is odd
        about the centre up to its output bias (the pinwheel is symmetric under x -> -x); the
        encoder keeps its biases (its means start at the centre), so it can still map every
        point to one code.
      `both`: the encoder too has no biases but its log-variance head's, its means offset by the
        centre: x = 0 is encoded at the centre exactly and opposite points at mirrored codes.
      `odd`: as `both`, but the encoder's means are offset by a trainable bias started at the centre:
        opposite points still get mirrored codes, about that offset, and the encoder can send every
        point to one code (zero output weights, the offset at a prior component), as the plain nets can.
    `posterior_std`: the encoder outputs means only and every posterior std is this constant.
    """
    if anchor == "none" and posterior_std is None:
        return (mlp_encoder(input_shape, latent_dim, hidden=hidden, activation="tanh"),
                mlp_decoder(latent_dim, input_shape, hidden=hidden[::-1], activation="tanh"))
    enc_bias, dec_bias = anchor not in ("both", "odd"), anchor == "none"
    x = keras.Input(tuple(input_shape))
    h = L.Flatten()(x) if len(input_shape) > 1 else x
    for width in hidden:
        h = L.Dense(width, activation="tanh", use_bias=enc_bias)(h)
    start = "zeros" if anchor == "none" else keras.initializers.Constant([float(c) for c in centre])
    mean = L.Dense(latent_dim, use_bias=anchor != "both", bias_initializer=start)(h)
    if anchor == "both":
        mean = Shift(centre)(mean)
    out = FixedStd(posterior_std)(mean) if posterior_std is not None else L.Concatenate()([mean, L.Dense(latent_dim)(h)])
    z = keras.Input([latent_dim])
    h = z if dec_bias else Shift([-float(c) for c in centre])(z)
    for width in hidden[::-1]:
        h = L.Dense(width, activation="tanh", use_bias=dec_bias)(h)
    x_out = L.Dense(int(np.prod(input_shape)))(h)
    if len(input_shape) > 1:
        x_out = L.Reshape(tuple(input_shape))(x_out)
    return keras.Model(x, out, name="pinwheel_encoder"), keras.Model(z, x_out, name="pinwheel_decoder")


ARCHITECTURES = ("conv", "mlp", "pinwheel")
PINWHEEL_HIDDEN = (64, 64)


def parse_hidden(spec) -> tuple[int, ...]:
    """`--pinwheel_hidden` ("64,64", "16", or a sequence of ints) as a tuple of positive widths."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",")]
        if not spec.strip() or any(not p for p in parts):
            raise ConfigError(f"pinwheel_hidden: must be comma-separated positive integers, got {spec!r}")
        try:
            widths = tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(f"pinwheel_hidden: must be comma-separated positive integers, got {spec!r}") from None
    else:
        try:
            widths = tuple(int(w) for w in spec)
        except (TypeError, ValueError):
            raise ConfigError(f"pinwheel_hidden: must be positive integers, got {spec!r}") from None
    if not widths or any(w < 1 for w in widths):
        raise ConfigError(f"pinwheel_hidden: needs at least one layer, every width >= 1, got {spec!r}")
    return widths


def build_architecture(name: str, input_shape: Sequence[int], latent_dim: int, pinwheel_hidden=PINWHEEL_HIDDEN,
                       pinwheel_anchor: str = "none", pinwheel_centre=None, pinwheel_posterior_std: float | None = None,
                       conv_encoder_units: int = CONV_ENCODER_UNITS) -> tuple[keras.Model, keras.Model]:
    """(encoder, decoder) by name: `conv` (28x28 images; `conv_encoder_units` is the encoder's
    hidden FC width), `mlp` (anything), `pinwheel` (small
    tanh FC nets, `pinwheel_nets`; `pinwheel_hidden` are the encoder's hidden widths, mirrored in
    the decoder; `pinwheel_anchor`, `pinwheel_centre`, `pinwheel_posterior_std` as there)."""
    input_shape = tuple(int(d) for d in input_shape)
    if name == "conv":
        if input_shape[:2] != (28, 28):
            raise ConfigError(f"architecture=conv: needs 28x28 images, got input shape {input_shape}")
        if int(conv_encoder_units) < 1:
            raise ConfigError(f"conv_encoder_units: must be >= 1, got {conv_encoder_units}")
        return (conv_encoder_28(latent_dim, input_shape, int(conv_encoder_units)),
                conv_decoder_28(latent_dim, input_shape[-1]))
    if name == "mlp":
        return mlp_encoder(input_shape, latent_dim), mlp_decoder(latent_dim, input_shape)
    if name == "pinwheel":
        hidden = parse_hidden(pinwheel_hidden)
        if pinwheel_posterior_std is not None and not pinwheel_posterior_std > 0:
            raise ConfigError(f"pinwheel_posterior_std: must be > 0, got {pinwheel_posterior_std}")
        if pinwheel_anchor not in PINWHEEL_ANCHORS:
            raise ConfigError(f"pinwheel_anchor: must be one of {', '.join(PINWHEEL_ANCHORS)}, got {pinwheel_anchor!r}")
        if pinwheel_anchor != "none" and (pinwheel_centre is None or len(pinwheel_centre) != latent_dim):
            raise ConfigError(f"pinwheel_centre: pinwheel_anchor={pinwheel_anchor} needs latent_dim={latent_dim} "
                              f"values, got {pinwheel_centre}")
        return pinwheel_nets(input_shape, latent_dim, hidden, pinwheel_anchor, pinwheel_centre, pinwheel_posterior_std)
    raise ConfigError(f"architecture: must be one of {', '.join(ARCHITECTURES)}, got {name!r}")
