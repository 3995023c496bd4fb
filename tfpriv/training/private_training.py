"""What `make_private`'s model does whichever Keras it is: `PrivateTraining`, the DP-SGD training of
a Keras model on a per-example loss (the loss made per-example, out-of-range class labels and token
ids dropped: `tfpriv.training.screening`), mixed into Keras 2's
`tfpriv.training.private_model.PrivateModel` and Keras 3's `tfpriv.training.keras3.PrivateModel`.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
from typing import Callable, Union

import numpy as np
import tensorflow as tf

from tfpriv.compat import converted, keras, keras_classes, keras_modules
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import finite_examples
from tfpriv.privacy.statement import privacy_statement, write_statement
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPTraining
from tfpriv.training.screening import EmbeddingScreen, all_valid, class_labels, index_targets
from tfpriv.training.state import DPState

PerExampleLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
LossLike = Union[PerExampleLoss, str, keras.losses.Loss]


@dataclasses.dataclass(eq=False)
class PrivateTrainingState(DPState):
    """`DPState` and what `PrivateTraining` learns about its model and loss on first use."""

    output_shape: tf.TensorShape | None = None  # y_pred's static shape, once the loss was traced
    embedding_screen: EmbeddingScreen | None = None  # the model's Embeddings, found on the first forward pass
    index_targets: dict[tuple, bool] = dataclasses.field(default_factory=dict)  # by (dtype, y, y_pred shapes)


class PrivateTraining(DPTraining):
    """A Keras model trained with DP-SGD on a per-example loss; batches are (x, y). Mixed into
    `PrivateModel` (Keras 2) and `tfpriv.training.keras3.PrivateModel` (Keras 3)."""

    state_type = PrivateTrainingState
    trains_in_float64 = True  # the user's model and per-example loss, in its dtype (tests/privacy/test_float64.py)

    def __init__(self, model: keras.Model, loss: LossLike, config: DPConfig, num_examples: int,
                 delta: float | None = None, max_epsilon: float | None = None, **kwargs):
        super().__init__(name=kwargs.pop("name", f"private_{model.name}"), **kwargs)
        self.model = model
        self.per_example_loss, self.sparse_loss = per_example_loss(loss, self.keras_module)
        self._privacy = dict(dp=config, num_examples=num_examples, delta=delta, max_epsilon=max_epsilon)

    def compile(self, optimizer="adam", metrics=None, **kwargs):
        """Keras compile; the privacy settings and the loss are those given to `make_private`.
        `jit_compile=True` is refused (`without_xla`); Keras 3's "auto" means no XLA here."""
        if kwargs.get("loss") is not None:
            raise ConfigError("loss: a private model's loss is the one given to make_private (made per-example, so "
                              "each example's gradient is clipped); compile takes the optimizer and metrics")
        kwargs.pop("loss", None)
        if "jit_compile" in kwargs:
            kwargs["jit_compile"] = without_xla(kwargs["jit_compile"])
        super().compile(optimizer=optimizer, metrics=metrics, **self._privacy, **kwargs)
        # `evaluate` may come before any `fit` (which builds the other trackers); `build` keeps this one.
        self.dp_state.trackers["loss"] = self.keras_module.metrics.Mean(name="loss")

    def call(self, x, training=False):
        return self.model(x, training=training)

    def term_spec(self) -> TermSpec:
        return TermSpec(sample=("loss",))

    def private_inputs(self, data):
        """(x, y, drop): drop [B] is NaN for an example whose class label is out of range and 0
        otherwise, so the engine drops that example as it drops non-finite inputs (clip factor 0,
        counted in `dropped`) instead of the loss aborting the step on it. Token ids are screened
        where an Embedding reads them (`loss_terms`)."""
        x, y = _unpack(data)
        drop = tf.zeros(tf.shape(tf.nest.flatten(x)[0])[:1])
        _, labels_valid = self._class_labels(y, self.dp_state.output_shape)
        if labels_valid is not None:
            drop = tf.where(labels_valid, drop, float("nan"))
        return x, y, drop

    def loss_terms(self, data, layout: BatchLayout, training: bool = True) -> LossTerms:
        """The per-example loss; an example one of whose Embeddings got an id outside [0, input_dim)
        (at any depth of the model, `EmbeddingScreen`) has its ids clamped for the forward pass and a
        NaN loss, so its gradient norm is NaN and the engine drops it (clip factor 0, counted in
        `dropped`) whatever the clipping path."""
        x, y = data[0], data[1]
        y_pred, ids_valid = self._screened_forward(x, training)
        # The prediction's static shape says which labels are class indices (`private_inputs`).
        self.dp_state.output_shape = y_pred.shape if isinstance(y_pred, tf.Tensor) else None
        y, _ = self._class_labels(y, self.dp_state.output_shape)  # a dropped example's label made harmless
        loss = _per_example(converted(self.per_example_loss)(y, y_pred))  # the user's loss as AutoGraph runs it
        if ids_valid is not None:
            loss = loss * tf.where(ids_valid, tf.ones([], loss.dtype), tf.constant(float("nan"), loss.dtype))
        return LossTerms({"loss": loss})

    def _screened_forward(self, x, training: bool):
        """(the model's prediction with every Embedding's ids screened, valid [B] bool or None)."""
        screen = self.dp_state.embedding_screen
        if screen is None:
            screen = self.dp_state.embedding_screen = EmbeddingScreen(self.model)
        if not screen.layers:
            return self.model(x, training=training), None
        with screen.screening(tf.shape(tf.nest.flatten(x)[0])[0]) as found:
            y_pred = self.model(x, training=training)
        return y_pred, all_valid(found)

    def _class_labels(self, y, y_pred_shape: tf.TensorShape | None):
        """`class_labels` for this model's loss: labels are indices for Keras' sparse categorical
        crossentropy, or when the loss fails on label K but not on 0 (`index_targets`, once per shape)."""
        indices = self.sparse_loss
        if not indices and y_pred_shape is not None and isinstance(y, (tf.Tensor, np.ndarray)) and not (
                tf.as_dtype(y.dtype).is_integer) and y_pred_shape.rank and y_pred_shape[-1]:
            probed = self.dp_state.index_targets
            key = (tf.as_dtype(y.dtype).name, tuple(y.shape[1:]), tuple(y_pred_shape[1:]))
            if key not in probed:
                probed[key] = index_targets(self.per_example_loss, y, y_pred_shape)
            indices = probed[key]
        return class_labels(y, y_pred_shape, indices)

    def build_extra(self, sample_batch) -> None:
        """Builds this wrapper (called once on the public batch `prepare` passes, so Keras' weight
        saving, e.g. ModelCheckpoint, finds it built) and warns in one line when a probability loss
        gets logits (`logits_warning`): no record decides whether the line is printed."""
        kind = probability_loss(self.per_example_loss)
        x, y = _unpack(sample_batch)
        y_pred = self(x, training=False)
        one_tensor = isinstance(y_pred, tf.Tensor)  # not a dict or list of outputs
        line = logits_warning(kind, y_pred) if kind and one_tensor else None
        if line:
            print(f"tfpriv: {line}", file=sys.stderr, flush=True)  # a log line, as the engine's clipping line
        compiled = self.compiled_metrics_container()
        if compiled is not None:
            # Built here, on the public batch: metric variables created inside the first traced step
            # make tf.function trace the whole private step a second time. Its ids and labels are all
            # in range and its inputs finite, so every example is kept (`_kept`) and this forward serves.
            compiled.update_state(self._class_labels(y, y_pred.shape if one_tensor else None)[0], y_pred)
            compiled.reset_state()

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
        if compiled is None or not compiled.metrics:  # built by `build_extra`: empty means none were given
            return logs
        # A forward pass of its own: the engine's may have run inside a loop (vectorized_map,
        # map_fn), whose tensors this graph cannot read.
        compiled.update_state(*self._kept(data))
        return {**logs, **{m.name: m.result() for m in compiled.metrics}}

    def test_step(self, data):
        y, y_pred = self._kept(data)
        self.dp_state.trackers["loss"].update_state(_per_example(self.per_example_loss(y, y_pred)))
        compiled = self.compiled_metrics_container()
        if compiled is not None:
            compiled.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def _kept(self, data):
        """(labels, predictions) of the examples training keeps: not those with NaN/inf inputs, an
        out-of-range token id or class label, which the engine drops."""
        data, ok = finite_examples(_unpack(data), tf.shape(tf.nest.flatten(data[0])[0])[0])
        x, y = data
        y_pred, ids_valid = self._screened_forward(x, training=False)
        y, valid = self._class_labels(y, y_pred.shape if isinstance(y_pred, tf.Tensor) else None)
        for v in (ids_valid, valid):
            if v is not None:
                ok &= v
        return tf.nest.map_structure(lambda t: tf.boolean_mask(t, ok), (y, y_pred))

    def privacy_statement(self) -> dict:
        """What training has spent so far (`tfpriv.privacy.statement`): `save` and `export` put it in the file."""
        return privacy_statement(self.ledger.raw_segments() if self.ledger is not None else [], self._privacy["dp"],
                                 self._privacy["delta"], has_batch_terms=self.term_spec().has_batch_terms)

    def save(self, filepath, *args, **kwargs):
        """Saves the wrapped Keras model (what was trained; `keras.models.load_model` reads it) with its
        privacy statement (in a `.keras` file: the member `privacy_statement.json`; in a SavedModel
        folder: `assets/privacy_statement.json`; in HDF5: the root attribute `tfpriv_privacy_statement`),
        from which `tfpriv.load_private` continues the ledger."""
        out = self.model.save(filepath, *args, **kwargs)
        write_statement(str(filepath), self.privacy_statement())
        return out

    def export(self, filepath, *args, **kwargs):
        """Exports the wrapped Keras model as a SavedModel for serving (Keras' `Model.export`), its
        privacy statement in `assets/privacy_statement.json`."""
        out = self.model.export(filepath, *args, **kwargs)
        write_statement(str(filepath), self.privacy_statement())
        return out


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
