"""Stage 1 for the filter pipeline: train the (frozen) VAE once and expose `encode`/`decode`.

Uses the project's `tfpriv.models.vae.VAE` when it exists; otherwise a minimal private Keras VAE
(`_MinimalVAE`: reparameterised ELBO with Bernoulli logits or unit-variance Gaussian likelihood,
β-weighted KL, optional per-example extra terms) so the filter can run before that class lands.
Stages 2-3 only see the returned callables, so any encoder works.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from tfpriv.filter.architectures import build_vae_networks, make_lipschitz_decoder_term


@dataclasses.dataclass
class Stage1:
    encode: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # x -> (mean, logvar)
    decode: Callable[[np.ndarray], np.ndarray]  # z -> mean of p(x|z)
    info: dict


class _MinimalVAE(tf.keras.Model):
    """Fallback VAE with the same constructor/encode/decode contract as tfpriv.models.vae.VAE."""

    def __init__(self, encoder, decoder, likelihood: str, beta: float = 1.0, extra_sample_terms=None):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.likelihood, self.beta = likelihood, float(beta)
        self.extra_sample_terms = dict(extra_sample_terms or {})
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def encode(self, x):
        mean, logvar = tf.split(self.encoder(x), 2, axis=-1)
        return mean, logvar

    def decode(self, z):
        out = self.decoder(z)
        return tf.sigmoid(out) if self.likelihood == "bernoulli" else out

    def _per_example_loss(self, x):
        mean, logvar = self.encode(x)
        z = mean + tf.exp(0.5 * logvar) * tf.random.normal(tf.shape(mean))
        out = self.decoder(z)
        b = tf.shape(x)[0]
        xf, of = tf.reshape(x, (b, -1)), tf.reshape(out, (b, -1))
        if self.likelihood == "bernoulli":
            rec = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=xf, logits=of), axis=1)
        else:
            rec = 0.5 * tf.reduce_sum(tf.square(xf - of), axis=1)
        kl = 0.5 * tf.reduce_sum(tf.exp(logvar) + tf.square(mean) - 1.0 - logvar, axis=1)
        loss = rec + self.beta * kl
        for term in self.extra_sample_terms.values():
            loss = loss + term(self, x, z)
        return loss

    def train_step(self, data):
        x = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self._per_example_loss(x))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def _vae_class():
    try:
        from tfpriv.models.vae import VAE
        return VAE, "tfpriv.models.vae.VAE"
    except ImportError:
        return _MinimalVAE, "tfpriv.filter.stage1._MinimalVAE (fallback)"


def train_stage1(dataset, latent_dim: int | None = None, epochs: int = 10, batch_size: int = 128,
                 learning_rate: float = 1e-3, beta: float = 1.0, robust_decoder: float = 0.0,
                 dp=None, seed: int = 0, force_minimal: bool = False) -> Stage1:
    """Trains the VAE on dataset.x_train (non-private unless `dp` is a DPConfig) and freezes it.

    robust_decoder > 0 adds the eq.-14 Lipschitz decoder term with that weight."""
    tf.random.set_seed(seed)
    encoder, decoder = build_vae_networks(dataset.name, dataset.x_train.shape[1:], latent_dim)
    cls, impl = (_MinimalVAE, "tfpriv.filter.stage1._MinimalVAE (fallback)") if force_minimal else _vae_class()
    extra = {"lipschitz_decoder": make_lipschitz_decoder_term(robust_decoder)} if robust_decoder > 0 else None
    vae = cls(encoder, decoder, likelihood=dataset.likelihood, beta=beta, extra_sample_terms=extra)
    if cls is _MinimalVAE:
        vae.compile(optimizer=tf.keras.optimizers.Adam(learning_rate))
    else:
        vae.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), dp=dp)
    t0 = time.time()
    hist = vae.fit(np.asarray(dataset.x_train), batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True)
    seconds = time.time() - t0
    losses = {k: [float(v) for v in vals] for k, vals in hist.history.items()}
    vae.trainable = False

    def encode(x, chunk: int = 4096):
        means, logvars = [], []
        for i in range(0, len(x), chunk):
            m, lv = vae.encode(tf.convert_to_tensor(np.asarray(x[i:i + chunk], np.float32)))
            means.append(np.asarray(m)), logvars.append(np.asarray(lv))
        return np.concatenate(means), np.concatenate(logvars)

    def decode(z):
        return np.asarray(vae.decode(tf.convert_to_tensor(np.asarray(z, np.float32))))

    n = len(dataset.x_train)
    info = {"implementation": impl, "epochs": epochs, "batch_size": batch_size,
            "learning_rate": learning_rate, "beta": beta, "latent_dim": int(encoder.output.shape[-1]) // 2,
            "robust_decoder": robust_decoder, "seconds": seconds, "history": losses,
            "steps": epochs * math.ceil(n / batch_size), "private": dp is not None, "vae": vae}
    return Stage1(encode, decode, info)
