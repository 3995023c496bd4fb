"""Latent priors p(z): standard Gaussian, sparse spike-and-slab mixture, Gaussian mixture.

Each prior gives `log_prob(z) -> [...]` (summed over the latent dimension), `sample(n)`,
and `config()` for saving. Term-wise paper, Sec. 5 (sparse prior of Fig. 1, the 4-component
mixture of Fig. 2).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import tensorflow as tf

from tfpriv.errors import ConfigError

LOG_2PI = math.log(2.0 * math.pi)


def _normal_log_prob(z, mean, var):
    return -0.5 * (LOG_2PI + tf.math.log(var) + tf.square(z - mean) / var)


def _normal(shape, seed, offset: int = 0, rng: tf.random.Generator | None = None):
    """Draws from `rng` (a training step's generator), stateless ones when seeded, else stateful."""
    if rng is not None:
        return rng.normal(shape)
    if seed is None:
        return tf.random.normal(shape)
    return tf.random.stateless_normal(shape, seed=[seed, offset])


def _uniform(shape, seed, offset: int = 2, rng: tf.random.Generator | None = None):
    if rng is not None:
        return rng.uniform(shape)
    if seed is None:
        return tf.random.uniform(shape)
    return tf.random.stateless_uniform(shape, seed=[seed, offset])


class Prior:
    name = "prior"

    def __init__(self, latent_dim: int):
        if latent_dim < 1:
            raise ConfigError(f"latent_dim: must be >= 1, got {latent_dim}")
        self.latent_dim = int(latent_dim)

    def log_prob(self, z: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def sample(self, n: int, seed: int | None = None, rng: tf.random.Generator | None = None) -> tf.Tensor:
        """n draws [n, D]: from `rng` if given (training), else stateless with `seed`, else stateful."""
        raise NotImplementedError

    def config(self) -> dict:
        return {"name": self.name, "latent_dim": self.latent_dim}

    @property
    def is_standard_normal(self) -> bool:
        return False


class StandardNormal(Prior):
    name = "normal"

    def log_prob(self, z):
        return tf.reduce_sum(_normal_log_prob(z, 0.0, 1.0), axis=-1)

    def sample(self, n, seed=None, rng=None):
        return _normal([n, self.latent_dim], seed, rng=rng)

    @property
    def is_standard_normal(self):
        return True


class SparseMixture(Prior):
    """p(z) = prod_d (1 - gamma) N(z_d; 0, 1) + gamma N(z_d; 0, sigma0^2).

    `sigma0_sq` is the spike's VARIANCE. The term-wise paper writes sigma0^2 = 0.05 (the default);
    Mathieu et al.'s code (`Sparse`, `alpha = 0.05` passed to `Normal` as its scale) uses 0.05 as
    the spike's standard deviation, i.e. sigma0_sq = 0.0025 (experiments/privae/README.md).
    """

    name = "sparse"

    def __init__(self, latent_dim: int, gamma: float = 0.8, sigma0_sq: float = 0.05):
        super().__init__(latent_dim)
        if not 0 <= gamma <= 1:
            raise ConfigError(f"gamma: must be in [0, 1], got {gamma}")
        if not sigma0_sq > 0:
            raise ConfigError(f"sigma0_sq: must be > 0, got {sigma0_sq}")
        self.gamma, self.sigma0_sq = float(gamma), float(sigma0_sq)

    def log_prob(self, z):
        slab = math.log(1.0 - self.gamma) + _normal_log_prob(z, 0.0, 1.0) if self.gamma < 1 else None
        spike = math.log(self.gamma) + _normal_log_prob(z, 0.0, self.sigma0_sq) if self.gamma > 0 else None
        parts = [p for p in (slab, spike) if p is not None]
        per_dim = parts[0] if len(parts) == 1 else tf.reduce_logsumexp(tf.stack(parts, 0), axis=0)
        return tf.reduce_sum(per_dim, axis=-1)

    def sample(self, n, seed=None, rng=None):
        spike = _uniform([n, self.latent_dim], seed, rng=rng) < self.gamma
        std = tf.where(spike, self.spike_std, 1.0)
        return _normal([n, self.latent_dim], seed, rng=rng) * std

    @property
    def spike_std(self) -> float:
        """sigma0: standard deviation of the narrow ("off") component."""
        return math.sqrt(self.sigma0_sq)

    def config(self):
        return {**super().config(), "gamma": self.gamma, "sigma0_sq": self.sigma0_sq}


class GaussianMixture(Prior):
    """p(z) = sum_k pi_k N(z; mu_k, sigma^2 I); by default 4 components at the corners of {0,1}^2."""

    name = "mixture"

    def __init__(self, latent_dim: int = 2, means: Sequence[Sequence[float]] | None = None, sigma: float = 0.03,
                 weights: Sequence[float] | None = None):
        super().__init__(latent_dim)
        if means is None:
            if latent_dim != 2:
                raise ConfigError("latent_dim: the mixture prior's default corner means need latent_dim=2")
            means = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
        self.means = np.asarray(means, np.float32)
        if self.means.shape[1] != latent_dim:
            raise ConfigError(f"latent_dim: the mixture prior's means have dimension {self.means.shape[1]}, latent_dim is {latent_dim}")
        k = len(self.means)
        self.weights = np.full([k], 1.0 / k, np.float32) if weights is None else np.asarray(weights, np.float32)
        if not sigma > 0:
            raise ConfigError(f"sigma: must be > 0, got {sigma}")
        self.sigma = float(sigma)

    def component_log_probs(self, z):
        """[..., K]: log pi_k + log N(z; mu_k, sigma^2 I)."""
        diff = z[..., None, :] - self.means
        comp = tf.reduce_sum(_normal_log_prob(diff, 0.0, self.sigma ** 2), axis=-1)
        return comp + np.log(self.weights)

    def log_prob(self, z):
        return tf.reduce_logsumexp(self.component_log_probs(z), axis=-1)

    def sample(self, n, seed=None, rng=None):
        u = _uniform([n], seed, offset=1, rng=rng)
        k = tf.searchsorted(tf.constant(np.cumsum(self.weights)[:-1], tf.float32), u, side="right")
        return tf.gather(tf.constant(self.means), k) + self.sigma * _normal([n, self.latent_dim], seed, rng=rng)

    def config(self):
        return {**super().config(), "means": self.means.tolist(), "sigma": self.sigma, "weights": self.weights.tolist()}


PRIORS = {"normal": StandardNormal, "sparse": SparseMixture, "mixture": GaussianMixture}


def make_prior(name: str, latent_dim: int, **kwargs) -> Prior:
    if name not in PRIORS:
        raise ConfigError(f"prior: must be one of {', '.join(PRIORS)}, got {name!r}")
    return PRIORS[name](latent_dim, **kwargs)


def prior_from_config(config: dict) -> Prior:
    config = dict(config)
    name = config.pop("name")
    return PRIORS[name](**config)
