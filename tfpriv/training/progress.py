"""A sign of life during long epochs at `verbose=2`, which prints one line per epoch at its end.

The main job's first epoch (which also traces and checks the private step) took 74 s without a line,
and a one-epoch fit printed nothing before its end (Keras prints `Epoch 1/N` only when N > 1).
"""
from __future__ import annotations

import time
from typing import Callable

from tfpriv.compat import keras


class Heartbeat(keras.callbacks.Callback):
    """At `verbose=2` (a private model's `fit` adds it): `Epoch 1/1` when Keras prints no epoch line (one
    epoch), and `  epoch E: step S/T (N s)` whenever `every_seconds` passed since the epoch's start
    or the last such line. `clock` is the time source (seconds)."""

    def __init__(self, steps_per_epoch: int, every_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.steps_per_epoch, self.every_seconds, self.clock = steps_per_epoch, every_seconds, clock
        self.epoch, self.start, self.last = 0, 0.0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.start = epoch, self.clock()
        self.last = self.start
        epochs = self.params.get("epochs") if self.params else None
        if epochs == 1:
            print(f"Epoch 1/1 ({self.steps_per_epoch} steps)", flush=True)

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if now - self.last >= self.every_seconds:
            self.last = now
            print(f"  epoch {self.epoch + 1}: step {batch + 1}/{self.steps_per_epoch} ({now - self.start:.0f} s)",
                  flush=True)
