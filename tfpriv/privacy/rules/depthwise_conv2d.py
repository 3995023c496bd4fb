"""DepthwiseConv2D (channels last): output channel c*M + m reads input channel c alone, so a row's
kernel gradient is sum_t P_t[:, c] ⊗ g_t[c, :] per channel (P: input patches). A depthwise kernel is
small (kh*kw*C*M), so per-example gradients are instantiated outright from the patches."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import Layer, PerExampleRule, activation_tail, per_example_sums
from tfpriv.privacy.rules.conv import patches


def supported_depthwise(layer: Layer) -> bool:
    """What the depthwise rules need: channels last, same/valid padding."""
    return layer.data_format == "channels_last" and layer.padding in ("same", "valid")


def depthwise_kernel(layer: Layer) -> tf.Variable:
    """The depthwise kernel [kh, kw, C, M] (Keras 3's DepthwiseConv2D calls it `kernel`)."""
    return layer.depthwise_kernel if hasattr(layer, "depthwise_kernel") else layer.kernel


def depthwise(layer: Layer, x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """The layer's depthwise product, without bias and activation."""
    s, d = layer.strides, layer.dilation_rate
    return tf.nn.depthwise_conv2d(x, kernel, strides=[1, s[0], s[1], 1], padding=layer.padding.upper(), dilations=d)


def depthwise_kernel_rows(layer: Layer, x: tf.Tensor, grad: tf.Tensor) -> tf.Tensor:
    """Per-row depthwise kernel gradient [R, kh, kw, C, M] for input x [R, H, W, C] and the gradient
    at the depthwise output grad [R, H', W', C*M]."""
    kh, kw, channels, multiplier = depthwise_kernel(layer).shape
    rows = tf.shape(grad)[0]
    p = patches(tf.cast(x, grad.dtype), (kh, kw), layer.strides, layer.dilation_rate, layer.padding)
    p = tf.reshape(p, [rows, -1, kh * kw, channels])
    g = tf.reshape(grad, [rows, -1, channels, multiplier])
    return tf.reshape(tf.einsum("rtkc,rtcm->rkcm", p, g), [rows, kh, kw, channels, multiplier])


class DepthwiseConv2DRule(PerExampleRule):
    name = "depthwise_conv2d"

    def supports(self, layer):
        return type(layer) in keras_classes("layers.DepthwiseConv2D") and supported_depthwise(layer)

    def variables(self, layer):
        return [depthwise_kernel(layer)] + ([layer.bias] if layer.use_bias else [])

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank != 4:
            raise TypeError(f"{layer.name}: the DP engine's DepthwiseConv2D rule needs rank-4 inputs, got {x.shape}")
        z = depthwise(layer, x, depthwise_kernel(layer))
        return activation_tail(layer, z, layer.bias if layer.use_bias else None), z

    def per_example(self, tap, grad, batch_size, original_call):
        layer = tap.layer
        out = [per_example_sums(depthwise_kernel_rows(layer, tap.inputs, grad), batch_size)]
        if layer.use_bias:
            out.append(per_example_sums(tf.reduce_sum(grad, axis=[1, 2]), batch_size))
        return out
