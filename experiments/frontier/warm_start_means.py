"""Issue #47.8, before building it: what a small ε buys as DP per-class mean images (the warm start's
release) and what it costs the GAN run that follows.

The release (`tfpriv.privacy.class_means`, since #47.8 was built; this script had its own copy when
it made the records): each training image clipped to L2 norm C (C = 1: every image is, so each contributes
its direction), placed in its class's row of a [K, d + 1] table with κ = C in the row's count slot, and
Gaussian noise of std z·√(C² + κ²) on every entry. Adding or removing one example changes one row
by a vector of norm ≤ √(C² + κ²): one Gaussian mechanism, which the ledger accounts as one step at
q = 1 with noise multiplier z (calibrated here for `--release_epsilons`). Noisy mean of class c =
noisy sum / max(noisy count, 1).

Printed and appended to runs.jsonl (`warm_start_means_<dataset>`): per release ε, the noisy means'
cosine with the exact means (worst and mean class), the nearest-mean accuracy of test images against
the noisy and the exact means, and the noise multiplier the recipe's critic steps then need for ε = 1
overall (against the recipe without a release). `--figure` draws the means.

    python experiments/frontier/warm_start_means.py --data_dir=../shared/data --figure
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tfpriv.data import load_dataset
from tfpriv.privacy.class_means import noisy_class_means
from tfpriv.privacy.accounting import RDP

HERE = os.path.dirname(os.path.abspath(__file__))
# The recipes each dataset's GAN would run after the release: (critic steps, batch size), flags/.
RECIPES = {"mnist": (4012, 1024), "fashion_mnist": (2006, 1024)}


def noisy_means(x: np.ndarray, y: np.ndarray, classes: int, z: float, rng: np.random.Generator,
                clip: float = 1.0, kappa: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(noisy class means [K, d], exact class means of the clipped images [K, d]): the release of
    `tfpriv.privacy.class_means`, which the GAN's --warm_start_epsilon makes (z = 0: no noise)."""
    exact = noisy_class_means(x, y, classes, 1.0, _Silent(), clip=clip, count_weight=kappa).means
    if z == 0:
        return exact, exact
    return noisy_class_means(x, y, classes, z, rng, clip=clip, count_weight=kappa).means, exact


class _Silent:
    """A generator that draws zeros: the release without its noise."""

    @staticmethod
    def normal(loc, scale, size):
        return np.zeros(size)


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)


def nearest_mean_accuracy(means: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(_unit(x.reshape(len(x), -1)) @ _unit(means).T, axis=1) == y))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--datasets", default="mnist,fashion_mnist")
    parser.add_argument("--release_epsilons", default="0.02,0.05,0.1")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--epsilon", type=float, default=1.0, help="the run's total ε")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--figure", action="store_true")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.release_epsilons.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    shown = {}
    for name in args.datasets.split(","):
        data = load_dataset(name, args.data_dir)
        x, y = data.x_train, data.labels_train["label"].astype(np.int64)
        x_test, y_test = data.x_test, data.labels_test["label"]
        classes = int(y.max()) + 1
        steps, batch = RECIPES[name]
        q = batch / len(x)
        z_alone = RDP.calibrate(args.epsilon, args.delta, q, steps)
        exact = noisy_means(x, y, classes, 0.0, np.random.default_rng(0))[1]
        rows = []
        for eps0 in epsilons:
            z = RDP.calibrate(eps0, args.delta, 1.0, 1)
            z_after = RDP.calibrate(args.epsilon, args.delta, q, steps, history=[(1.0, z, 1)])
            cos, acc = [], []
            for seed in seeds:
                means, _ = noisy_means(x, y, classes, z, np.random.default_rng(seed))
                cos.append(np.sum(_unit(means) * _unit(exact), axis=1))
                acc.append(nearest_mean_accuracy(means, x_test, y_test))
                if seed == seeds[0]:
                    shown[(name, eps0)] = means
            cos = np.array(cos)
            rows.append({"release_epsilon": eps0, "release_noise_multiplier": z,
                         "cosine_mean": float(cos.mean()), "cosine_worst_class": float(cos.mean(axis=0).min()),
                         "nearest_mean_accuracy": float(np.mean(acc)), "nearest_mean_accuracy_seeds": acc,
                         "critic_noise_multiplier": z_after, "critic_noise_rise": z_after / z_alone - 1})
        shown[(name, None)] = exact
        record = {"dataset": name, "delta": args.delta, "epsilon": args.epsilon, "critic_steps": steps,
                  "batch_size": batch, "critic_noise_multiplier_without": z_alone, "seeds": seeds,
                  "exact_nearest_mean_accuracy": nearest_mean_accuracy(exact, x_test, y_test),
                  "rows": rows}
        print(json.dumps(record))
        with open(os.path.join(HERE, "runs.jsonl"), "a") as f:
            f.write(json.dumps({"run": f"warm_start_means_{name}", "record": record}) + "\n")
    if args.figure:
        _figure(shown, epsilons, args.datasets.split(","))


def _figure(shown: dict, epsilons: list[float], names: list[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [None, *epsilons]
    fig, axes = plt.subplots(len(names) * len(labels), 10, figsize=(10, 1.05 * len(names) * len(labels)))
    for i, (name, eps0) in enumerate((n, e) for n in names for e in labels):
        means = shown[(name, eps0)]
        for c in range(10):
            ax = axes[i, c]
            image = means[c].reshape(28, 28)
            ax.imshow(image / max(image.max(), 1e-12), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
        axes[i, 0].set_ylabel("exact" if eps0 is None else f"ε₀ {eps0:g}", fontsize=7)
        axes[i, 0].set_title(name if eps0 is None else "", fontsize=7, loc="left")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "warm_start_means.png"), dpi=80)


if __name__ == "__main__":
    main()
