"""What `make_private`'s model does whichever Keras it is: `PrivateTraining`, the DP-SGD training of
a Keras model on a per-example loss (the loss made per-example, out-of-range class labels and token
ids dropped), mixed into Keras 2's `tfpriv.training.private_model.PrivateModel` and Keras 3's
`tfpriv.training.keras3.PrivateModel`.
"""
from __future__ import annotations

import copy
import sys
from typing import Callable, Union

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras, keras_classes, keras_modules
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import finite_examples
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPTraining

PerExampleLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
LossLike = Union[PerExampleLoss, str, keras.losses.Loss]


class PrivateTraining(DPTraining):
    """A Keras model trained with DP-SGD on a per-example loss; batches are (x, y). Mixed into
    `PrivateModel` (Keras 2) and `tfpriv.training.keras3.PrivateModel` (Keras 3)."""

    def __init__(self, model: keras.Model, loss: LossLike, config: DPConfig, num_examples: int,
                 delta: float | None = None, max_epsilon: float | None = None, **kwargs):
        super().__init__(name=kwargs.pop("name", f"private_{model.name}"), **kwargs)
        self.model = model
        self.per_example_loss, self.sparse_loss = per_example_loss(loss, self.keras_module)
        object.__setattr__(self, "_output_shape", None)  # y_pred's static shape, once the loss was traced
        self._privacy = dict(dp=config, num_examples=num_examples, delta=delta, max_epsilon=max_epsilon)

    def compile(self, optimizer="adam", metrics=None, **kwargs):
        """Keras compile; the privacy settings are those given to `make_private`. `jit_compile=True`
        is refused (`without_xla`); Keras 3's "auto" means no XLA here."""
        if "jit_compile" in kwargs:
            kwargs["jit_compile"] = without_xla(kwargs["jit_compile"])
        super().compile(optimizer=optimizer, metrics=metrics, **self._privacy, **kwargs)
        # `evaluate` may come before any `fit` (which builds the other trackers); `build` keeps this one.
        self._trackers["loss"] = self.keras_module.metrics.Mean(name="loss")

    def call(self, x, training=False):
        return self.model(x, training=training)

    def term_spec(self) -> TermSpec:
        return TermSpec(sample=("loss",))

    def private_inputs(self, data):
        """(x, y, drop): drop [B] is NaN for an example whose class label or token id (an input
        read by an Embedding) is out of range and 0 otherwise, so the engine drops that example as
        it drops non-finite inputs (clip factor 0, counted in `dropped`) instead of the loss aborting
        the step on it; its out-of-range ids are set to 0 so the forward pass runs."""
        x, y = _unpack(data)
        drop = tf.zeros(tf.shape(tf.nest.flatten(x)[0])[:1])
        x, ids_valid = embedding_ids(self.model, x)
        _, labels_valid = class_labels(y, self._output_shape, self.sparse_loss)
        for valid in (ids_valid, labels_valid):
            if valid is not None:
                drop = tf.where(valid, drop, float("nan"))
        return x, y, drop

    def loss_terms(self, data, layout: BatchLayout, training: bool = True) -> LossTerms:
        x, y = data[0], data[1]
        y_pred = self.model(x, training=training)
        # The prediction's static shape says which labels are class indices (`private_inputs`).
        object.__setattr__(self, "_output_shape", y_pred.shape if isinstance(y_pred, tf.Tensor) else None)
        y, _ = class_labels(y, self._output_shape, self.sparse_loss)  # a dropped example's label made harmless
        return LossTerms({"loss": _per_example(self.per_example_loss(y, y_pred))})

    def build_extra(self, sample_batch) -> None:
        """Warns in one line when a probability loss gets logits (`logits_warning`), read on the
        public batch `prepare` passes: no record decides whether the line is printed."""
        kind = probability_loss(self.per_example_loss)
        y_pred = self.model(_unpack(sample_batch)[0], training=False) if kind else None
        line = logits_warning(kind, y_pred) if isinstance(y_pred, tf.Tensor) else None
        if line:
            print(f"tfpriv: {line}", file=sys.stderr, flush=True)  # a log line, as the engine's clipping line

    def step_logs(self, logs: dict) -> dict:
        return logs

    def metric_names(self) -> list[str]:
        return ["loss"]

    def compiled_metrics_container(self):
        """The metrics given to `compile` (`update_state(y, y_pred)`, `metrics`), or None."""
        return getattr(self, "compiled_metrics", None)

    @property
    def metrics(self):
        compiled = self.compiled_metrics_container()
        return super().metrics + (list(compiled.metrics) if compiled is not None else [])

    def train_step(self, data):
        logs = super().train_step(data)
        compiled = self.compiled_metrics_container()
        if compiled is None:
            return logs
        # A forward pass of its own: the engine's may have run inside a loop (vectorized_map,
        # map_fn), whose tensors this graph cannot read.
        compiled.update_state(*self._kept(data))
        return {**logs, **{m.name: m.result() for m in compiled.metrics}}

    def test_step(self, data):
        y, y_pred = self._kept(data)
        self._trackers["loss"].update_state(_per_example(self.per_example_loss(y, y_pred)))
        compiled = self.compiled_metrics_container()
        if compiled is not None:
            compiled.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def _kept(self, data):
        """(labels, predictions) of the examples training keeps: not those with NaN/inf inputs, an
        out-of-range token id or class label, which the engine drops."""
        data, ok = finite_examples(_unpack(data), tf.shape(tf.nest.flatten(data[0])[0])[0])
        x, y = data
        x, ids_valid = embedding_ids(self.model, x)
        y_pred = self(x, training=False)
        y, valid = class_labels(y, y_pred.shape if isinstance(y_pred, tf.Tensor) else None, self.sparse_loss)
        for v in (ids_valid, valid):
            if v is not None:
                ok &= v
        return tf.nest.map_structure(lambda t: tf.boolean_mask(t, ok), (y, y_pred))

    def save(self, filepath, *args, **kwargs):
        """Saves the wrapped Keras model (what was trained; `keras.models.load_model` reads it)."""
        return self.model.save(filepath, *args, **kwargs)

    def export(self, filepath, *args, **kwargs):
        """Exports the wrapped Keras model as a SavedModel for serving (Keras' `Model.export`)."""
        return self.model.export(filepath, *args, **kwargs)


