"""VAE / PriVAE: a Keras model whose loss the DP engine privatizes term by term.

Loss (term-wise paper, eq. 13): L = (1/B) sum_i phi(x_i) + (1/b) sum_j psi(s_j) with the
sample-wise phi(x) = rec(x) + beta * kld(x) (+ optional extra per-example terms) and the
batch-wise psi(s) = alpha * D(q(z), p(z)) over a partition s.

  rec(x_i) = -(1/L) sum_l log p(x_i | z_il)             (L reparameterised samples, eq. 12)
  kld(x_i) = KL(q(z|x_i) ‖ N(0, I))                     (closed form, standard normal prior)
           = (1/L) sum_l log q(z_il|x_i) - log p(z_il)   (Monte Carlo, other priors; eq. 11)

With aggregation `none` and b=1 it is the ordinary (non-private) VAE.
"""
from __future__ import annotations

import json
import math
import os
from typing import Callable, Mapping

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.files import write_json
from tfpriv.privae.divergences import Divergence, divergence_from_config
from tfpriv.privae.likelihoods import get_likelihood, mean_of
from tfpriv.privae.priors import Prior, StandardNormal, prior_from_config
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPModel

LOG_2PI = math.log(2.0 * math.pi)

ExtraTerm = Callable[["VAE", tf.Tensor, tf.Tensor], tf.Tensor]

VAE_CONFIG = "vae.json"  # the VAE's settings, beside encoder.keras and decoder.keras (`save_vae`)


