"""A GAN run's trained model and its serving signature: the generator a run saves
(`generator.keras` and its settings `gan.json`, `tfpriv.gan.training.save_generator`).

| signature | inputs | outputs |
|---|---|---|
| `sample` | `n` int32 [], `seed` int64 [] (+ `labels` int32 [n] if conditional) | `x` [n, H, W, C] (28, 28, 1 from train.py) |
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.jobs.serving import LABELS, N, SEED, Serving, function, seed_pair
from tfpriv.run_folder import GAN_CONFIG_FILE, GENERATOR_FILE


class TrainedGenerator:
    """A trained GAN generator: `sample(n, seed[, labels])` -> images [n, H, W, C] in (0, 1).

    The latents are N(0, I) drawn statelessly from `seed`; a conditional generator needs one
    integer label in [0, num_classes) per image."""

    def __init__(self, generator: keras.Model, num_classes: int | None, config: dict):
        self.generator, self.num_classes, self.config = generator, num_classes, dict(config)
        self.latent_size = int(generator.inputs[0].shape[-1])

    @property
    def conditional(self) -> bool:
        return self.num_classes is not None

    def sample(self, n, seed, labels=None) -> tf.Tensor:
        latent = tf.random.stateless_normal(tf.stack([n, self.latent_size]), seed=seed_pair(seed, 0))
        if not self.conditional:
            if labels is not None:
                raise UsageError("labels: this generator is unconditional; give no labels")
            return self.generator(latent, training=False)
        if labels is None:
            raise UsageError(f"labels: this generator is conditional; give n labels in [0, {self.num_classes})")
        labels = tf.cast(labels, tf.int32)
        tf.debugging.assert_equal(tf.shape(labels)[0], tf.cast(n, tf.int32), message="labels: need n labels")
        return self.generator([latent, labels], training=False)


def load(run_dir: str) -> TrainedGenerator:
    """The generator saved in `run_dir`."""
    if not os.path.isfile(os.path.join(run_dir, GENERATOR_FILE)):
        raise UsageError(f"run_dir: {run_dir} holds no trained generator (missing {GENERATOR_FILE}); a run saves "
                         "it after training")
    config_path = os.path.join(run_dir, GAN_CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise UsageError(f"run_dir: {run_dir} has a generator but no {GAN_CONFIG_FILE} (its settings)")
    with open(config_path) as f:
        config = json.load(f)
    generator = keras.models.load_model(os.path.join(run_dir, GENERATOR_FILE), compile=False)
    return TrainedGenerator(generator, config.get("num_classes"), config)


def serving(model: TrainedGenerator) -> Serving:
    """The generator's signature: sample."""
    if model.conditional:
        sample = function(lambda n, seed, labels: {"x": model.sample(n, seed, labels)}, N, SEED, LABELS)
    else:
        sample = function(lambda n, seed: {"x": model.sample(n, seed)}, N, SEED)
    return Serving({"sample": sample}, list(model.generator.variables))
