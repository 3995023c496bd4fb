"""Keras callbacks for private training: epsilon in the logs, a hard budget, checkpoints."""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfpriv.privacy.accounting import PrivacyLedger, max_steps_within


class PrivacyCallback(tf.keras.callbacks.Callback):
    """Adds `epsilon` to each epoch's logs and stops before a step would exceed `max_epsilon`.

    Put it before TensorBoard/CSV callbacks so they see the epsilon it adds.
    """

    def __init__(self, ledger: PrivacyLedger, delta: float, sampling_rate: float, noise: float,
                 max_epsilon: float | None = None, accountant: str = "rdp"):
        super().__init__()
        self.ledger, self.delta, self.accountant = ledger, delta, accountant
        self.q, self.noise = sampling_rate, noise
        self.max_epsilon = max_epsilon
        # Steps this run may still take: computed from the (possibly resumed) ledger.
        self.allowed: int | None = None
        self.budget_reached = False
        if max_epsilon is not None:
            self.allowed = max_steps_within(max_epsilon, delta, sampling_rate, noise, history=ledger.segments(),
                                            accountant=accountant)
            self.budget_reached = self.allowed == 0
        self.start_steps = int(ledger.steps.numpy())

    def on_train_begin(self, logs=None):
        self.start_steps = int(self.ledger.steps.numpy())
        if self.budget_reached:
            self.model.stop_training = True

    def on_train_batch_begin(self, batch, logs=None):
        if self.budget_reached:
            raise BudgetExhausted()

    def on_train_batch_end(self, batch, logs=None):
        if self.allowed is not None and int(self.ledger.steps.numpy()) - self.start_steps >= self.allowed:
            self.budget_reached = True
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["epsilon"] = loggable(self.ledger.epsilon(self.delta, self.accountant))


def loggable(epsilon: float) -> float:
    """epsilon as the logs carry it: Keras' and TensorBoard's logs are float32, so an epsilon beyond
    float32's range (e.g. 6e61 with a noise multiplier of 1e-30) is logged as inf (the accountant's
    value is kept in `results.json`)."""
    return epsilon if epsilon <= np.finfo(np.float32).max else math.inf


class BudgetExhausted(Exception):
    """Raised if Keras would start a step after the privacy budget was reached."""


class CheckpointCallback(tf.keras.callbacks.Callback):
    """Saves model, optimizer, privacy ledger and noise RNG state at the end of every epoch."""

    def __init__(self, manager: tf.train.CheckpointManager, epoch: tf.Variable):
        super().__init__()
        self.manager, self.epoch = manager, epoch

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.assign(epoch + 1)
        self.manager.save(checkpoint_number=epoch + 1)
