"""A filter run's trained model and its serving signatures: the frozen stage-1 VAE (`vae/`) and the
filter (`filter/`, or `filter/user<k>/` per user of a multi-user run; `tfpriv.filter.pipeline.save_filter`).

| signature | inputs | outputs |
|---|---|---|
| `privatize_z` | `z` float32 [N, D], `y_private` int32 [N], `seed` int64 [] | `z`: released codes |
| `privatize_x` | `x` float32 [N, *data], `y_private`, `seed` | `z`: released codes of x's encoder mean |
| `encode`, `decode` | as the VAE's (the frozen stage-1 VAE) | |

A multi-user filter run has `privatize_z_user<k>` / `privatize_x_user<k>` per user instead.
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from tfpriv.errors import UsageError
from tfpriv.filter.pipeline import FILTER_CONFIG, load_filter
from tfpriv.jobs.serving import SEED, Y_PRIVATE, Serving, function, seed_pair, spec
from tfpriv.privae.serving import load_run_vae, vae_functions, vae_variables
from tfpriv.privae.vae import VAE, VAE_CONFIG
from tfpriv.run_folder import FILTER_DIR, VAE_DIR


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
        noise = tf.random.stateless_normal(tf.stack([tf.shape(z)[0], layer.noise_dim]), seed=seed_pair(seed, 0))
        onehot = tf.one_hot(tf.cast(y_private, tf.int32), layer.num_private_classes)
        return layer(z, onehot, noise=noise)

    def privatize_x(self, x, y_private, seed, user: str = "") -> tf.Tensor:
        mean, _ = self.vae.encode(tf.convert_to_tensor(x, tf.float32))
        return self.privatize_z(mean, y_private, seed, user)


def load(run_dir: str) -> TrainedFilter:
    """The frozen VAE and the filter(s) saved in `run_dir`."""
    filter_dir = os.path.join(run_dir, FILTER_DIR)
    if not os.path.isdir(filter_dir):
        raise UsageError(f"run_dir: {run_dir} holds no trained filter (missing {FILTER_DIR}/); a run saves it "
                         "after training")
    if not os.path.isfile(os.path.join(run_dir, VAE_DIR, VAE_CONFIG)):
        raise UsageError(f"run_dir: {run_dir} has a filter but no frozen VAE (missing {VAE_DIR}/{VAE_CONFIG})")
    users = {"": filter_dir} if os.path.isfile(os.path.join(filter_dir, FILTER_CONFIG)) else {
        name: os.path.join(filter_dir, name) for name in sorted(os.listdir(filter_dir))
        if os.path.isfile(os.path.join(filter_dir, name, FILTER_CONFIG))}
    if not users:
        raise UsageError(f"run_dir: {filter_dir} holds no {FILTER_CONFIG}")
    configs = {}
    for name, path in users.items():
        with open(os.path.join(path, FILTER_CONFIG)) as f:
            configs[name] = json.load(f)
    return TrainedFilter(load_run_vae(run_dir), {name: load_filter(path) for name, path in users.items()}, configs)


def _privatize(model: TrainedFilter, user: str):
    """User `user`'s privatize_z and privatize_x as functions of the signature's inputs."""
    def privatize_z(z, y_private, seed):
        return {"z": model.privatize_z(z, y_private, seed, user)}

    def privatize_x(x, y_private, seed):
        return {"z": model.privatize_x(x, y_private, seed, user)}

    return privatize_z, privatize_x


def serving(model: TrainedFilter) -> Serving:
    """The filter's signatures: privatize_z, privatize_x (per user) and the frozen VAE's encode, decode."""
    functions = vae_functions(model.vae, sample=False)
    data_shape = model.vae.encoder.inputs[0].shape[1:]
    variables = vae_variables(model.vae)
    for user, layer in model.filters.items():
        suffix = f"_{user}" if user else ""
        privatize_z, privatize_x = _privatize(model, user)
        functions[f"privatize_z{suffix}"] = function(privatize_z, spec([model.vae.latent_dim], "z"), Y_PRIVATE, SEED)
        functions[f"privatize_x{suffix}"] = function(privatize_x, spec(data_shape, "x"), Y_PRIVATE, SEED)
        variables += list(layer.variables)
    return Serving(functions, variables)
