"""Screening one record's ids and labels where they are consumed, so that no record can abort a step.

An id outside an Embedding's [0, input_dim) or a class label outside [0, K) makes the lookup or the
loss raise (on CPU) in the middle of training, after part of the budget is spent: a crash that
depends on one record is a release outside epsilon. `EmbeddingScreen` clamps the ids every
Embedding of a model receives, at any depth (nested models, ids computed by a Lambda), and says
which examples held one out of range; `class_labels` does the same for labels a loss reads as
class indices (`index_targets`). `PrivateTraining` drops those examples (clip factor 0, counted in
`dropped`), as the engine drops non-finite ones.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras, keras_classes
from tfpriv.privacy.taps import PatchedCalls


class EmbeddingScreen:
    """Clamps the ids of every Embedding under `model` inside `screening()` and records, per
    example, whether they were all in range.

    The layers' `call` is replaced while any thread screens (`PatchedCalls`, as the engine's
    `TapRecorder` does; a screen entered inside its recording wraps the tapped call, so the taps see
    the clamped ids); each thread records its own calls. An Embedding call whose ids have a leading
    axis of B, or any multiple of B (TimeDistributed reshapes [B, T] to [B*T]), is attributed to
    the examples by rows; other calls are clamped only.
    """

    def __init__(self, model: keras.Model):
        embedding = keras_classes("layers.Embedding")
        self.layers = [layer for layer in model._flatten_layers(include_self=True, recursive=True)
                       if isinstance(layer, embedding)]
        self._local = threading.local()
        self._patch = PatchedCalls(self.layers, self._screened_call)  # wraps a TapRecorder's tapped call

    @contextlib.contextmanager
    def screening(self, batch_size: tf.Tensor) -> Iterator[list[tf.Tensor]]:
        """Yields a list that receives one valid [batch_size] bool per Embedding call of the pass."""
        with self._patch.active():
            found: list[tf.Tensor] = []
            self._local.found, self._local.batch_size = found, batch_size
            try:
                yield found
            finally:
                self._local.found = None

    def _screened_call(self, layer, inner: Callable):
        @tf.autograph.experimental.do_not_convert
        def call(inputs, *args, **kwargs):
            found = getattr(self._local, "found", None)
            if found is None or not isinstance(inputs, tf.Tensor) or inputs.dtype == tf.bool:
                return inner(inputs, *args, **kwargs)
            in_range = (inputs >= tf.zeros([], inputs.dtype)) & (inputs < tf.cast(layer.input_dim, inputs.dtype))
            found.append(_rows_valid(in_range, self._local.batch_size))
            return inner(tf.where(in_range, inputs, tf.zeros_like(inputs)), *args, **kwargs)

        return call


def _rows_valid(in_range: tf.Tensor, batch_size: tf.Tensor) -> tf.Tensor:
    """[batch_size] bool: whether each example's share of `in_range` is all true (all true when
    its size is not a multiple of batch_size: then the rows cannot be told apart)."""
    flat = tf.reshape(in_range, [-1])
    n, b = tf.size(flat), tf.maximum(batch_size, 1)
    return tf.cond((batch_size > 0) & tf.equal(n % b, 0),
                   lambda: tf.reduce_all(tf.reshape(flat, [b, n // b]), axis=1),
                   lambda: tf.ones([batch_size], tf.bool))


def all_valid(found: list[tf.Tensor]) -> tf.Tensor | None:
    """The examples valid in every entry of `found` ([B] bool), or None if it is empty."""
    return tf.reduce_all(tf.stack(found), axis=0) if found else None


def index_targets(loss: Callable, y, y_pred_shape: tf.TensorShape) -> bool:
    """Whether `loss` reads float labels shaped like y as class indices into the prediction's last
    axis: on one public example (zeros as the prediction) it runs with label 0 and fails with label
    K, the number of classes. Run once per shape, eagerly; no record is read."""
    trailing = tf.TensorShape(y.shape[1:])
    if not (trailing.is_fully_defined() and y_pred_shape[1:].is_fully_defined()):
        return False
    with tf.init_scope():
        prediction = tf.zeros([1, *y_pred_shape[1:]])

        def runs(label: int) -> bool:
            try:
                loss(tf.fill([1, *trailing], tf.constant(label, y.dtype)), prediction)
            except Exception:  # the loss's own complaint about label K is what is probed for
                return False
            return True

        return runs(0) and not runs(int(y_pred_shape[-1]))


def class_labels(y, y_pred_shape: tf.TensorShape | None, indices: bool) -> tuple[tf.Tensor, tf.Tensor | None]:
    """(y with out-of-range class indices set to 0, valid [B] bool), or (y, None) if y holds no class
    indices (or the prediction's shape is not known yet).

    y holds class indices into the prediction's last axis (K > 1 classes) when it has the
    prediction's shape without that axis (or with it as 1) and is integer, or the loss reads it as
    indices (`indices`: Keras' sparse categorical crossentropy, or `index_targets`). An index outside
    [0, K) would abort the step inside the loss: a data-dependent crash outside epsilon.
    """
    if y_pred_shape is None or not y_pred_shape.rank or not isinstance(y, (tf.Tensor, np.ndarray)):
        return y, None
    y = tf.convert_to_tensor(y)
    k, rank = y_pred_shape[-1], y_pred_shape.rank
    if k is None or k < 2 or y.shape.rank is None or not (y.dtype.is_integer or indices):
        return y, None
    if not (y.shape.rank == rank - 1 or (y.shape.rank == rank and y.shape[-1] == 1)):
        return y, None
    in_range = (y >= tf.zeros([], y.dtype)) & (y < tf.cast(k, y.dtype))
    valid = tf.reduce_all(tf.reshape(in_range, [tf.shape(y)[0], -1]), axis=1)
    return tf.where(in_range, y, tf.zeros_like(y)), valid
