"""Stage 1 of the filter pipeline: the (frozen) VAE whose codes the filters act on.

The VAE is the project's `tfpriv.privae.vae.VAE` (a `DPModel`), so a private stage 1 (issue 5:
the VAE trained on users' data by an aggregator) is planned by `plan_privacy` and trained by
`fit_private`: clipping, noise, Poisson sampling and the RDP accounting are the engine's; no
accounting lives here. The command line trains stage 1 through the shared job sequence
(tfpriv/jobs/pipeline.py), records its privacy with `privacy_record` and freezes it with `frozen`.
Stages 2-3 only see the returned `encode`/`decode` callables.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from tfpriv.filter.architectures import build_vae_networks, make_lipschitz_decoder_term
from tfpriv.privae.vae import VAE

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
