"""LayerNormalization: y = x̂ γ + β, so a row's gradients are sum(g x̂) for γ and sum(g) for β over the
positions outside the normalised axes, instantiated per example (they have the size of γ).
`AffineNormalizationRule` is that computation for any such layer; a subclass says how x̂ is formed."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import Layer, PerExampleRule, Tap, per_example_sums


class AffineNormalizationRule(PerExampleRule):
    """A normalisation layer y = x̂ γ + β whose x̂ depends on its own example only."""

    def variables(self, layer):
        return ([layer.gamma] if layer.scale else []) + ([layer.beta] if layer.center else [])

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's {type(layer).__name__} rule needs a dense tensor input")
        out = original_call(inputs, **kwargs)
        return out, out

    def normalised(self, tap: Tap, x: tf.Tensor) -> tuple[tf.Tensor, list[int]]:
        """(x̂, the axes outside γ's, over which a row's gradients are summed)."""
        raise NotImplementedError  # abstract: each subclass normalises as its layer does

    def per_example(self, tap, grad, batch_size, original_call):
        layer = tap.layer
        normalised, outside = self.normalised(tap, tf.cast(tap.inputs, grad.dtype))
        out = []
        if layer.scale:
            out.append(per_example_sums(tf.reduce_sum(grad * normalised, axis=outside), batch_size))
        if layer.center:
            out.append(per_example_sums(tf.reduce_sum(grad, axis=outside), batch_size))
        return out


class LayerNormalizationRule(AffineNormalizationRule):
    name = "layer_normalization"

    def supports(self, layer: Layer) -> bool:
        # Normalising over the batch axis would mix examples; Keras 3's deprecated rms_scaling
        # normalises differently.
        if type(layer) not in keras_classes("layers.LayerNormalization") or getattr(layer, "rms_scaling", False):
            return False
        axes = _axes(layer)
        return axes is not None and 0 not in axes

    def normalised(self, tap, x):
        layer = tap.layer
        axes = [a % x.shape.rank for a in layer.axis]
        mean, variance = tf.nn.moments(x, axes, keepdims=True)
        return ((x - mean) * tf.math.rsqrt(variance + layer.epsilon),
                [d for d in range(1, x.shape.rank) if d not in axes])


def _axes(layer: Layer) -> list[int] | None:
    """The built layer's normalised axes, non-negative, or None if not known. Keras 2 makes them
    non-negative when it builds; Keras 3 keeps negative ones, resolved here by its input's rank."""
    if not layer.built:
        return None
    axes = list(layer.axis)
    if all(a >= 0 for a in axes):
        return axes
    shape = (layer.get_build_config() or {}).get("input_shape")
    return None if shape is None else [a % len(shape) for a in axes]
