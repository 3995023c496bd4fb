"""Conv1D: the Conv2D rule on sequences as images of height 1 (U = input windows, V = the output gradient)."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import by_position, plain
from tfpriv.privacy.rules.conv import ConvRule, patches


class Conv1DRule(ConvRule):
    name = "conv1d"
    input_rank = 3

    def supports(self, layer):
        return (type(layer) in keras_classes("layers.Conv1D") and plain(layer)
                and layer.data_format == "channels_last"
                and layer.groups == 1 and layer.padding in ("same", "valid", "causal"))

    @staticmethod
    def _padded(layer, x: tf.Tensor) -> tuple[tf.Tensor, str]:
        """The input as the convolution reads it (causal: left-padded, then "valid") and its padding."""
        if layer.padding != "causal":
            return x, layer.padding
        left = layer.dilation_rate[0] * (layer.kernel_size[0] - 1)
        return tf.pad(x, [[0, 0], [left, 0], [0, 0]]), "valid"

    def product(self, layer, x, kernel):
        # The convolution both Kerases run (Keras 3's `convolution_op` would see "causal" padding).
        x, padding = self._padded(layer, x)
        return tf.nn.convolution(x, kernel, strides=layer.strides, padding=padding.upper(),
                                 dilations=layer.dilation_rate)

    def factors(self, tap, grad):
        layer = tap.layer
        x, padding = self._padded(layer, tf.cast(tap.inputs, grad.dtype))
        u = patches(x[:, None], (1, layer.kernel_size[0]), (1, layer.strides[0]), (1, layer.dilation_rate[0]), padding)
        return by_position(u, u.shape[-1]), by_position(grad, layer.filters)

    def bias_rows(self, tap, grad):
        return tf.reduce_sum(grad, axis=1)
