"""Critic and generator of the DP-WGAN-GP source paper (004, after Gulrajani et al.'s MNIST code).

Critic: three 5x5 stride-2 convolutions (padding same: 28 -> 14 -> 7 -> 4), leaky ReLU 0.2,
filters capacity x {1, 2, 4}, then a linear unit. No normalisation layers, so each example's
critic value depends on that example only (per-example clipping needs that).
Generator: the mirror image from a 128-d Gaussian latent: Dense -> 4x4x(4 capacity) -> ReLU ->
Conv2DTranspose to 8x8 (cropped to 7x7) -> 14x14 -> 28x28, sigmoid output, because MNIST pixels
are in [0, 1] and the evaluation classifier expects that range. Other image shapes (H, W, C) get the
same layers from ceil(H/8) x ceil(W/8), each upsampling cropped to ceil(H/4), ceil(H/2), H (and W).

Class-conditional variants: the critic sees the label as `num_classes` one-hot channels
tiled over the image (the label is private data, so it enters the per-example gradient and is
clipped with it); the generator gets the one-hot label concatenated to its latent.
"""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError

layers = keras.layers
IMAGE_SHAPE = (28, 28, 1)
LEAK = 0.2
KERNEL = 5


def _check(capacity: int, num_classes: int | None) -> None:
    if capacity < 1:
        raise UsageError(f"--capacity: must be >= 1, got {capacity}")
    if num_classes is not None and num_classes < 2:
        raise UsageError(f"num_classes: must be >= 2 for a conditional model, got {num_classes}")


def _check_shape(image_shape: tuple[int, ...]) -> None:
    if len(image_shape) != 3 or not all(isinstance(d, int) and d >= 1 for d in image_shape):
        raise UsageError(f"image_shape: must be (height, width, channels) of positive integers, got {image_shape}")


def _crop(h, before: tuple[int, int], after: tuple[int, int], name: str):
    """h ([B, 2*before, C]) cropped at the bottom and right to `after` (no layer when they agree)."""
    extra = (2 * before[0] - after[0], 2 * before[1] - after[1])
    return layers.Cropping2D(((0, extra[0]), (0, extra[1])), name=name)(h) if any(extra) else h


def generator_width(capacity: int, generator_capacity: int | None) -> int:
    """The generator's capacity: `generator_capacity`, or the critic's `capacity` when it is None."""
    if generator_capacity is None:
        return capacity
    if generator_capacity < 1:
        raise UsageError(f"--generator_capacity: must be >= 1, got {generator_capacity}")
    return generator_capacity


def build_critic(capacity: int = 32, num_classes: int | None = None,
                 image_shape: tuple[int, int, int] = IMAGE_SHAPE) -> keras.Model:
    """Critic D(x) (or D(x, y) when num_classes is set): [B, H, W, C] (+ [B] int labels) -> [B]."""
    _check(capacity, num_classes)
    _check_shape(image_shape)
    image = layers.Input(image_shape, name="image")
    inputs = [image]
    h = image
    if num_classes is not None:
        label = layers.Input((), dtype=tf.int32, name="label")
        inputs.append(label)
        onehot = tf.one_hot(label, num_classes)
        tiled = tf.tile(onehot[:, None, None, :], [1, image_shape[0], image_shape[1], 1])
        h = layers.Concatenate(name="image_and_label")([image, tiled])
    for k, mult in enumerate((1, 2, 4)):
        h = layers.Conv2D(capacity * mult, KERNEL, strides=2, padding="same", name=f"conv{k + 1}")(h)
        h = layers.LeakyReLU(LEAK, name=f"lrelu{k + 1}")(h)
    h = layers.Flatten(name="flatten")(h)
    out = layers.Dense(1, name="critic_value")(h)
    out = tf.squeeze(out, axis=-1)
    return keras.Model(inputs if len(inputs) > 1 else image, out, name="critic")


def build_generator(capacity: int = 32, latent_size: int = 128, num_classes: int | None = None,
                    image_shape: tuple[int, int, int] = IMAGE_SHAPE) -> keras.Model:
    """Generator G(z) (or G(z, y)): [B, latent] (+ [B] int labels) -> [B, H, W, C] in (0, 1) (`image_shape`)."""
    _check(capacity, num_classes)
    if latent_size < 1:
        raise UsageError(f"--latent_size: must be >= 1, got {latent_size}")
    _check_shape(image_shape)
    z = layers.Input((latent_size,), name="latent")
    inputs = [z]
    h = z
    if num_classes is not None:
        label = layers.Input((), dtype=tf.int32, name="label")
        inputs.append(label)
        h = layers.Concatenate(name="latent_and_label")([z, tf.one_hot(label, num_classes)])
    # Sizes at 1/8, 1/4, 1/2 and 1 of the image's, rounded up: 4 -> 8 (cropped to 7) -> 14 -> 28 for MNIST.
    sides = [(-(-image_shape[0] // 2 ** k), -(-image_shape[1] // 2 ** k)) for k in (3, 2, 1, 0)]
    h = layers.Dense(sides[0][0] * sides[0][1] * 4 * capacity, name="project")(h)
    h = layers.ReLU()(h)
    h = layers.Reshape((*sides[0], 4 * capacity))(h)
    h = layers.Conv2DTranspose(2 * capacity, KERNEL, strides=2, padding="same", name="deconv1")(h)
    h = _crop(layers.ReLU()(h), sides[0], sides[1], "crop")  # 7x7 from 8x8, as in Gulrajani et al.
    h = layers.Conv2DTranspose(capacity, KERNEL, strides=2, padding="same", name="deconv2")(h)
    h = _crop(layers.ReLU()(h), sides[1], sides[2], "crop2")
    h = layers.Conv2DTranspose(image_shape[2], KERNEL, strides=2, padding="same", name="deconv3")(h)
    h = _crop(h, sides[2], sides[3], "crop3")
    out = layers.Activation("sigmoid", name="image")(h)
    return keras.Model(inputs if len(inputs) > 1 else z, out, name="generator")
