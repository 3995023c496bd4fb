"""Keras callbacks for private training: epsilon in the logs, a hard budget, checkpoints."""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RDP, Accountant, PrivacyLedger


class PrivacyCallback(keras.callbacks.Callback):
    """Adds `epsilon` to each epoch's logs and stops before a step would exceed `max_epsilon`.

    The steps still allowed are those of the ledger's current segment (its sampling scheme, rate
    and noise: `PrivacyLedger.begin`), computed when the callback is made. A stop is said in one
    line at every verbosity (`announce`; the CLI prints its own), naming `budget_name`, the
    parameter the budget came from. Put it before TensorBoard/CSV callbacks so they see the
    epsilon it adds.
    """

    def __init__(self, ledger: PrivacyLedger, delta: float, max_epsilon: float | None = None,
                 accountant: Accountant = RDP, announce: bool = True, budget_name: str = "max_epsilon"):
        super().__init__()
        self.announce = announce  # print `stopped_message` after a budget stop (the CLI prints its own)
        self.budget_name = budget_name
        self.ledger, self.delta, self.accountant = ledger, delta, accountant
        self.max_epsilon = max_epsilon
        # Steps this run may still take: computed from the (possibly resumed) ledger.
        self.allowed: int | None = None
        self.budget_reached = False
        if max_epsilon is not None:
            self.allowed = ledger.steps_within(max_epsilon, delta, accountant)
            self.budget_reached = self.allowed == 0
        self.taken = 0  # steps this fit took: one per batch (steps_per_execution 1, checked at train begin)
        # The batch hooks read no logs: Keras need not copy them to the host (and wait for the step) at each batch.
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None):
        self.taken = 0
        if self.allowed is not None and (k := steps_per_execution(self.model)) != 1:
            raise ConfigError(f"steps_per_execution: {self.budget_name}={self.max_epsilon:g} is checked before every "
                              f"step, so a private model with a budget runs one step per execution; got {k}")
        if self.budget_reached:
            raise BudgetExhausted(self.exhausted_message())

    def on_train_batch_begin(self, batch, logs=None):
        if self.budget_reached:  # e.g. another callback reset stop_training
            raise BudgetExhausted(self.exhausted_message())

    def on_train_batch_end(self, batch, logs=None):
        # Counted on the host, without reading the ledger (which would wait for each step to finish).
        self.taken += 1
        if self.allowed is not None and self.taken >= self.allowed:
            self.budget_reached = True
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["epsilon"] = loggable(self.ledger.epsilon(self.delta, self.accountant))

    def on_train_end(self, logs=None):
        if self.budget_reached and self.announce:
            print(self.stopped_message(), flush=True)

    def _spent(self) -> str:
        steps = self.ledger.total_steps
        return f"epsilon = {self.ledger.epsilon(self.delta, self.accountant):.4g} at delta = {self.delta:.3g} " \
               f"after {steps} step{'s' if steps != 1 else ''}"

    def exhausted_message(self) -> str:
        """Why no step may be taken: the budget, what one more step would spend, what was spent."""
        next_eps = self.accountant.epsilon(self.ledger.segments(extra_steps=1), self.delta)
        q, noise, scheme = self.ledger.record.current[:3]
        return (f"{self.budget_name}={self.max_epsilon:g}: no further step fits in the budget: one more step would "
                f"reach epsilon = {next_eps:.4g} ({scheme} batches, sampling rate {q:.4g}, noise multiplier {noise:.4g}); "
                f"spent so far: {self._spent()}. Raise {self.budget_name} or the noise multiplier")

    def stopped_message(self) -> str:
        """The line printed when training stopped at the budget."""
        return (f"stopped at {self.budget_name}={self.max_epsilon:g}: {self._spent()}; one more step would exceed "
                "the budget")


def loggable(epsilon: float) -> float:
    """epsilon as the logs carry it: Keras' and TensorBoard's logs are float32, so an epsilon beyond
    float32's range (e.g. 6e61 with a noise multiplier of 1e-30) is logged as inf (the accountant's
    value is kept in `results.json`)."""
    return epsilon if epsilon <= np.finfo(np.float32).max else math.inf


def steps_per_execution(model) -> int | str:
    """The train steps one execution of `model`'s train function runs (Keras 2 keeps a variable,
    Keras 3 an int; "auto" when Keras 2 tunes it)."""
    if getattr(model, "_autotune_steps_per_execution", False):
        return "auto"
    value = getattr(model, "_steps_per_execution", None)
    if value is None:
        value = getattr(model, "steps_per_execution", 1)
    return int(value.numpy()) if hasattr(value, "numpy") else int(value or 1)


class BudgetExhausted(Exception):
    """Raised if training would start a step after the privacy budget was reached."""


class CheckpointCallback(keras.callbacks.Callback):
    """Saves model, optimizer, privacy ledger and noise RNG state at the end of every epoch."""

    def __init__(self, manager: tf.train.CheckpointManager, epoch: tf.Variable):
        super().__init__()
        self.manager, self.epoch = manager, epoch

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.assign(epoch + 1)
        self.manager.save(checkpoint_number=epoch + 1)


class StepProgressBar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar in steps, except that an epoch stopped early (a step or time limit, the
    privacy budget) ends at the steps it took (`20/20`), not at a full epoch's (`59/59`).

    Counts a `DPModel`'s `step_count` (one per Keras step), so it adds no per-batch hook. Keras
    uses it instead of its own bar when it is among `fit`'s callbacks.
    """

    def __init__(self):
        super().__init__(count_mode="steps")
        self.epoch_start = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = int(self.model.step_count.numpy())
        super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        taken = int(self.model.step_count.numpy()) - self.epoch_start
        if self.target is not None and 0 < taken < self.target:
            self.target = self.progbar.target = taken
        super().on_epoch_end(epoch, logs)
