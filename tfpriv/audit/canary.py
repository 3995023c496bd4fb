"""Empirical epsilon lower bounds from planted canaries: one-run and many-run audits.

One run (Steinke, Nasr & Jagielski 2023): m canaries, each added to the training set with
probability 1/2 (independently, from a seeded generator); one private training run through the
ordinary tfpriv path (`make_private` / `DPModel.compile` + `fit`, Poisson batches, the ledger's
epsilon); a score per canary; guesses for the top and bottom scores; the bound of
`tfpriv.audit.bounds.one_run_audit`. Two families of canaries:

  * gradient-space ("dirac") canaries, `make_private` on a linear softmax classifier of digit
    images: the inputs get m extra features that every real example leaves at 0; canary j is
    the input `magnitude * e_(64+j)` with label 0, so its gradient lives in kernel row 64+j alone
    (a fixed direction, clipped to C), and no other example's gradient touches that row. Those
    rows start at 0; the score is the final row's movement along e_0 - (1/K) 1 (the canary's
    clipped gradient direction at initialisation): DP noise only for an excluded canary.
  * input-space canaries, the PriVAE (term-wise, sparse prior, MMD): m random binary 8x8 images
    mixed into scikit-learn's digits; the score is the canary's loss reduction (negative ELBO
    before training minus after, averaged over fixed reparameterisation draws). The classifier
    has an input-space variant too (mislabelled digits, score = loss reduction).

Many runs (the classic audit): R models trained with one gradient-space canary and R without
(same data otherwise, fresh Poisson batches and noise per run), the canary row's movement as
the score, `many_run_epsilon_lower_bound` (Clopper-Pearson, Bonferroni over thresholds).

A non-private run is the same training with noise multiplier 0 (clipping kept; reported
epsilon = inf) for the classifier, and aggregation "none" for the VAE.

This module holds the classifier's one-run audit (`classifier_canary_run`, read by `run_audit`)
and the helpers every audit shares; the PriVAE and DP-WGAN-GP one-run audits and the many-run
audit, which only the study of docs/audit.md runs, are `experiments/audit/canaries.py`.
"""
from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from tfpriv.audit.bounds import one_run_audit
from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig

NUM_CLASSES = 10
CANARY_CLASS = 0


