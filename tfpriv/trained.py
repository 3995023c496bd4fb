"""The trained model of a run folder: `load(run_dir)`, whichever family trained it.

A run folder holds what its job saved after training: a (Pri)VAE run `vae/` (`VAE.save_vae`), a
GAN run `generator.keras` + `gan.json` (`tfpriv.gan.training.save_generator`), a filter run its
frozen VAE in `vae/` and the filter in `filter/` (one user) or `filter/user<k>/` (several users;
`tfpriv.filter.pipeline.save_filter`). `load` returns, respectively:

- `tfpriv.models.vae.VAE`: `encode(x) -> (mean, logvar)`, `decode(z)`, `sample(n, seed)`;
- `TrainedGenerator`: the Keras generator and `sample(n, seed, labels=None)`;
- `TrainedFilter`: the frozen VAE, the filter(s) and `privatize_x` / `privatize_z`.

Randomness is an explicit integer seed drawn with stateless ops, so the same (inputs, seed)
give the same outputs here and in the exported SavedModel (`tfpriv.export`).
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.models.vae import VAE, load_vae

VAE_DIR, FILTER_DIR = "vae", "filter"


def _seed_pair(seed, stream: int) -> tf.Tensor:
    """The stateless seed [seed, stream] (int64) of one draw."""
    return tf.stack([tf.cast(seed, tf.int64), tf.constant(stream, tf.int64)])


class TrainedGenerator:
    """A trained GAN generator: `sample(n, seed[, labels])` -> images [n, 28, 28, 1] in (0, 1).

    The latents are N(0, I) drawn statelessly from `seed`; a conditional generator needs one
    integer label in [0, num_classes) per image."""

    def __init__(self, generator: keras.Model, num_classes: int | None, config: dict):
        self.generator, self.num_classes, self.config = generator, num_classes, dict(config)
        self.latent_size = int(generator.inputs[0].shape[-1])

    @property
    def conditional(self) -> bool:
        return self.num_classes is not None

    def sample(self, n, seed, labels=None) -> tf.Tensor:
        latent = tf.random.stateless_normal(tf.stack([n, self.latent_size]), seed=_seed_pair(seed, 0))
        if not self.conditional:
            if labels is not None:
                raise UsageError("labels: this generator is unconditional; give no labels")
            return self.generator(latent, training=False)
        if labels is None:
            raise UsageError(f"labels: this generator is conditional; give n labels in [0, {self.num_classes})")
        labels = tf.cast(labels, tf.int32)
        tf.debugging.assert_equal(tf.shape(labels)[0], tf.cast(n, tf.int32), message="labels: need n labels")
        return self.generator([latent, labels], training=False)


class TrainedFilter:
    """A trained generative privacy filter with its frozen VAE.

    `filters` maps a user name to its filter layer: "" for a single-user run, "user1", "user2",
    ... for a multi-user run. The filter's noise w ~ N(0, I) is drawn statelessly from `seed`.
    - `privatize_z(z, y_private, seed, user="")`: filtered codes z + W [w; onehot(y_private)];
    - `privatize_x(x, y_private, seed, user="")`: the same for the encoder mean of x (the codes
      the filter was trained on); `vae.decode` turns released codes into data."""

    def __init__(self, vae: VAE, filters: dict, configs: dict[str, dict]):
        self.vae, self.filters, self.configs = vae, dict(filters), dict(configs)

    def _layer(self, user: str):
        if user not in self.filters:
            raise UsageError(f"user: must be one of {sorted(self.filters)}, got {user!r}")
        return self.filters[user]

    def privatize_z(self, z, y_private, seed, user: str = "") -> tf.Tensor:
        layer = self._layer(user)
        z = tf.convert_to_tensor(z, tf.float32)
        noise = tf.random.stateless_normal(tf.stack([tf.shape(z)[0], layer.noise_dim]), seed=_seed_pair(seed, 0))
        onehot = tf.one_hot(tf.cast(y_private, tf.int32), layer.num_private_classes)
        return layer(z, onehot, noise=noise)

    def privatize_x(self, x, y_private, seed, user: str = "") -> tf.Tensor:
        mean, _ = self.vae.encode(tf.convert_to_tensor(x, tf.float32))
        return self.privatize_z(mean, y_private, seed, user)


def load(run_dir: str):
    """The trained model of the run in `run_dir`: a `VAE`, a `TrainedGenerator` or a `TrainedFilter`.

    Example:
        A run folder written by the command line (`tfpriv --output_dir=runs/fm ...`) or by
        `Synthesizer.save`:

            model = tfpriv.load("runs/fm")
            images = model.sample(16, seed=0)   # a VAE or a GAN's generator: 16 private samples
    """
    from tfpriv.filter.pipeline import FILTER_CONFIG, load_filter
    from tfpriv.gan.training import GAN_CONFIG_FILE, GENERATOR_FILE

    if not os.path.isdir(run_dir):
        raise UsageError(f"run_dir: {run_dir} is not a directory")
    vae_dir, filter_dir = os.path.join(run_dir, VAE_DIR), os.path.join(run_dir, FILTER_DIR)
    has_vae = os.path.isfile(os.path.join(vae_dir, "vae.json"))
    if os.path.isdir(filter_dir):
        if not has_vae:
            raise UsageError(f"run_dir: {run_dir} has a filter but no frozen VAE (missing {VAE_DIR}/vae.json)")
        users = {"": filter_dir} if os.path.isfile(os.path.join(filter_dir, FILTER_CONFIG)) else {
            name: os.path.join(filter_dir, name) for name in sorted(os.listdir(filter_dir))
            if os.path.isfile(os.path.join(filter_dir, name, FILTER_CONFIG))}
        if not users:
            raise UsageError(f"run_dir: {filter_dir} holds no {FILTER_CONFIG}")
        configs = {}
        for name, path in users.items():
            with open(os.path.join(path, FILTER_CONFIG)) as f:
                configs[name] = json.load(f)
        return TrainedFilter(load_vae(vae_dir), {name: load_filter(path) for name, path in users.items()}, configs)
    if os.path.isfile(os.path.join(run_dir, GENERATOR_FILE)):
        config_path = os.path.join(run_dir, GAN_CONFIG_FILE)
        if not os.path.isfile(config_path):
            raise UsageError(f"run_dir: {run_dir} has a generator but no {GAN_CONFIG_FILE} (its settings)")
        with open(config_path) as f:
            config = json.load(f)
        generator = keras.models.load_model(os.path.join(run_dir, GENERATOR_FILE), compile=False)
        return TrainedGenerator(generator, config.get("num_classes"), config)
    if has_vae:
        return load_vae(vae_dir)
    raise UsageError(f"run_dir: {run_dir} holds no trained model ({VAE_DIR}/vae.json, {GENERATOR_FILE} or "
                     f"{FILTER_DIR}/); a run saves it after training")
