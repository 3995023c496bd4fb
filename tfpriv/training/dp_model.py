"""`DPModel`: a Keras model whose `train_step` feeds its loss terms to the DP engine.

Subclasses implement `term_spec()` and `loss_terms(x, layout, training)`; everything else
(clipping, noise, accounting of steps, metrics) is shared. Usage, as with any Keras model:

    model.compile(optimizer=tf.keras.optimizers.SGD(1e-3), dp=DPConfig(...))
    model.fit(dataset, epochs=..., steps_per_epoch=...)
"""
from __future__ import annotations

import tensorflow as tf

from tfpriv.privacy.accounting import PrivacyLedger
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rng import stream_generator
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

NON_PRIVATE = DPConfig(aggregation="none", num_partitions=1)


class DPModel(tf.keras.Model):
    """Base class for models trained through `tfpriv.privacy`."""

    def term_spec(self) -> TermSpec:
        raise NotImplementedError(f"{type(self).__name__} must declare its loss terms")

    def loss_terms(self, x, layout: BatchLayout, training: bool = True) -> LossTerms:
        raise NotImplementedError(f"{type(self).__name__} must compute its loss terms")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Randomness inside the loss (reparameterisation, prior samples) draws from `rng`;
        # compile re-seeds it from the DP config's seed. Not tracked by Keras
        # (object.__setattr__): the runner checkpoints it with the ledger.
        object.__setattr__(self, "rng", stream_generator(None, "loss"))

    def compile(self, optimizer="adam", dp: DPConfig | None = None, **kwargs):
        super().compile(optimizer=optimizer, **kwargs)
        # Not tracked by Keras (object.__setattr__): the engine's RNG and the ledger are
        # saved through `tf.train.Checkpoint` by the training runner, not in model weights.
        object.__setattr__(self, "dp_config", dp if dp is not None else NON_PRIVATE)
        object.__setattr__(self, "engine", None)
        with self.distribute_strategy.scope():
            object.__setattr__(self, "rng", stream_generator(self.dp_config.seed, "loss"))
        if getattr(self, "ledger", None) is None:
            with self.distribute_strategy.scope():
                object.__setattr__(self, "ledger", PrivacyLedger())
        object.__setattr__(self, "_trackers", {})

    # -- set-up outside tf.function ---------------------------------------------------------
    def prepare(self, sample_batch) -> DPGradientEngine:
        """Builds variables, the engine and metric trackers; verifies the fast path once."""
        if getattr(self, "engine", None) is not None:
            return self.engine
        if not hasattr(self, "dp_config"):
            raise RuntimeError("call compile() before fit()")
        n = tf.shape(tf.nest.flatten(sample_batch)[0])[0]
        # Variables and the noise generator must live in the distribution strategy's scope.
        with self.distribute_strategy.scope():
            self.loss_terms(sample_batch, BatchLayout.single(n), training=False)  # creates variables
            engine = DPGradientEngine(self.dp_config, self, self.term_spec(), variables=self.trainable_variables)
            if hasattr(self.optimizer, "build"):
                self.optimizer.build(engine.variables)  # slots now, so the train step traces once
        object.__setattr__(self, "engine", engine)
        if self.dp_config.private and self.dp_config.verify:
            engine.verify(self._loss_fn, sample_batch)
        spec = self.term_spec()
        names = ["loss", *spec.sample, *spec.batch]
        self._trackers.update({name: tf.keras.metrics.Mean(name=name) for name in names})
        return engine

    def fit(self, x=None, *args, **kwargs):
        if getattr(self, "engine", None) is None:
            first = next(iter(x)) if isinstance(x, tf.data.Dataset) else tf.nest.map_structure(lambda a: a[:8], x)
            self.prepare(first)
        return super().fit(x, *args, **kwargs)

    @property
    def metrics(self):
        return list(getattr(self, "_trackers", {}).values())

    # -- the step -----------------------------------------------------------------------------
    def _loss_fn(self, x, layout: BatchLayout) -> LossTerms:
        return self.loss_terms(x, layout, training=True)

    def train_step(self, data):
        x = data[0] if isinstance(data, tuple) and len(data) == 1 else data
        grads, logs = self.engine.gradients(self._loss_fn, x)
        self.optimizer.apply_gradients(zip(grads, self.engine.variables))
        if self.dp_config.private:
            self.ledger.steps.assign_add(1)
        spec = self.term_spec()
        logs["loss"] = tf.add_n([logs[k] for k in (*spec.sample, *spec.batch)])
        for name, tracker in self._trackers.items():
            tracker.update_state(logs[name])
        return {name: t.result() for name, t in self._trackers.items()}
