"""GroupNormalization (channels last): y = x̂ γ + β per channel, x̂ normalised per example and group of
channels, so a row's gradients are sum(g x̂) for γ and sum(g) for β over all axes but the channels."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.rules.base import Layer, PerExampleRule, per_example_sums


class GroupNormalizationRule(PerExampleRule):
    name = "group_normalization"

    def supports(self, layer: Layer) -> bool:
        return (type(layer) is keras.layers.GroupNormalization and layer.built
                and layer.axis in (-1, layer.input_spec.ndim - 1))

    def variables(self, layer):
        return ([layer.gamma] if layer.scale else []) + ([layer.beta] if layer.center else [])

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's GroupNormalization rule needs a dense tensor input")
        out = original_call(inputs, **kwargs)
        return out, out

    def per_example(self, tap, grad, batch_size, original_call):
        layer = tap.layer
        x = tf.cast(tap.inputs, tf.float32)
        rank, channels = x.shape.rank, x.shape[-1]
        mask = tap.call_kwargs.get("mask")
        weights = tf.ones_like(x) if mask is None else tf.broadcast_to(tf.cast(mask, x.dtype), tf.shape(x))
        grouped_shape = tf.concat([tf.shape(x)[:-1], [layer.groups, channels // layer.groups]], 0)
        grouped = tf.reshape(x, grouped_shape)
        axes = [a for a in range(1, rank + 1) if a != rank - 1]  # all but the example and the group
        mean, variance = tf.nn.weighted_moments(grouped, axes, tf.reshape(weights, grouped_shape), keepdims=True)
        normalised = tf.reshape((grouped - mean) * tf.math.rsqrt(variance + layer.epsilon), tf.shape(x))
        g = tf.cast(grad, tf.float32)
        outside = list(range(1, rank - 1))
        out = []
        if layer.scale:
            out.append(per_example_sums(tf.reduce_sum(g * normalised, axis=outside), batch_size))
        if layer.center:
            out.append(per_example_sums(tf.reduce_sum(g, axis=outside), batch_size))
        return out
