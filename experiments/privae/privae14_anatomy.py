"""Where a trained Fashion-MNIST VAE keeps its code (issue #14).

    python experiments/privae/privae14_anatomy.py DATA_DIR RUN_DIR...

For each run, on the same 2,000 seeded test images as its evaluation (`evaluate_vae`): the share of
the latent variance carried by the posterior means, Var(mean) / (Var(mean) + E[posterior var]);
the median posterior sd; the number of dimensions whose mean varies (var > 0.01); and the Hoyer
sparsity of the means. Prints one JSON line per run.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from tfpriv.data import load_dataset
from tfpriv.metrics.sparsity import hoyer_sparsity
from tfpriv.privae.evaluation import encode_all
from tfpriv.privae.vae import load_vae

EVAL_EXAMPLES = 2000


def anatomy(run: str, x_test: np.ndarray) -> dict:
    seed = json.load(open(f"{run}/results.json"))["seed"]
    idx = np.sort(np.random.default_rng(seed).choice(len(x_test), EVAL_EXAMPLES, replace=False))
    mean, logvar = encode_all(load_vae(f"{run}/vae"), x_test[idx])
    var_means, var_post = mean.var(axis=0).sum(), np.exp(logvar).mean(axis=0).sum()
    return {"run": run, "means_share_of_latent_variance": float(var_means / (var_means + var_post)),
            "median_posterior_sd": float(np.median(np.exp(0.5 * logvar))),
            "dims_with_mean_variance_above_0.01": int((mean.var(axis=0) > 0.01).sum()),
            "hoyer_of_means": hoyer_sparsity(mean)}


if __name__ == "__main__":
    x = load_dataset("fashion_mnist", sys.argv[1], seed=0).x_test
    for run_dir in sys.argv[2:]:
        print(json.dumps(anatomy(run_dir, x)), flush=True)
