"""Dense: the kernel gradient of row r is sum_t x_rt ⊗ g_rt over the extra input axes t."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import FactorRule, Layer, activation_tail, by_position, plain


class DenseRule(FactorRule):
    name = "dense"

    def supports(self, layer: Layer) -> bool:
        return type(layer) in keras_classes("layers.Dense") and plain(layer)

    def forward(self, layer, original_call, inputs, kwargs):
        if isinstance(inputs, (tf.SparseTensor, tf.RaggedTensor)):
            raise TypeError(f"{layer.name}: sparse/ragged inputs are not supported by the DP engine")
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank == 2:
            z = tf.matmul(x, self.kernel(layer))
        else:
            z = tf.tensordot(x, self.kernel(layer), [[x.shape.rank - 1], [0]])
        return activation_tail(layer, z, self.bias(layer)), z

    def factors(self, tap, grad):
        d_in, d_out = self.kernel(tap.layer).shape
        return by_position(tf.cast(tap.inputs, grad.dtype), d_in), by_position(grad, d_out)

    def kernel_from_outer(self, layer, outer):
        return outer

    def bias_rows(self, tap, grad):
        d_out = self.kernel(tap.layer).shape[-1]
        return tf.reduce_sum(tf.reshape(grad, [tf.shape(grad)[0], -1, d_out]), axis=1)
