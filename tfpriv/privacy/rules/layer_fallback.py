"""The per-layer fallback: per-example gradients of one layer by a vectorised local VJP (any layer;
one example after another where pfor cannot vectorize it, e.g. an LSTM: `pfor_rules.map_examples`)."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tfpriv.privacy import pfor_rules  # the module, not its names: pfor_rules imports rules.conv
from tfpriv.privacy.rules.base import PerExampleRule, Tap


class PerLayerFallback(PerExampleRule):
    """Fallback: per-example gradients of one layer by a vectorised local VJP."""

    name = "per_layer"

    def supports(self, layer):
        return True

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's per-layer fallback needs a single tensor input")
        out = original_call(inputs, **kwargs)
        if not isinstance(out, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's per-layer fallback needs a single tensor output")
        return out, out

    def per_example(self, tap: Tap, grad: tf.Tensor, batch_size: tf.Tensor, original_call: Callable) -> list[tf.Tensor]:
        """[B, *w.shape] per-example gradients of the layer's variables for this call."""
        variables = self.variables(tap.layer)
        x = tf.reshape(tap.inputs, tf.concat([[batch_size, -1], tf.shape(tap.inputs)[1:]], 0))
        g = tf.reshape(grad, tf.concat([[batch_size, -1], tf.shape(grad)[1:]], 0))
        kwargs = tap.call_kwargs

        def one(args):
            xi, gi = args
            with tf.GradientTape() as tape:
                yi = original_call(xi, **kwargs)
            grads = tape.gradient(yi, variables, output_gradients=gi,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return grads

        pfor_rules.remember_known_failures(tap.layer, [tap.layer])
        return pfor_rules.map_examples(one, (x, g), what=tap.layer.name, owner=tap.layer)
