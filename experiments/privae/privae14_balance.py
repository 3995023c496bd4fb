"""Balance of PriVAE's two gradient terms before clipping, on a trained (non-private) VAE.

    python experiments/privae/privae14_balance.py RUN_DIR DATA_DIR [C1 C2]

Prints (JSON) the unclipped gradient norms of the sample-wise term phi(x_i) = rec + kld (per
example, 32 training images) and of the batch-wise term alpha * MMD over a partition of 16 (as
with B = 256, b = 16; 8 partitions), and their median ratio beside C2 / C1. When both norms are far
above their clip norms every term is clipped to exactly C1 or C2, so the private update weighs the
MMD against the reconstruction by C2 / C1 instead of by the unclipped ratio: the clip split, not
alpha, sets the balance (issue #14).
"""
from __future__ import annotations

import json
import sys

import numpy as np
import tensorflow as tf

from tfpriv.data import load_dataset
from tfpriv.metrics.kernels import cauchy_mmd
from tfpriv.privae.vae import load_vae

EXAMPLES, PARTITIONS, PARTITION_SIZE = 32, 8, 16


def norm(grads) -> float:
    return float(tf.sqrt(sum(tf.reduce_sum(tf.square(g)) for g in grads if g is not None)))


def main(run: str, data_dir: str, c1: float = 0.05, c2: float = 0.005) -> dict:
    vae = load_vae(f"{run}/vae")
    alpha = json.load(open(f"{run}/results.json"))["alpha"] or 100.0  # a VAE without MMD: the paper's alpha
    x = load_dataset("fashion_mnist", data_dir, seed=0).x_train[:PARTITIONS * PARTITION_SIZE].astype(np.float32)
    params = vae.encoder.trainable_variables + vae.decoder.trainable_variables
    rng = np.random.default_rng(0)

    def posterior_sample(xb):
        mean, logvar = vae.encode(xb)
        eps = tf.constant(rng.standard_normal(mean.shape), tf.float32)
        return mean + tf.exp(0.5 * logvar) * eps, logvar, eps

    phi = []
    for i in range(EXAMPLES):
        xi = x[i:i + 1]
        with tf.GradientTape() as tape:
            z, logvar, eps = posterior_sample(xi)
            rec = -vae.log_px_given_z(xi, vae.decode_params(z), 3)
            log_q = -0.5 * tf.reduce_sum(np.log(2 * np.pi) + logvar + tf.square(eps), axis=-1)
            loss = tf.reduce_sum(rec + vae.beta * (log_q - vae.prior.log_prob(z)))
        phi.append(norm(tape.gradient(loss, params)))
    psi = []
    for j in range(PARTITIONS):
        xs = x[PARTITION_SIZE * j:PARTITION_SIZE * (j + 1)]
        with tf.GradientTape() as tape:
            z, _, _ = posterior_sample(xs)
            loss = alpha * cauchy_mmd(z, vae.prior.sample(PARTITION_SIZE, seed=j))
        psi.append(norm(tape.gradient(loss, params)))
    phi, psi = np.array(phi), np.array(psi)
    return {"run": run, "alpha": alpha, "phi_norm_median": float(np.median(phi)),
            "phi_norm_range": [float(phi.min()), float(phi.max())], "psi_norm_median": float(np.median(psi)),
            "psi_norm_range": [float(psi.min()), float(psi.max())], "partition_size": PARTITION_SIZE,
            "unclipped_ratio_psi_over_phi": float(np.median(psi) / np.median(phi)), "C1": c1, "C2": c2,
            "clipped_ratio_C2_over_C1": c2 / c1}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], *map(float, sys.argv[3:5]))))
