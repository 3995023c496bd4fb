"""LayerNormalization: y = x̂ γ + β, so a row's gradients are sum(g x̂) for γ and sum(g) for β over the
positions outside the normalised axes, instantiated per example (they have the size of γ)."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.rules.base import Layer, PerExampleRule, per_example_sums


class LayerNormalizationRule(PerExampleRule):
    name = "layer_normalization"

    def supports(self, layer: Layer) -> bool:
        # Normalising over the batch axis would mix examples.
        return (type(layer) is keras.layers.LayerNormalization and layer.built
                and all(0 < a for a in layer.axis))

    def variables(self, layer):
        return ([layer.gamma] if layer.scale else []) + ([layer.beta] if layer.center else [])

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's LayerNormalization rule needs a dense tensor input")
        out = original_call(inputs, **kwargs)
        return out, out

    def per_example(self, tap, grad, batch_size, original_call):
        layer = tap.layer
        x = tf.cast(tap.inputs, tf.float32)
        mean, variance = tf.nn.moments(x, layer.axis, keepdims=True)
        normalised = (x - mean) * tf.math.rsqrt(variance + layer.epsilon)
        g = tf.cast(grad, tf.float32)
        outside = [d for d in range(1, x.shape.rank) if d not in layer.axis]
        out = []
        if layer.scale:
            out.append(per_example_sums(tf.reduce_sum(g * normalised, axis=outside), batch_size))
        if layer.center:
            out.append(per_example_sums(tf.reduce_sum(g, axis=outside), batch_size))
        return out
