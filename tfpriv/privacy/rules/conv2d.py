"""Conv2D: U = input patches at each output pixel, V = the output gradient there."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import by_position, plain
from tfpriv.privacy.rules.conv import ConvRule, patches


class Conv2DRule(ConvRule):
    name = "conv2d"

    def supports(self, layer):
        return (type(layer) in keras_classes("layers.Conv2D") and plain(layer)
                and layer.data_format == "channels_last"
                and layer.groups == 1 and layer.padding in ("same", "valid"))

    def product(self, layer, x, kernel):
        return layer.convolution_op(x, kernel)

    def factors(self, tap, grad):
        layer = tap.layer
        u = patches(tf.cast(tap.inputs, grad.dtype), layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
        return by_position(u, u.shape[-1]), by_position(grad, layer.filters)