def without_xla(jit_compile: bool | str | None) -> bool | None:
    """`compile`'s `jit_compile` as the private step runs: None or False as given, Keras 3's "auto"
    as False; XLA (True) raises ConfigError naming `jit_compile`. XLA cannot compile the private
    step (its ScatterNd), and on CPU XLA was slower even for a non-private Keras convnet (15.4k
    against 21.4k examples/s, issue 50)."""
    if jit_compile in (None, False, "auto"):
        return None if jit_compile is None else False
    raise ConfigError(f"jit_compile: {jit_compile!r} is not supported: XLA cannot compile the private training "
                      "step (its ScatterNd), and on CPU it was slower; leave jit_compile out (or False)")


def per_example_loss(loss: LossLike, keras_module=keras) -> tuple[PerExampleLoss, bool]:
    """(a function of (y_true, y_pred) with one value per example, whether it is sparse categorical).

    `loss`: a Keras loss name ("sparse_categorical_crossentropy", looked up in `keras_module`, the
    model's Keras), a `keras.losses.Loss` of either Keras with any reduction (used through a copy
    with reduction "none": DP-SGD clips each example's gradient, so it needs each example's loss),
    or a function.
    """
    if isinstance(loss, str):
        try:
            loss = keras_module.losses.get(loss)
        except ValueError:
            raise ConfigError(f"loss: {loss!r} is not a Keras loss name") from None
    if isinstance(loss, keras_classes("losses.Loss")):
        sparse = isinstance(loss, keras_classes("losses.SparseCategoricalCrossentropy"))
        if loss.reduction not in ("none", None):  # Keras 2's Reduction.NONE is "none"
            loss = copy.copy(loss)
            loss.reduction = "none"
        return loss, sparse
    if not callable(loss):
        raise ConfigError(f"loss: expected a Keras loss name, a keras.losses.Loss or a function, "
                          f"got {type(loss).__name__}")
    return loss, any(loss is m.losses.sparse_categorical_crossentropy for m in keras_modules())


# Keras' crossentropies that read probabilities unless given from_logits=True: what their rows must be.
PROBABILITY_LOSSES = {"sparse_categorical_crossentropy": "categorical", "categorical_crossentropy": "categorical",
                      "binary_crossentropy": "binary"}
PROBABILITY_LOSS_CLASSES = {"SparseCategoricalCrossentropy": "categorical", "CategoricalCrossentropy": "categorical",
                            "BinaryCrossentropy": "binary"}


def probability_loss(loss: LossLike) -> str | None:
    """"categorical" or "binary" when `loss` (as `per_example_loss` returns it) reads probabilities:
    a Keras crossentropy function, or loss object without from_logits=True. None otherwise."""
    for module in keras_modules():
        for name, kind in PROBABILITY_LOSSES.items():
            if loss is getattr(module.losses, name, None):
                return kind
    for name, kind in PROBABILITY_LOSS_CLASSES.items():
        if isinstance(loss, keras_classes(f"losses.{name}")) and not loss.get_config().get("from_logits"):
            return kind
    return None