class VAE(DPModel):
    """Variational autoencoder with a structured prior and an optional batch-wise divergence.

    Args:
      encoder: x -> [B, 2D] (posterior mean ‖ log-variance).
      decoder: z [N, D] -> logits ("bernoulli") or locations ("gaussian", "laplace") shaped like x.
      prior: p(z); standard normal by default.
      likelihood: "bernoulli" (data in [0, 1]), "gaussian" (fixed std `obs_std`) or "laplace"
        (fixed scale `obs_scale`); see `tfpriv.privae.likelihoods`.
      beta: weight of the per-example KL term.
      alpha: weight of the batch-wise divergence (psi = alpha * D).
      regularizer: the divergence D(q(z), p(z)), or None.
      num_samples: L, reparameterised samples per example for the reconstruction term.
      extra_sample_terms: name -> f(vae, x, z [B, D]) -> [B], more per-example terms.
    """

    def __init__(self, encoder: keras.Model, decoder: keras.Model, prior: Prior | None = None,
                 likelihood: str = "bernoulli", beta: float = 1.0, alpha: float = 0.0,
                 regularizer: Divergence | None = None, num_samples: int = 1, obs_std: float = 1.0,
                 obs_scale: float = 0.1,
                 extra_sample_terms: Mapping[str, ExtraTerm] | None = None, name: str = "vae", **kwargs):
        super().__init__(name=name, **kwargs)
        self._log_px = get_likelihood(likelihood)
        if num_samples < 1:
            raise ConfigError(f"num_samples: must be >= 1, got {num_samples}")
        if beta < 0 or alpha < 0:
            raise ConfigError(f"{'beta' if beta < 0 else 'alpha'}: must be >= 0, got beta={beta}, alpha={alpha}")
        for param, value in (("obs_std", obs_std), ("obs_scale", obs_scale)):
            if not value > 0:
                raise ConfigError(f"{param}: must be > 0, got {value}")
        self.encoder, self.decoder = encoder, decoder
        self.latent_dim = int(encoder.output_shape[-1]) // 2
        self.prior = prior or StandardNormal(self.latent_dim)
        if self.prior.latent_dim != self.latent_dim:
            raise ConfigError(f"latent_dim: prior has {self.prior.latent_dim} dimensions, encoder gives {self.latent_dim}")
        self.likelihood, self.beta, self.alpha = likelihood, float(beta), float(alpha)
        self.regularizer = regularizer if alpha > 0 else None
        self.num_samples, self.obs_std, self.obs_scale = int(num_samples), float(obs_std), float(obs_scale)
        self.extra_sample_terms = dict(extra_sample_terms or {})

    # -- the model's pieces -------------------------------------------------------------------
    def encode(self, x, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        h = self.encoder(x, training=training)
        mean, logvar = tf.split(h, 2, axis=-1)
        return mean, logvar

    def decode_params(self, z, training: bool = False) -> tf.Tensor:
        """Logits (Bernoulli) or locations (Gaussian, Laplace) of p(x|z)."""
        return self.decoder(z, training=training)

    def decode(self, z, training: bool = False) -> tf.Tensor:
        """Mean of p(x|z)."""
        return mean_of(self.likelihood, self.decode_params(z, training))

    def sample(self, n: int, seed: int | None = None) -> tf.Tensor:
        return self.decode(self.prior.sample(n, seed))

    def call(self, x, training=False):
        mean, _ = self.encode(x, training)
        return self.decode(mean, training)

    def log_px_given_z(self, x, params, data_ndim: int) -> tf.Tensor:
        """log p(x|z) summed over the last `data_ndim` (data) axes; x broadcasts against params."""
        scale = self.obs_std if self.likelihood == "gaussian" else self.obs_scale
        return tf.reduce_sum(self._log_px(x, params, scale), axis=list(range(-data_ndim, 0)))

    # -- loss terms for the DP engine -------------------------------------------------------------
    def term_spec(self) -> TermSpec:
        sample = ("rec", "kld", *self.extra_sample_terms)
        return TermSpec(sample=sample, batch=("reg",) if self.regularizer is not None else ())

    def loss_terms(self, x, layout: BatchLayout, training: bool = True) -> LossTerms:
        x = tf.convert_to_tensor(x, tf.float32)
        mean, logvar = self.encode(x, training)
        batch = tf.shape(mean)[0]
        eps = self.rng.normal(tf.stack([batch, self.num_samples, self.latent_dim]))
        z = mean[:, None, :] + tf.exp(0.5 * logvar)[:, None, :] * eps                   # [B, L, D]
        # Decode all L samples at once, rows example-major ([B, L] flattened) as the engine expects.
        params = self.decode_params(tf.reshape(z, [-1, self.latent_dim]), training)
        params = tf.reshape(params, tf.concat([[batch, self.num_samples], tf.shape(params)[1:]], 0))
        rec = -tf.reduce_mean(self.log_px_given_z(x[:, None], params, x.shape.rank - 1), axis=1)
        if self.prior.is_standard_normal:
            kld = 0.5 * tf.reduce_sum(tf.exp(logvar) + tf.square(mean) - 1.0 - logvar, axis=-1)
        else:
            log_q = -0.5 * tf.reduce_sum(LOG_2PI + logvar[:, None] + tf.square(eps), axis=-1)
            kld = tf.reduce_mean(log_q - self.prior.log_prob(z), axis=1)
        sample = {"rec": rec, "kld": self.beta * kld}
        for name, fn in self.extra_sample_terms.items():
            sample[name] = fn(self, x, z[:, 0])
        if self.regularizer is None:
            return LossTerms(sample)
        grouped = [layout.gather(t) for t in (z[:, 0], mean, logvar)]
        reg = self.regularizer(*grouped, layout.mask, self.prior, self.rng)
        return LossTerms(sample, {"reg": self.alpha * reg})

    # -- saving ----------------------------------------------------------------------------------
    def config_dict(self) -> dict:
        return {
            "prior": self.prior.config(),
            "likelihood": self.likelihood,
            "beta": self.beta,
            "alpha": self.alpha,
            "regularizer": self.regularizer.config() if self.regularizer is not None else None,
            "num_samples": self.num_samples,
            "obs_std": self.obs_std,
            "obs_scale": self.obs_scale,
        }

    def save_vae(self, path: str) -> None:
        """Saves encoder, decoder (Keras format) and the VAE's settings to a directory."""
        os.makedirs(path, exist_ok=True)
        self.encoder.save(os.path.join(path, "encoder.keras"))
        self.decoder.save(os.path.join(path, "decoder.keras"))
        write_json(os.path.join(path, VAE_CONFIG), self.config_dict(), default=None)


def load_vae(path: str) -> VAE:
    """Inverse of `VAE.save_vae` (extra sample terms are training-only and not restored)."""
    with open(os.path.join(path, VAE_CONFIG)) as f:
        config = json.load(f)
    encoder = keras.models.load_model(os.path.join(path, "encoder.keras"), compile=False)
    decoder = keras.models.load_model(os.path.join(path, "decoder.keras"), compile=False)
    return VAE(encoder, decoder, prior=prior_from_config(config["prior"]), likelihood=config["likelihood"],
               beta=config["beta"], alpha=config["alpha"], regularizer=divergence_from_config(config["regularizer"]),
               num_samples=config["num_samples"], obs_std=config["obs_std"],
               obs_scale=config.get("obs_scale", 0.1))  # saved before the Laplace likelihood existed