def digits(n: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (train split): images [N, 8, 8, 1] in [0, 1] and labels."""
    from tfpriv.data import load_dataset
    data = load_dataset("digits")
    x, y = np.asarray(data.x_train, np.float32), np.asarray(data.labels_train["label"], np.int32)
    if n is not None and n < len(x):
        idx = np.random.default_rng(seed).choice(len(x), size=n, replace=False)
        x, y = x[idx], y[idx]
    return x, y


def inclusion(m: int, seed: int) -> np.ndarray:
    """Each canary included independently with probability 1/2."""
    return np.random.default_rng([seed, 7]).random(m) < 0.5


def poisson_batches(arrays, num_examples: int, batch_size: int, seed: int) -> tuple[tf.data.Dataset, int]:
    """(Poisson batches at the fixed rate q = batch_size / num_examples, steps per epoch).

    The rate is set from a nominal dataset size, not the realised one, so the mechanism (q,
    noise, steps) is the same whichever canaries were included: the audited M(D) and M(D')
    differ only in their data, as the DP definition compares them.
    """
    from tfpriv.data.sampling import poisson_dataset, sampling_rate_and_steps
    q, steps = sampling_rate_and_steps(num_examples, batch_size, "poisson")
    return poisson_dataset(arrays, q, seed), steps


# -- make_private on a linear classifier -----------------------------------------------------------
def classifier_data(m: int, kind: str, magnitude: float, n_real: int | None, seed: int):
    x, y = digits(n_real, seed)
    x = x.reshape(len(x), -1)
    d = x.shape[1]
    rng = np.random.default_rng([seed, 11])
    if kind == "gradient":
        real = np.concatenate([x, np.zeros([len(x), m], np.float32)], axis=1)
        canaries = np.zeros([m, d + m], np.float32)
        canaries[np.arange(m), d + np.arange(m)] = magnitude
        canary_y = np.full([m], CANARY_CLASS, np.int32)
    elif kind == "input":
        real = x
        src = rng.choice(len(x), size=m)
        canaries = x[src]
        canary_y = ((y[src] + rng.integers(1, NUM_CLASSES, size=m)) % NUM_CLASSES).astype(np.int32)  # a wrong label
    else:
        raise ValueError(f"kind: must be 'gradient' or 'input', got {kind!r}")
    return real, y, canaries, canary_y, d


def linear_model(dims: int, seed: int, zero_rows_from: int | None = None) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input([dims]), keras.layers.Dense(NUM_CLASSES)])
    if zero_rows_from is not None:
        kernel = model.layers[0].kernel
        kernel.assign(tf.concat([kernel[:zero_rows_from], tf.zeros_like(kernel[zero_rows_from:])], 0))
    return model


def per_example_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def gradient_scores(kernel_before: np.ndarray, kernel_after: np.ndarray, rows: np.ndarray) -> np.ndarray:
    u = -np.full([NUM_CLASSES], 1.0 / NUM_CLASSES)
    u[CANARY_CLASS] += 1.0
    u /= np.linalg.norm(u)
    return (kernel_after[rows] - kernel_before[rows]) @ u


def one_run_record(scores: np.ndarray, included: np.ndarray, confidence: float, start: float, **run) -> dict:
    """A one-run audit's results record: the run's description `run` (with its `delta`), the bound
    of `one_run_audit`, the mean score gap (included minus excluded) and the wall seconds since `start`."""
    return {**run, **one_run_audit(scores, included, run["delta"], confidence),
            "score_gap": float(np.mean(scores[included]) - np.mean(scores[~included])),
            "seconds": round(time.time() - start, 1)}


def classifier_canary_run(m: int = 1000, private: bool = True, target_epsilon: float = 2.0, epochs: int = 10,
                          batch_size: int = 64, l2_norm_clip: float = 1.0, learning_rate: float = 0.5,
                          kind: str = "gradient", magnitude: float = 1000.0, n_real: int | None = None,
                          delta: float | None = None, seed: int = 0, confidence: float = 0.95) -> dict:
    """One-run audit of `make_private` (DP-SGD, micro) on a linear classifier with m canaries."""
    from tfpriv.training.private_model import make_private
    start = time.time()
    real, y, canaries, canary_y, d = classifier_data(m, kind, magnitude, n_real, seed)
    included = inclusion(m, seed)
    x_train = np.concatenate([real, canaries[included]])
    y_train = np.concatenate([y, canary_y[included]])
    n = len(real) + m // 2  # nominal size: q = B / n whichever canaries were drawn
    model = linear_model(x_train.shape[1], seed, zero_rows_from=d if kind == "gradient" else None)
    config = DPConfig(aggregation="micro", l2_norm_clip=l2_norm_clip, noise_multiplier=0.0, seed=seed)
    dp = make_private(model, per_example_loss(), config, num_examples=n, batch_size=batch_size, delta=delta,
                             target_epsilon=target_epsilon if private else None, epochs=epochs if private else None)
    dp.compile(optimizer=keras.optimizers.SGD(learning_rate))
    loss_fn = per_example_loss()
    before_kernel = model.layers[0].kernel.numpy().copy()
    before_loss = loss_fn(canary_y, model(canaries)).numpy()
    batches, steps = poisson_batches((x_train, y_train), n, batch_size, seed)
    dp.fit(batches, epochs=epochs, steps_per_epoch=steps, verbose=0)
    if kind == "gradient":
        scores = gradient_scores(before_kernel, model.layers[0].kernel.numpy(), d + np.arange(m))
    else:
        scores = before_loss - loss_fn(canary_y, model(canaries)).numpy()
    return one_run_record(
        scores, included, confidence, start,
        family="make_private (linear classifier, digits)",
        canary=f"{kind}-space",
        private=private,
        reported_epsilon=dp.epsilon(),
        delta=dp.delta,
        noise_multiplier=dp.dp_config.noise_multiplier,
        steps=dp.ledger.total_steps,
        num_examples=n,
        batch_size=batch_size,
        l2_norm_clip=l2_norm_clip,
    )
