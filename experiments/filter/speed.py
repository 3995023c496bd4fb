"""Timing of one user's filter game: `python experiments/filter/speed.py [--epochs 1000] [--n 6000]`.

Synthetic 10-d MNIST-sized latent codes (a private and a utility binary label linearly encoded),
two-FC+ELU classifiers, batch 128, Adam 1e-3: the same compiled loop as `FilterGame.fit_epochs`.
Prints the wall time of training, including the one-off tf.function tracing.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from tfpriv.filter.divergence import estimate_precision
from tfpriv.filter.pipeline import FilterConfig, train_filter


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--n", type=int, default=6000)
    p.add_argument("--dim", type=int, default=10)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    y, u = rng.integers(0, 2, args.n), rng.integers(0, 2, args.n)
    z = rng.normal(size=(args.n, args.dim)).astype(np.float32)
    z[:, 0] += 2 * y
    z[:, 1] += 2 * u
    cfg = FilterConfig(epochs=args.epochs, classifier_kind="mlp", budget=1.0, ema_decay=0.999)
    t0 = time.time()
    game = train_filter(z, y, u, 2, 2, estimate_precision(z), cfg)
    seconds = time.time() - t0
    steps = args.epochs * (args.n // cfg.batch_size)
    print(f"filter game: {args.epochs} epochs x {args.n // cfg.batch_size} steps on {args.n} codes "
          f"({args.dim}-d) in {seconds:.1f} s ({1e3 * seconds / steps:.2f} ms/step, "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'} intra-op threads); "
          f"final divergence {game.history[-1]['divergence']:.3f}")


if __name__ == "__main__":
    main()
