"""GAN-specific training callbacks and the generator file; the fit loop is `tfpriv.training.runner.fit_private`.

One Keras step is one private critic step (the generator step rides on every `critic_steps`-th
one, `PrivateWGAN.after_private_step`), so an epoch is round(1/q) critic steps and the model's
`step_count` counts critic steps. `Limit` stops at a wall-time or critic-step limit; `Monitor`
scores the generator during training into `progress.json`.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable


from tfpriv.compat import keras
from tfpriv.files import write_json
from tfpriv.gan.base import PrivateWGAN
from tfpriv.run_folder import GAN_CONFIG_FILE, GENERATOR_FILE


class Limit(keras.callbacks.Callback):
    """Stops training after `minutes` of wall time or at `max_steps` critic steps (checked every step);
    `reason` says which stopped it ("max_steps" or "minutes"), so that the stop can be announced."""

    def __init__(self, minutes: float | None = None, max_steps: int | None = None):
        super().__init__()
        self.seconds = minutes * 60.0 if minutes else None
        self.max_steps = max_steps or None
        self.start = time.time()
        self.reason: str | None = None

    @property
    def reached(self) -> bool:
        return self.reason is not None

    def on_train_begin(self, logs=None):
        self.start = time.time()
        if self.max_steps and int(self.model.step_count.numpy()) >= self.max_steps:
            self.stop("max_steps")

    def on_train_batch_end(self, batch, logs=None):
        if self.max_steps is not None and int(self.model.step_count.numpy()) >= self.max_steps:
            self.stop("max_steps")
        elif self.seconds is not None and time.time() - self.start >= self.seconds:
            self.stop("minutes")

    def stop(self, reason: str) -> None:
        self.reason = reason
        self.model.stop_training = True


class Monitor(keras.callbacks.Callback):
    """Every `every` epochs (or `every_steps` critic steps): epsilon, wall time, the step's logs
    and `score_fn(model)` appended to `records` (and to the JSON file `path`)."""

    def __init__(self, delta: float, every: int, score_fn: Callable | None, private: bool,
                 path: str | None = None, every_steps: int = 0):
        super().__init__()
        self.delta, self.every, self.every_steps = delta, max(1, every), every_steps
        self.score_fn, self.private, self.path = score_fn, private, path
        self.records: list[dict] = []
        self.start = time.time()
        self.seconds_scoring = 0.0  # wall time spent in score_fn (not training)
        if path and os.path.isfile(path):
            with open(path) as f:
                self.records = json.load(f)

    def on_train_begin(self, logs=None):
        # A run resumed from its last checkpoint takes the steps after it again: their rows are
        # dropped and made again (once each, as in the uninterrupted run).
        done = int(self.model.step_count.numpy())
        kept = [r for r in self.records if r["critic_steps"] <= done]
        if len(kept) < len(self.records):
            self.records = kept
            if self.path:
                write_json(self.path, self.records, indent=1)
        self.start = time.time() - (self.records[-1]["seconds"] if self.records else 0.0)

    def _record(self, epoch: int, logs) -> None:
        rec = {"epoch": epoch, "critic_steps": int(self.model.step_count.numpy()),
               "epsilon": self.model.epsilon(self.delta),
               "seconds": time.time() - self.start}
        rec.update({k: float(v) for k, v in (logs or {}).items() if k != "epsilon"})
        if self.score_fn is not None:
            t0 = time.time()
            rec.update(self.score_fn(self.model))
            self.seconds_scoring += time.time() - t0
        self.records.append(rec)
        if self.path:
            write_json(self.path, self.records, indent=1)

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and int(self.model.step_count.numpy()) % self.every_steps == 0:
            self._record(None, logs)

    def on_epoch_end(self, epoch, logs=None):
        if not self.every_steps and (epoch + 1) % self.every == 0:
            self._record(epoch + 1, logs)


def save_generator(model: PrivateWGAN, directory: str, config: dict) -> str:
    """Writes `generator.keras` and `gan.json` (architecture settings) for `--mode=sample`."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, GENERATOR_FILE)
    model.generator.save(path)
    write_json(os.path.join(directory, GAN_CONFIG_FILE), config, sort_keys=True, default=None)
    return path
