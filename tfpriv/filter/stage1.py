"""Stage 1 for the filter pipeline: train the (frozen) VAE once and expose `encode`/`decode`.

Uses the project's `tfpriv.models.vae.VAE` when it exists; otherwise a minimal private Keras VAE
(`_MinimalVAE`: reparameterised ELBO with Bernoulli logits or unit-variance Gaussian likelihood,
β-weighted KL, optional per-example extra terms) so the filter can run before that class lands.
Stages 2-3 only see the returned callables, so any encoder works.

DP stage 1 (issue 5: the VAE trained on users' data by an aggregator): `plan_stage1_privacy`
is the project's `plan_privacy` and the private training is `fit_private`, so clipping, noise,
Poisson sampling and the RDP accounting are the engine's; no accounting lives here.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.filter.architectures import build_vae_networks, make_lipschitz_decoder_term
from tfpriv.privacy.config import DPConfig


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
        self.rng = tf.random.Generator.from_non_deterministic_state()  # what extra terms draw from

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


def build_stage1_vae(dataset, latent_dim: int | None = None, beta: float = 1.0, robust_decoder: float = 0.0,
                     force_minimal: bool = False):
    """(vae, implementation name): the stage-1 VAE for `dataset`, untrained."""
    encoder, decoder = build_vae_networks(dataset.name, dataset.x_train.shape[1:], latent_dim)
    cls, impl = (_MinimalVAE, "tfpriv.filter.stage1._MinimalVAE (fallback)") if force_minimal else _vae_class()
    extra = {"lipschitz_decoder": make_lipschitz_decoder_term(robust_decoder)} if robust_decoder > 0 else None
    return cls(encoder, decoder, likelihood=dataset.likelihood, beta=beta, extra_sample_terms=extra), impl


def plan_stage1_privacy(vae, dp: DPConfig, num_examples: int, batch_size: int, epochs: int,
                        sampling: str = "poisson", delta: float | None = None,
                        target_epsilon: float | None = None, max_epsilon: float | None = None,
                        history=()):
    """The project's `plan_privacy` for the stage-1 VAE, with the filter's flag names in errors.

    Everything (delta default and range, noise calibration for a target epsilon, the mode's
    sensitivity) comes from `tfpriv.training.runner.plan_privacy`; only the messages of the
    two flags the filter names differently (--vae_batch_size, --vae_epochs) are renamed."""
    from tfpriv.training.runner import plan_privacy
    if isinstance(vae, _MinimalVAE) or not hasattr(vae, "term_spec"):
        raise ConfigError("--aggregation: a private stage 1 needs tfpriv.models.vae.VAE (the DP engine's model), "
                          "not the fallback VAE")
    try:
        return plan_privacy(dp, vae.term_spec(), num_examples, batch_size, epochs, sampling, delta,
                            target_epsilon, max_epsilon, history)
    except ConfigError as exc:
        msg = str(exc)
        for common, own in (("--batch_size:", "--vae_batch_size:"), ("--epochs:", "--vae_epochs:")):
            if msg.startswith(common):
                msg = own + msg[len(common):]
        raise ConfigError(msg) from None


def train_stage1(dataset, latent_dim: int | None = None, epochs: int = 10, batch_size: int = 128,
                 learning_rate: float = 1e-3, beta: float = 1.0, robust_decoder: float = 0.0,
                 dp=None, seed: int = 0, force_minimal: bool = False, plan=None, vae=None,
                 checkpoint_dir: str | None = None, sampling_seed: int | None = None, verbose: int = 0) -> Stage1:
    """Trains the VAE on dataset.x_train and freezes it.

    Non-private unless `dp` is a private DPConfig or `plan` a `PrivacyPlan` (from
    `plan_stage1_privacy`). The private path is the project's `fit_private`: Poisson (or
    shuffled) batches of expected size `batch_size`, the DP engine's clipping and noise,
    the RDP ledger; `info["privacy"]` holds the plan's summary and the spent epsilon.
    `checkpoint_dir` receives fit_private's checkpoints/logs (a temporary folder if None);
    `sampling_seed` seeds the batch sampling and `DPConfig.seed` the noise (None: from the OS,
    as a real release needs).
    robust_decoder > 0 adds the eq.-14 Lipschitz decoder term with that weight."""
    tf.random.set_seed(seed)
    if vae is None:
        vae, impl = build_stage1_vae(dataset, latent_dim, beta, robust_decoder, force_minimal)
    else:
        impl = "tfpriv.filter.stage1._MinimalVAE (fallback)" if isinstance(vae, _MinimalVAE) else "tfpriv.models.vae.VAE"
    if plan is None and dp is not None and dp.private:
        plan = plan_stage1_privacy(vae, dp, len(dataset.x_train), batch_size, epochs)
    privacy = None
    t0 = time.time()
    if plan is not None and plan.config.private:
        from tfpriv.training.runner import fit_private
        if plan.batch_size != batch_size or plan.epochs != epochs:
            raise ConfigError(f"stage 1: the privacy plan is for batch size {plan.batch_size} and {plan.epochs} epochs, "
                              f"training asked for {batch_size} and {epochs}")
        owned = checkpoint_dir is None
        ckpt = tempfile.mkdtemp(prefix="filter_stage1_") if owned else checkpoint_dir
        try:
            fit = fit_private(vae, np.asarray(dataset.x_train, np.float32), plan,
                              tf.keras.optimizers.Adam(learning_rate), ckpt, seed=sampling_seed, verbose=verbose)
        finally:
            if owned:
                shutil.rmtree(ckpt, ignore_errors=True)
        losses, steps = fit["history"], fit["steps"]
        privacy = {**plan.summary(), "epsilon": fit["epsilon"], "steps": steps,
                   "planned_steps": plan.planned_steps, "epochs_completed": fit["epochs_completed"],
                   "resumed": fit["resumed"], "budget_reached": fit["budget_reached"],
                   "accountant": "RDP (dp_accounting), Poisson-sampled Gaussian, add-or-remove-one adjacency",
                   "ledger_segments": [list(s) for s in vae.ledger.segments()]}
    else:
        if isinstance(vae, _MinimalVAE):
            vae.compile(optimizer=tf.keras.optimizers.Adam(learning_rate))
        else:
            vae.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), dp=dp)
        hist = vae.fit(np.asarray(dataset.x_train), batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True)
        losses = {k: [float(v) for v in vals] for k, vals in hist.history.items()}
        steps = epochs * math.ceil(len(dataset.x_train) / batch_size)
    seconds = time.time() - t0
    vae.trainable = False

    def encode(x, chunk: int = 4096):
        means, logvars = [], []
        for i in range(0, len(x), chunk):
            m, lv = vae.encode(tf.convert_to_tensor(np.asarray(x[i:i + chunk], np.float32)))
            means.append(np.asarray(m)), logvars.append(np.asarray(lv))
        return np.concatenate(means), np.concatenate(logvars)

    def decode(z):
        return np.asarray(vae.decode(tf.convert_to_tensor(np.asarray(z, np.float32))))

    info = {"implementation": impl, "epochs": epochs, "batch_size": batch_size,
            "learning_rate": learning_rate, "beta": beta, "latent_dim": int(vae.encoder.output.shape[-1]) // 2,
            "robust_decoder": robust_decoder, "seconds": seconds, "history": losses,
            "steps": steps, "private": privacy is not None, "privacy": privacy, "vae": vae}
    return Stage1(encode, decode, info)
