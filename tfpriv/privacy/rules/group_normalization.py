"""GroupNormalization (channels last): y = x̂ γ + β per channel, x̂ normalised per example and group of
channels, so a row's gradients are sum(g x̂) for γ and sum(g) for β over all axes but the channels."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import Layer
from tfpriv.privacy.rules.layer_normalization import AffineNormalizationRule


class GroupNormalizationRule(AffineNormalizationRule):
    name = "group_normalization"

    def supports(self, layer: Layer) -> bool:
        return (type(layer) in keras_classes("layers.GroupNormalization") and layer.built
                and layer.axis in (-1, layer.input_spec.ndim - 1))

    def normalised(self, tap, x):
        layer = tap.layer
        rank, channels = x.shape.rank, x.shape[-1]
        mask = tap.call_kwargs.get("mask")
        weights = tf.ones_like(x) if mask is None else tf.broadcast_to(tf.cast(mask, x.dtype), tf.shape(x))
        grouped_shape = tf.concat([tf.shape(x)[:-1], [layer.groups, channels // layer.groups]], 0)
        grouped = tf.reshape(x, grouped_shape)
        axes = [a for a in range(1, rank + 1) if a != rank - 1]  # all but the example and the group
        mean, variance = tf.nn.weighted_moments(grouped, axes, tf.reshape(weights, grouped_shape), keepdims=True)
        return (tf.reshape((grouped - mean) * tf.math.rsqrt(variance + layer.epsilon), tf.shape(x)),
                list(range(1, rank - 1)))
