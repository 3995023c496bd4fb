"""`make_private`: DP-SGD for a user's own Keras model in one call (cf. Opacus' `make_private`).

    dp_model = tfpriv.make_private(keras_model, loss=per_example_loss_fn,
                                   config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
                                   num_examples=len(x_train), batch_size=64, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x_train, y_train, epochs=2)    # history.history["epsilon"]
    dp_model.save("m.keras")                              # saves keras_model itself

`per_example_loss_fn(y_true, y_pred)` returns one value per example (a Keras loss with
`reduction=NONE` works). The wrapped model's loss is one sample-wise term, so each example's
gradient is clipped at C and the sum noised with std zC (DP-SGD); the engine's ghost-norm rules
make it one backward pass for Dense and Conv layers.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPModel

PerExampleLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


class PrivateModel(DPModel):
    """A Keras model trained with DP-SGD on a per-example loss; batches are (x, y)."""

    def __init__(self, model: tf.keras.Model, loss: PerExampleLoss, config: DPConfig, num_examples: int,
                 delta: float | None = None, max_epsilon: float | None = None, **kwargs):
        super().__init__(name=kwargs.pop("name", f"private_{model.name}"), **kwargs)
        self.model = model
        self.per_example_loss = loss
        self._privacy = dict(dp=config, num_examples=num_examples, delta=delta, max_epsilon=max_epsilon)

    def compile(self, optimizer="adam", metrics=None, **kwargs):
        """Keras compile; the privacy settings are those given to `make_private`."""
        super().compile(optimizer=optimizer, metrics=metrics, **self._privacy, **kwargs)

    def call(self, x, training=False):
        return self.model(x, training=training)

    def term_spec(self) -> TermSpec:
        return TermSpec(sample=("loss",))

    def loss_terms(self, data, layout: BatchLayout, training: bool = True) -> LossTerms:
        x, y = _unpack(data)
        y_pred = self.model(x, training=training)
        object.__setattr__(self, "_predictions", y_pred)  # for the compiled metrics of this step (same graph)
        return LossTerms({"loss": _per_example(self.per_example_loss(y, y_pred))})

    def step_logs(self, logs: dict) -> dict:
        return logs

    def metric_names(self) -> list[str]:
        return ["loss"]

    @property
    def metrics(self):
        compiled = self.compiled_metrics.metrics if getattr(self, "compiled_metrics", None) is not None else []
        return super().metrics + list(compiled)

    def train_step(self, data):
        logs = super().train_step(data)
        x, y = _unpack(data)
        # The per_example path evaluates the loss inside vectorized_map: predict again there.
        y_pred = self(x, training=False) if self.engine.per_example else self._predictions
        self.compiled_metrics.update_state(y, y_pred)
        return {**logs, **{m.name: m.result() for m in self.compiled_metrics.metrics}}

    def test_step(self, data):
        x, y = _unpack(data)
        y_pred = self(x, training=False)
        self._trackers["loss"].update_state(tf.reduce_mean(_per_example(self.per_example_loss(y, y_pred))))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def save(self, filepath, *args, **kwargs):
        """Saves the wrapped Keras model (what was trained; `tf.keras.models.load_model` reads it)."""
        return self.model.save(filepath, *args, **kwargs)


def _unpack(data):
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ConfigError("x, y: a private model trains on (inputs, targets) batches")
    return data[0], data[1]


def _per_example(values: tf.Tensor) -> tf.Tensor:
    if values.shape.rank == 0:
        raise ConfigError("loss: must return one value per example (shape [B]); use a Keras loss with "
                          "reduction=tf.keras.losses.Reduction.NONE")
    if values.shape.rank > 1:
        values = tf.reduce_mean(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)
    return values


def make_private(model: tf.keras.Model, loss: PerExampleLoss, config: DPConfig, num_examples: int,
                 batch_size: int, delta: float | None = None, max_epsilon: float | None = None,
                 target_epsilon: float | None = None, epochs: int | None = None) -> PrivateModel:
    """Wraps `model` for DP-SGD with `config` at expected batch size `batch_size` over `num_examples`.

    With `target_epsilon` (and `epochs`) the noise multiplier is calibrated by the RDP accountant
    for that many epochs of Poisson-sampled steps instead of taken from `config`.
    """
    from tfpriv.training.runner import plan_privacy
    if not config.private:
        raise ConfigError(f"config.aggregation: make_private needs a private mode, got {config.aggregation!r}")
    if config.aggregation not in ("micro", "termwise"):
        raise ConfigError(f"config.aggregation: a per-example loss is clipped per example (micro), got {config.aggregation!r}")
    if (target_epsilon is None) != (epochs is None):
        raise ConfigError("target_epsilon, epochs: give both (to calibrate the noise) or neither")
    plan = plan_privacy(config, TermSpec(sample=("loss",)), num_examples, batch_size, epochs or 1,
                        delta=delta, target_epsilon=target_epsilon, max_epsilon=max_epsilon)
    return PrivateModel(model, loss, plan.config, num_examples, plan.delta, max_epsilon)
