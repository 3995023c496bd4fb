"""SeparableConv2D (channels last): a depthwise convolution y = D(x), then a 1x1 convolution z = y K.
A row's pointwise gradient is sum_t y_t ⊗ g_t, its depthwise gradient the depthwise rule's at the
gradient g K^T reaching y; both kernels are small, so per-example gradients are instantiated."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import PerExampleRule, activation_tail, per_example_sums
from tfpriv.privacy.rules.depthwise_conv2d import depthwise, depthwise_kernel_rows, supported_depthwise


class SeparableConv2DRule(PerExampleRule):
    name = "separable_conv2d"

    def supports(self, layer):
        return type(layer) in keras_classes("layers.SeparableConv2D") and supported_depthwise(layer)

    def variables(self, layer):
        return [layer.depthwise_kernel, layer.pointwise_kernel] + ([layer.bias] if layer.use_bias else [])

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank != 4:
            raise TypeError(f"{layer.name}: the DP engine's SeparableConv2D rule needs rank-4 inputs, got {x.shape}")
        z = self._pointwise(depthwise(layer, x, layer.depthwise_kernel), layer.pointwise_kernel)
        return activation_tail(layer, z, layer.bias if layer.use_bias else None), z

    @staticmethod
    def _pointwise(y: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        return tf.nn.conv2d(y, kernel, strides=1, padding="VALID")

    def per_example(self, tap, grad, batch_size, original_call):
        layer = tap.layer
        x = tf.cast(tap.inputs, grad.dtype)
        y = depthwise(layer, x, tf.cast(layer.depthwise_kernel, grad.dtype))
        pointwise = tf.cast(layer.pointwise_kernel, grad.dtype)[0, 0]         # [C*M, F]
        grad_y = tf.einsum("rhwf,kf->rhwk", grad, pointwise)
        point_rows = tf.einsum("rhwk,rhwf->rkf", y, grad)[:, None, None]
        out = [per_example_sums(depthwise_kernel_rows(layer, x, grad_y), batch_size),
               per_example_sums(point_rows, batch_size)]
        if layer.use_bias:
            out.append(per_example_sums(tf.reduce_sum(grad, axis=[1, 2]), batch_size))
        return out
