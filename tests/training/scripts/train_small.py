"""A small seeded private VAE trained by fit_private into OUTPUT_DIR (resuming if it holds
checkpoints); writes OUTPUT_DIR/final.npz (weights). Run as a script (a process to kill) it prints
`train`'s JSON record."""
import json
import os
import sys

import numpy as np

from tfpriv.compat import keras
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE
from tfpriv.privacy.config import DPConfig
from tfpriv.training.runner import fit_private, plan_privacy, read_ledger


def train(output_dir: str, epochs: int) -> dict:
    """{epsilon, steps, resumed} of the run."""
    n = 1000
    keras.utils.set_random_seed(0)
    enc, dec = build_architecture("mlp", [64], 4)
    vae = VAE(enc, dec, prior=make_prior("sparse", 4), alpha=5.0, regularizer=make_divergence("mmd"))
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=1.5, num_partitions=4,
                   seed=3)
    plan = plan_privacy(cfg, vae.term_spec(), n, 20, epochs, delta=1e-4, history=read_ledger(output_dir))
    x = (np.random.default_rng(0).random([n, 64]) > 0.5).astype(np.float32)
    out = fit_private(vae, x, plan, keras.optimizers.Adam(1e-3), output_dir, seed=7, verbose=0)
    np.savez(os.path.join(output_dir, "final.npz"), *[v.numpy() for v in vae.trainable_variables])
    return {"epsilon": out["epsilon"], "steps": out["steps"], "resumed": out["resumed"]}


if __name__ == "__main__":
    print(json.dumps(train(sys.argv[1], int(sys.argv[2]))))