def logits_warning(kind: str, y_pred) -> str | None:
    """The warning when predictions given to a probability loss of `kind` look like logits (Keras'
    heuristic: a value outside [0, 1], or categorical rows not summing to 1), else None. A
    probability loss on logits trains to chance (issue 50: 0.06-0.08 accuracy instead of 0.6)."""
    p = np.asarray(y_pred, dtype=np.float64)
    logits = p.size > 0 and (p.min() < 0 or p.max() > 1)
    if kind == "categorical" and p.ndim and p.shape[-1] > 1:
        logits = logits or not np.allclose(p.sum(axis=-1), 1.0, atol=1e-3)
    if not logits:
        return None
    example = "SparseCategoricalCrossentropy" if kind == "categorical" else "BinaryCrossentropy"
    return (f"loss: reads probabilities, but the model's outputs look like logits (outside [0, 1]"
            f"{' or not summing to 1' if kind == 'categorical' else ''}); if the last layer has no "
            f"{'softmax' if kind == 'categorical' else 'sigmoid'}, pass loss=keras.losses.{example}(from_logits=True)")


def class_labels(y, y_pred_shape: tf.TensorShape | None, sparse: bool) -> tuple[tf.Tensor, tf.Tensor | None]:
    """(y with out-of-range class indices set to 0, valid [B] bool), or (y, None) if y holds no class
    indices (or the prediction's shape is not known yet).

    y holds class indices into the prediction's last axis (K > 1 classes) when it has the
    prediction's shape without that axis (or with it as 1) and is integer, or the loss is Keras'
    sparse categorical crossentropy (which casts float labels to integers). An index outside
    [0, K) would abort the step inside the loss: a data-dependent crash outside epsilon.
    """
    if y_pred_shape is None or not y_pred_shape.rank or not isinstance(y, (tf.Tensor, np.ndarray)):
        return y, None
    y = tf.convert_to_tensor(y)
    k, rank = y_pred_shape[-1], y_pred_shape.rank
    if k is None or k < 2 or y.shape.rank is None or not (y.dtype.is_integer or sparse):
        return y, None
    if not (y.shape.rank == rank - 1 or (y.shape.rank == rank and y.shape[-1] == 1)):
        return y, None
    in_range = (y >= tf.zeros([], y.dtype)) & (y < tf.cast(k, y.dtype))
    valid = tf.reduce_all(tf.reshape(in_range, [tf.shape(y)[0], -1]), axis=1)
    return tf.where(in_range, y, tf.zeros_like(y)), valid


def embedding_ids(model: keras.Model, x) -> tuple[object, tf.Tensor | None]:
    """(x with out-of-range token ids set to 0, valid [B] bool), or (x, None) when no input of
    `model` is read directly by an Embedding.

    An id outside [0, input_dim) would abort the step inside the embedding lookup (on CPU): a
    data-dependent crash outside epsilon. Screened: the inputs of a Sequential model whose first
    layer is an Embedding, and the inputs of a functional model that Embedding layers read directly
    (bound: the smallest input_dim among them). Ids computed inside a subclassed model are not seen.
    """
    bounds = _embedding_bounds(model)
    if not bounds:
        return x, None
    flat, valid = list(tf.nest.flatten(x)), None
    for i, bound in bounds.items():
        if i >= len(flat):
            continue
        t = tf.convert_to_tensor(flat[i])
        in_range = (t >= tf.zeros([], t.dtype)) & (t < tf.cast(bound, t.dtype))
        ok = tf.reduce_all(tf.reshape(in_range, [tf.shape(t)[0], -1]), axis=1)
        valid = ok if valid is None else valid & ok
        flat[i] = tf.where(in_range, t, tf.zeros_like(t))
    return tf.nest.pack_sequence_as(x, flat), valid


def _embedding_bounds(model: keras.Model) -> dict[int, int]:
    """Position of a model input -> the smallest input_dim of the Embedding layers reading it directly."""
    embedding = keras_classes("layers.Embedding")
    if isinstance(model, keras_classes("Sequential")):
        first = model.layers[0] if model.layers else None
        return {0: first.input_dim} if isinstance(first, embedding) else {}
    inputs, bounds = list(getattr(model, "inputs", None) or []), {}
    for layer in getattr(model, "layers", []):
        if not isinstance(layer, embedding):
            continue
        try:
            read = layer.input
        except (AttributeError, ValueError):  # not called, or called on several inputs
            continue
        for i, t in enumerate(inputs):
            if read is t:
                bounds[i] = min(bounds.get(i, layer.input_dim), layer.input_dim)
    return bounds


def _unpack(data):
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ConfigError("x, y: a private model trains on (inputs, targets) batches")
    return data[0], data[1]


def _per_example(values: tf.Tensor) -> tf.Tensor:
    if values.shape.rank == 0:
        raise ConfigError("loss: must return one value per example (shape [B]); use a Keras loss with "
                          "reduction=\"none\"")
    if values.shape.rank > 1:
        values = tf.reduce_mean(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)
    return values
