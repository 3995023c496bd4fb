"""Embedding: row r's table gradient is sum_t e_{id_rt} ⊗ g_rt, one table row per token read."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import Layer, RowSparseRule, plain


class EmbeddingRule(RowSparseRule):
    name = "embedding"

    def supports(self, layer: Layer) -> bool:
        # Keras 3 has no sparse embeddings.
        return (type(layer) in keras_classes("layers.Embedding") and plain(layer)
                and not getattr(layer, "sparse", False))

    def table(self, layer):
        return layer.embeddings

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's Embedding rule needs dense token ids, "
                            f"got {type(inputs).__name__}")
        out = original_call(inputs, **kwargs)
        return out, out

    def rows(self, tap, grad):
        rows = tf.shape(grad)[0]
        ids = tf.reshape(tf.cast(tap.inputs, tf.int64), [rows, -1])
        values = tf.reshape(tf.cast(grad, self.table(tap.layer).dtype), [rows, -1, tap.layer.output_dim])
        return ids, values
