"""Conv2D: U = input patches at each output pixel, V = the output gradient there."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import activation_tail, by_position, plain
from tfpriv.privacy.rules.conv import ConvRule, patches


class Conv2DRule(ConvRule):
    name = "conv2d"

    def supports(self, layer):
        return (type(layer) in keras_classes("layers.Conv2D") and plain(layer)
                and layer.data_format == "channels_last"
                and layer.groups == 1 and layer.padding in ("same", "valid"))

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank != 4:
            raise TypeError(f"{layer.name}: the DP engine's Conv2D rule needs rank-4 inputs, got {x.shape}")
        z = self.product(layer, x, self.kernel(layer))
        return activation_tail(layer, z, self.bias(layer)), z

    def product(self, layer, x, kernel):
        return layer.convolution_op(x, kernel)

    def factors(self, tap, grad):
        layer = tap.layer
        u = patches(tf.cast(tap.inputs, grad.dtype), layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
        return by_position(u, u.shape[-1]), by_position(grad, layer.filters)
