"""Stage 1 of the filter pipeline: the (frozen) VAE whose codes the filters act on.

The VAE is the project's `tfpriv.models.vae.VAE` (a `DPModel`), so a private stage 1 (issue 5:
the VAE trained on users' data by an aggregator) is planned by `plan_privacy` and trained by
`fit_private`: clipping, noise, Poisson sampling and the RDP accounting are the engine's; no
accounting lives here. `train_stage1` is the library entry point; the command line trains stage 1
through the shared job sequence (tfpriv/jobs/pipeline.py) and freezes it with `frozen`.
Stages 2-3 only see the returned `encode`/`decode` callables.
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

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.filter.architectures import build_vae_networks, make_lipschitz_decoder_term
from tfpriv.models.vae import VAE
from tfpriv.privacy.config import DPConfig

ADJACENCY_NOTE = "Poisson-sampled Gaussian, add-or-remove-one adjacency"


@dataclasses.dataclass
class Stage1:
    encode: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # x -> (mean, logvar)
    decode: Callable[[np.ndarray], np.ndarray]  # z -> mean of p(x|z)
    info: dict


def build_stage1_vae(dataset, latent_dim: int | None = None, beta: float = 1.0, robust_decoder: float = 0.0) -> VAE:
    """The stage-1 VAE for `dataset` (the filter paper's networks), untrained. robust_decoder > 0
    adds the eq.-14 Lipschitz decoder term (per example) with that weight."""
    encoder, decoder = build_vae_networks(dataset.name, dataset.x_train.shape[1:], latent_dim)
    extra = {"lipschitz_decoder": make_lipschitz_decoder_term(robust_decoder)} if robust_decoder > 0 else None
    return VAE(encoder, decoder, likelihood=dataset.likelihood, beta=beta, extra_sample_terms=extra)


def plan_stage1_privacy(vae: VAE, dp: DPConfig, num_examples: int, batch_size: int, epochs: int,
                        sampling: str = "poisson", delta: float | None = None,
                        target_epsilon: float | None = None, max_epsilon: float | None = None,
                        history=(), accountant: str = "rdp"):
    """The project's `plan_privacy` for the stage-1 VAE (its errors name `batch_size`, `epochs`, ...;
    the command line shows them as the filter's --vae_batch_size, --vae_epochs)."""
    from tfpriv.training.runner import plan_privacy
    return plan_privacy(dp, vae.term_spec(), num_examples, batch_size, epochs, sampling, delta,
                        target_epsilon, max_epsilon, history, accountant)


def privacy_record(vae: VAE, plan, fit: dict) -> dict | None:
    """`info["privacy"]` of a stage 1 trained by `fit_private` under `plan` (None when non-private)."""
    if not plan.config.private:
        return None
    return {**plan.summary(), "epsilon": fit["epsilon"], "steps": fit["steps"], "planned_steps": plan.planned_steps,
            "epochs_completed": fit["epochs_completed"], "resumed": fit["resumed"],
            "budget_reached": fit["budget_reached"], "adjacency": ADJACENCY_NOTE,
            "ledger_segments": [list(s) for s in vae.ledger.segments()]}


def frozen(vae: VAE, info: dict) -> Stage1:
    """Freezes a trained VAE and exposes encode (posterior mean, log-variance) and decode."""
    vae.trainable = False

    def encode(x, chunk: int = 4096):
        means, logvars = [], []
        for i in range(0, len(x), chunk):
            m, lv = vae.encode(tf.convert_to_tensor(np.asarray(x[i:i + chunk], np.float32)))
            means.append(np.asarray(m)), logvars.append(np.asarray(lv))
        return np.concatenate(means), np.concatenate(logvars)

    def decode(z):
        return np.asarray(vae.decode(tf.convert_to_tensor(np.asarray(z, np.float32))))

    info = {**info, "latent_dim": int(vae.encoder.output.shape[-1]) // 2, "vae": vae}
    return Stage1(encode, decode, info)


def train_stage1(dataset, latent_dim: int | None = None, epochs: int = 10, batch_size: int = 128,
                 learning_rate: float = 1e-3, beta: float = 1.0, robust_decoder: float = 0.0,
                 dp=None, seed: int = 0, plan=None, vae=None, checkpoint_dir: str | None = None,
                 sampling_seed: int | None = None, verbose: int = 0) -> Stage1:
    """Trains the VAE on dataset.x_train and freezes it.

    Non-private unless `dp` is a private DPConfig or `plan` a `PrivacyPlan` (from
    `plan_stage1_privacy`). The private path is the project's `fit_private`: Poisson (or
    shuffled) batches of expected size `batch_size`, the DP engine's clipping and noise,
    the RDP ledger; `info["privacy"]` holds the plan's summary and the spent epsilon.
    `checkpoint_dir` receives fit_private's checkpoints/logs (a temporary folder if None);
    `sampling_seed` seeds the batch sampling and `DPConfig.seed` the noise (None: from the OS,
    as a real release needs)."""
    keras.utils.set_random_seed(seed)
    if vae is None:
        vae = build_stage1_vae(dataset, latent_dim, beta, robust_decoder)
    if plan is None and dp is not None and dp.private:
        plan = plan_stage1_privacy(vae, dp, len(dataset.x_train), batch_size, epochs)
    privacy = None
    t0 = time.time()
    if plan is not None and plan.config.private:
        from tfpriv.training.runner import fit_private
        if plan.batch_size != batch_size or plan.epochs != epochs:
            raise ConfigError(f"plan: is for batch size {plan.batch_size} and {plan.epochs} epochs, "
                              f"training asked for {batch_size} and {epochs}")
        owned = checkpoint_dir is None
        ckpt = tempfile.mkdtemp(prefix="filter_stage1_") if owned else checkpoint_dir
        try:
            fit = fit_private(vae, np.asarray(dataset.x_train, np.float32), plan,
                              keras.optimizers.Adam(learning_rate), ckpt, seed=sampling_seed, verbose=verbose)
        finally:
            if owned:
                shutil.rmtree(ckpt, ignore_errors=True)
        losses, steps = fit["history"], fit["steps"]
        privacy = privacy_record(vae, plan, fit)
    else:
        vae.compile(optimizer=keras.optimizers.Adam(learning_rate), dp=dp)
        hist = vae.fit(np.asarray(dataset.x_train), batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True)
        losses = {k: [float(v) for v in vals] for k, vals in hist.history.items()}
        steps = epochs * math.ceil(len(dataset.x_train) / batch_size)
    info = {"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate, "beta": beta,
            "robust_decoder": robust_decoder, "seconds": time.time() - t0, "history": losses,
            "steps": steps, "private": privacy is not None, "privacy": privacy}
    return frozen(vae, info)
