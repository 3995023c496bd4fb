"""Held-out metrics of a trained VAE (term-wise paper, Sec. 5).

- hoyer_sparsity: eq. 17 on posterior means of the test set.
- log_likelihood: importance-sampled log p(x) with K samples from q(z|x) (mean over examples).
- mmd: MMD(q(z), p(z)) between posterior samples of the test set and as many prior samples.
- cluster_purity (mixture priors): nearest-component assignment of posterior means,
  best-matched to the true clusters.
- reconstruction_error: mean squared error of decode(posterior mean) against x.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfpriv.metrics.clustering import cluster_purity
from tfpriv.metrics.kernels import mmd_metric
from tfpriv.metrics.likelihood import importance_sampled_log_likelihood
from tfpriv.metrics.sparsity import hoyer_sparsity
from tfpriv.privae.priors import GaussianMixture
from tfpriv.privae.vae import VAE


def encode_all(vae: VAE, x: np.ndarray, batch_size: int = 500) -> tuple[np.ndarray, np.ndarray]:
    means, logvars = [], []
    for start in range(0, len(x), batch_size):
        m, lv = vae.encode(tf.convert_to_tensor(x[start:start + batch_size]))
        means.append(m.numpy())
        logvars.append(lv.numpy())
    return np.concatenate(means), np.concatenate(logvars)


def evaluate_vae(vae: VAE, x: np.ndarray, labels: np.ndarray | None = None, importance_samples: int = 100,
                 max_examples: int | None = 2000, seed: int = 0) -> dict[str, float]:
    """Metrics on (a seeded subset of) held-out data; `importance_samples` is K of log p(x)."""
    rng = np.random.default_rng(seed)
    if max_examples is not None and len(x) > max_examples:
        idx = np.sort(rng.choice(len(x), max_examples, replace=False))
        x = x[idx]
        labels = labels[idx] if labels is not None else None
    mean, logvar = encode_all(vae, x)
    samples = mean + np.exp(0.5 * logvar) * rng.standard_normal(mean.shape).astype(np.float32)
    data_ndim = x.ndim - 1

    def log_px(xb, z):
        return vae.log_px_given_z(xb, vae.decode_params(z), data_ndim)

    ll = importance_sampled_log_likelihood(
        x, lambda xb: vae.encode(xb), log_px, vae.prior.log_prob, num_samples=importance_samples,
        batch_size=100, sample_chunk=min(100, importance_samples), seed=seed)
    prior = vae.prior.sample(len(x), seed=seed).numpy()
    recon = np.concatenate([vae.decode(tf.convert_to_tensor(mean[s:s + 500])).numpy() for s in range(0, len(x), 500)])
    metrics = {
        "hoyer_sparsity": float(hoyer_sparsity(mean)),
        "log_likelihood": float(np.mean(ll)),
        "log_likelihood_importance_samples": int(importance_samples),
        "mmd": float(mmd_metric(samples, prior)),
        "reconstruction_error": float(np.mean(np.square(recon - x))),
        "eval_examples": int(len(x)),
    }
    if isinstance(vae.prior, GaussianMixture) and labels is not None:
        metrics["cluster_purity"] = float(cluster_purity(mean, labels, vae.prior.means))
    return metrics
