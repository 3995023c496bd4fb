"""Conv2DTranspose, the adjoint of a convolution: U = patches of the output gradient, V = input pixels."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import by_position
from tfpriv.privacy.rules.conv import ConvRule, patches


class Conv2DTransposeRule(ConvRule):
    name = "conv2d_transpose"

    def supports(self, layer):
        return (type(layer) in keras_classes("layers.Conv2DTranspose") and layer.data_format == "channels_last"
                and layer.output_padding is None and tuple(layer.dilation_rate) == (1, 1)
                and layer.padding in ("same", "valid"))

    def product(self, layer, x, kernel):
        # Same computation as Conv2DTranspose.call up to the bias, so the output is tapped pre-bias.
        shape = tf.shape(x)
        kh, kw = layer.kernel_size
        sh, sw = layer.strides
        dims = x.shape.as_list()
        h = dims[1] if dims[1] is not None else shape[1]
        w = dims[2] if dims[2] is not None else shape[2]
        if layer.padding == "same":
            out_h, out_w = h * sh, w * sw
        else:
            out_h, out_w = (h - 1) * sh + kh, (w - 1) * sw + kw
        out_shape = tf.stack([shape[0], out_h, out_w, layer.filters])
        z = tf.nn.conv2d_transpose(x, kernel, out_shape, strides=[1, sh, sw, 1], padding=layer.padding.upper())
        if isinstance(out_h, int) and isinstance(out_w, int):
            z.set_shape([None, out_h, out_w, layer.filters])
        return z

    def factors(self, tap, grad):
        # y = conv_transpose(x, K) is the adjoint of x' = conv2d(y', K), so dL/dK is conv2d's
        # filter gradient with the roles swapped: patches of dL/dy against the input pixels.
        layer = tap.layer
        u = patches(grad, layer.kernel_size, layer.strides, (1, 1), layer.padding)
        return by_position(u, u.shape[-1]), by_position(tf.cast(tap.inputs, grad.dtype), tap.inputs.shape[-1])
