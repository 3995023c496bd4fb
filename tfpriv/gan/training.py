"""Running a private GAN: Poisson batches, checkpoints with the ledger, epsilon logs, budget stop.

The GAN counterpart of `tfpriv.training.runner.fit_private`. One Keras step is one private
critic step (the generator step rides on every `critic_steps`-th one), so an epoch is
round(1/q) critic steps, `plan_privacy` calibrates the noise over exactly the steps the
accountant composes, and `PrivacyCallback` stops before a step would exceed `max_epsilon`.
Checkpoints hold both networks, both optimizers, the ledger, the engine's noise RNG, the
model's latent RNG and the epoch, so a resumed run continues its epsilon.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tfpriv.data.sampling import make_dataset, new_sampling_seed
from tfpriv.gan.base import PrivateWGAN
from tfpriv.training.callbacks import CheckpointCallback, PrivacyCallback
from tfpriv.training.runner import PrivacyPlan, RunState, continue_plan, read_ledger

GENERATOR_FILE = "generator.keras"
GAN_CONFIG_FILE = "gan.json"


def gan_dataset(images: np.ndarray, labels: np.ndarray | None, plan: PrivacyPlan, seed: int,
                start_step: int = 0) -> tuple[tf.data.Dataset, float, int]:
    """Endless batches {"image"[, "label"]}: a fresh Poisson (or shuffled) batch per critic step,
    the batch of critic step s a function of (seed, s)."""
    if labels is None:
        ds, q, steps = make_dataset(images, plan.batch_size, plan.sampling, seed, start_step)
        return ds.map(_image_only), q, steps
    ds, q, steps = make_dataset((images, np.asarray(labels, np.int32)), plan.batch_size, plan.sampling, seed,
                                start_step)
    return ds.map(_image_and_label), q, steps


def _image_only(x):
    return {"image": x}


def _image_and_label(x, y):
    return {"image": x, "label": y}


class Limit(tf.keras.callbacks.Callback):
    """Stops training after `minutes` of wall time or at `max_steps` critic steps (checked every step)."""

    def __init__(self, minutes: float | None = None, max_steps: int | None = None):
        super().__init__()
        self.seconds = minutes * 60.0 if minutes else None
        self.max_steps = max_steps or None
        self.start = time.time()
        self.reached = False

    def on_train_begin(self, logs=None):
        self.start = time.time()
        if self.max_steps and int(self.model.critic_step_count.numpy()) >= self.max_steps:
            self.reached = True
            self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        late = self.seconds is not None and time.time() - self.start >= self.seconds
        done = self.max_steps is not None and int(self.model.critic_step_count.numpy()) >= self.max_steps
        if late or done:
            self.reached = True
            self.model.stop_training = True


class Monitor(tf.keras.callbacks.Callback):
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
        self.start = time.time() - (self.records[-1]["seconds"] if self.records else 0.0)

    def _record(self, epoch: int, logs) -> None:
        ledger = self.model.ledger
        rec = {"epoch": epoch, "critic_steps": int(self.model.critic_step_count.numpy()),
               "epsilon": ledger.epsilon(self.delta) if self.private else math.inf,
               "seconds": time.time() - self.start}
        rec.update({k: float(v) for k, v in (logs or {}).items() if k != "epsilon"})
        if self.score_fn is not None:
            t0 = time.time()
            rec.update(self.score_fn(self.model))
            self.seconds_scoring += time.time() - t0
        self.records.append(rec)
        if self.path:
            with open(self.path + ".tmp", "w") as f:
                json.dump(self.records, f, indent=1, default=str)
            os.replace(self.path + ".tmp", self.path)

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and int(self.model.critic_step_count.numpy()) % self.every_steps == 0:
            self._record(None, logs)

    def on_epoch_end(self, epoch, logs=None):
        if not self.every_steps and (epoch + 1) % self.every == 0:
            self._record(epoch + 1, logs)


def fit_gan(model: PrivateWGAN, images: np.ndarray, labels: np.ndarray | None, plan: PrivacyPlan,
            d_optimizer: tf.keras.optimizers.Optimizer, g_optimizer: tf.keras.optimizers.Optimizer,
            output_dir: str, seed: int | None = None, verbose: int = 2, max_minutes: float | None = None,
            max_steps: int | None = None, monitor: Monitor | None = None, extra_callbacks: Sequence[tf.keras.callbacks.Callback] = ()) -> dict:
    """Compiles and fits the GAN under `plan`; resumes from `output_dir/checkpoints` if present.

    `seed` seeds the batch sampling (None: from the OS); the checkpoint keeps it, and a resumed
    run continues the batches from the critic steps already taken.
    """
    history = read_ledger(output_dir)
    if plan.config.private and list(plan.history) != [s for s in history if s[2] > 0]:
        plan = continue_plan(plan, history)
    probe, _, _ = gan_dataset(images, labels, plan, 0)
    model.compile(d_optimizer, g_optimizer, dp=plan.config)
    engine = model.prepare(next(iter(probe)))
    state = RunState(new_sampling_seed() if seed is None else seed)
    epoch = state.epoch
    checkpoint = tf.train.Checkpoint(generator=model.generator, critic=model.critic, d_optimizer=d_optimizer,
                                     g_optimizer=g_optimizer, ledger=model.ledger, noise=engine.generator,
                                     latent_rng=model.rng, critic_step_count=model.critic_step_count, run=state)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(output_dir, "checkpoints"), max_to_keep=2)
    resumed = manager.latest_checkpoint is not None
    if resumed:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    dataset, q, steps_per_epoch = gan_dataset(images, labels, plan, int(state.sampling_seed.numpy()),
                                              int(model.critic_step_count.numpy()))
    private = plan.config.private
    noise = plan.effective_noise_multiplier
    if private:
        model.ledger.begin(q, noise)
    privacy = PrivacyCallback(model.ledger, plan.delta, q, noise, plan.max_epsilon) if private else None
    limit = Limit(max_minutes, max_steps) if (max_minutes or max_steps) else None
    callbacks = [c for c in (privacy, monitor, limit) if c is not None]
    callbacks += [CheckpointCallback(manager, epoch), *extra_callbacks]
    initial_epoch = int(epoch.numpy())
    history: dict = {}
    start = time.time()
    if initial_epoch < plan.epochs and not (privacy and privacy.allowed == 0):
        hist = model.fit(dataset, epochs=plan.epochs, initial_epoch=initial_epoch,
                         steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=verbose)
        history = {k: [float(v) for v in vs] for k, vs in hist.history.items()}
    seconds = time.time() - start
    critic_steps = int(model.critic_step_count.numpy())
    return {
        "epsilon": model.ledger.epsilon(plan.delta) if private else math.inf,
        "steps": model.ledger.total_steps if private else critic_steps,
        "critic_steps": critic_steps,
        "generator_steps": int(g_optimizer.iterations.numpy()),
        "epochs_completed": int(epoch.numpy()),
        "steps_per_epoch": steps_per_epoch,
        "resumed": resumed,
        "budget_reached": bool(privacy and privacy.budget_reached),
        "limit_reached": bool(limit and limit.reached),
        "train_seconds": seconds,
        "scoring_seconds": monitor.seconds_scoring if monitor is not None else 0.0,
        "history": history,
        "plan": plan,
    }


def save_generator(model: PrivateWGAN, directory: str, config: dict) -> str:
    """Writes `generator.keras` and `gan.json` (architecture settings) for `--mode=sample`."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, GENERATOR_FILE)
    model.generator.save(path)
    with open(os.path.join(directory, GAN_CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return path
