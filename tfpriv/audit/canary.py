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
"""
from __future__ import annotations

import math
import time

import numpy as np
import tensorflow as tf

from tfpriv.audit.bounds import many_run_epsilon_lower_bound, one_run_audit
from tfpriv.compat import keras
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import BatchLayout

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
def _classifier_data(m: int, kind: str, magnitude: float, n_real: int | None, seed: int):
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


def _linear_model(dims: int, seed: int, zero_rows_from: int | None = None) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input([dims]), keras.layers.Dense(NUM_CLASSES)])
    if zero_rows_from is not None:
        kernel = model.layers[0].kernel
        kernel.assign(tf.concat([kernel[:zero_rows_from], tf.zeros_like(kernel[zero_rows_from:])], 0))
    return model


def _per_example_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def _gradient_scores(kernel_before: np.ndarray, kernel_after: np.ndarray, rows: np.ndarray) -> np.ndarray:
    u = -np.full([NUM_CLASSES], 1.0 / NUM_CLASSES)
    u[CANARY_CLASS] += 1.0
    u /= np.linalg.norm(u)
    return (kernel_after[rows] - kernel_before[rows]) @ u


def _one_run_record(scores: np.ndarray, included: np.ndarray, confidence: float, start: float, **run) -> dict:
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
    real, y, canaries, canary_y, d = _classifier_data(m, kind, magnitude, n_real, seed)
    included = inclusion(m, seed)
    x_train = np.concatenate([real, canaries[included]])
    y_train = np.concatenate([y, canary_y[included]])
    n = len(real) + m // 2  # nominal size: q = B / n whichever canaries were drawn
    model = _linear_model(x_train.shape[1], seed, zero_rows_from=d if kind == "gradient" else None)
    config = DPConfig(aggregation="micro", l2_norm_clip=l2_norm_clip, noise_multiplier=0.0, seed=seed)
    dp = make_private(model, _per_example_loss(), config, num_examples=n, batch_size=batch_size, delta=delta,
                             target_epsilon=target_epsilon if private else None, epochs=epochs if private else None)
    dp.compile(optimizer=keras.optimizers.SGD(learning_rate))
    loss_fn = _per_example_loss()
    before_kernel = model.layers[0].kernel.numpy().copy()
    before_loss = loss_fn(canary_y, model(canaries)).numpy()
    batches, steps = poisson_batches((x_train, y_train), n, batch_size, seed)
    dp.fit(batches, epochs=epochs, steps_per_epoch=steps, verbose=0)
    if kind == "gradient":
        scores = _gradient_scores(before_kernel, model.layers[0].kernel.numpy(), d + np.arange(m))
    else:
        scores = before_loss - loss_fn(canary_y, model(canaries)).numpy()
    return _one_run_record(
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


# -- PriVAE ---------------------------------------------------------------------------------------
def _neg_elbo(vae, x: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Per-example negative ELBO (rec + kld) averaged over `draws` fixed reparameterisation draws."""
    saved = vae.rng
    object.__setattr__(vae, "rng", tf.random.Generator.from_seed(seed, alg="philox"))
    try:
        total = np.zeros(len(x))
        for _ in range(draws):
            terms = vae.loss_terms(tf.constant(x), BatchLayout.single(len(x)), training=False)
            total += terms.sample_total().numpy()
    finally:
        object.__setattr__(vae, "rng", saved)
    return total / draws


def _first_kernel(vae) -> tf.Variable:
    return next(layer.kernel for layer in vae.encoder.layers if hasattr(layer, "kernel"))


def vae_canary_run(m: int = 500, private: bool = True, target_epsilon: float = 2.0, epochs: int = 20,
                   batch_size: int = 64, kind: str = "marker", aggregation: str = "termwise",
                   l2_norm_clip: float = 1.0, batch_clip: float = 0.1, num_partitions: int = 4, latent_dim: int = 8,
                   learning_rate: float = 2e-3, n_real: int | None = None, delta: float | None = None,
                   seed: int = 0, confidence: float = 0.95, draws: int = 4) -> dict:
    """One-run audit of a PriVAE (sparse prior, MMD; term-wise by default) with m canaries.

    kind "input": m random binary 8x8 images, score = loss reduction (negative ELBO before minus
    after training, averaged over `draws` fixed reparameterisation draws): a black-box score.
    kind "marker": the inputs get m extra binary features that real examples leave at 0; canary
    j is a blank image with feature j on, so only canary j's gradient reaches row 64+j of the
    encoder's first kernel; score = how far that row moved (white-box; a non-member's row moves
    by DP noise only).
    """
    from tfpriv.audit.sweep import build_vae
    from tfpriv.training.runner import plan_privacy
    start = time.time()
    x, _ = digits(n_real, seed)
    rng = np.random.default_rng([seed, 13])
    if kind == "input":
        canaries = (rng.random([m, *x.shape[1:]]) < 0.5).astype(np.float32)
    elif kind == "marker":
        x = np.concatenate([x.reshape(len(x), -1), np.zeros([len(x), m], np.float32)], axis=1)
        canaries = np.zeros([m, x.shape[1]], np.float32)
        canaries[np.arange(m), x.shape[1] - m + np.arange(m)] = 1.0
    else:
        raise ValueError(f"kind: must be 'input' or 'marker', got {kind!r}")
    included = inclusion(m, seed)
    x_train = np.concatenate([x, canaries[included]])
    n = len(x) + m // 2  # nominal size: q = B / n whichever canaries were drawn
    vae = build_vae("sparse", "mmd", x.shape[1:], latent_dim=latent_dim, seed=seed)
    config = DPConfig(aggregation=aggregation if private else "none", l2_norm_clip=l2_norm_clip,
                      batch_clip=batch_clip, num_partitions=num_partitions, seed=seed)
    plan = plan_privacy(config, vae.term_spec(), n, batch_size, epochs, delta=delta,
                        target_epsilon=target_epsilon if private else None)
    dp = plan.config if private else config.replace(expected_batch_size=float(batch_size))
    vae.compile(keras.optimizers.Adam(learning_rate), dp=dp, num_examples=n, delta=plan.delta)
    vae.loss_terms(tf.constant(canaries[:2]), BatchLayout.single(2), training=False)  # builds variables
    if kind == "input":
        before = _neg_elbo(vae, canaries, draws, seed + 1)
    rows = x.shape[1] - m + np.arange(m)
    kernel_before = _first_kernel(vae).numpy().copy()
    # Private or not: the same Poisson batches; non-private through the engine without clipping or noise.
    batches, steps = poisson_batches(x_train, n, batch_size, seed)
    vae.fit(batches, epochs=epochs, steps_per_epoch=steps, verbose=0)
    if kind == "input":
        scores = before - _neg_elbo(vae, canaries, draws, seed + 1)
    else:
        scores = np.linalg.norm(_first_kernel(vae).numpy()[rows] - kernel_before[rows], axis=1)
    return _one_run_record(
        scores, included, confidence, start,
        family=f"PriVAE ({aggregation if private else 'none'}, sparse prior, MMD, digits)",
        canary="input-space, loss-reduction score" if kind == "input" else "marker feature, encoder-row score",
        private=private,
        reported_epsilon=vae.epsilon(),
        delta=plan.delta,
        noise_multiplier=dp.noise_multiplier if private else 0.0,
        steps=plan.planned_steps,
        num_examples=n,
        batch_size=batch_size,
        l2_norm_clip=l2_norm_clip,
        batch_clip=batch_clip,
        num_partitions=num_partitions,
    )


# -- DP-WGAN-GP ------------------------------------------------------------------------------------
def gan_canary_run(m: int = 200, private: bool = True, target_epsilon: float = 2.0, epochs: int = 10,
                   batch_size: int = 32, capacity: int = 2, l2_norm_clip: float = 1.0, n_real: int | None = 300,
                   delta: float | None = None, seed: int = 0, confidence: float = 0.95) -> dict:
    """One-run audit of the DP-WGAN-GP critic (micro, per_example clipping) with m random binary
    28x28 canaries among digits upscaled to 28x28; score = the critic's value on the canary after
    training minus before (the critic is trained to raise its value on real examples)."""
    from tfpriv.gan.wgan_gp import default_learning_rate, dp_adam, make_dpwgan_gp
    from tfpriv.training.runner import plan_privacy
    start = time.time()
    x, _ = digits(n_real, seed)
    x = tf.image.resize(x, (28, 28)).numpy()
    rng = np.random.default_rng([seed, 17])
    canaries = (rng.random([m, 28, 28, 1]) < 0.5).astype(np.float32)
    included = inclusion(m, seed)
    x_train = np.concatenate([x, canaries[included]])
    n = len(x) + m // 2
    keras.utils.set_random_seed(seed)
    gan = make_dpwgan_gp(capacity=capacity, latent_size=16, seed=seed)
    config = DPConfig(aggregation="micro" if private else "none", l2_norm_clip=l2_norm_clip,
                      clipping="per_example", seed=seed)
    plan = plan_privacy(config, gan.term_spec(), n, batch_size, epochs, delta=delta,
                        target_epsilon=target_epsilon if private else None)
    dp = plan.config if private else config.replace(expected_batch_size=float(batch_size))
    lr = default_learning_rate(batch_size)
    gan.compile(dp_adam(lr), dp_adam(lr), dp=dp, num_examples=n, delta=plan.delta)
    gan.generate(1)
    gan.critic(canaries[:1])
    before = gan.critic(canaries).numpy()
    batches, steps = poisson_batches((x_train,), n, batch_size, seed)
    gan.fit(batches, epochs=epochs, steps_per_epoch=steps, verbose=0)
    scores = gan.critic(canaries).numpy() - before
    return _one_run_record(
        scores, included, confidence, start,
        family=f"DP-WGAN-GP critic ({'micro, per_example' if private else 'none'}, capacity {capacity}, digits 28x28)",
        canary="input-space, critic-value score",
        private=private,
        reported_epsilon=gan.epsilon(),
        delta=plan.delta,
        noise_multiplier=dp.noise_multiplier if private else 0.0,
        steps=plan.planned_steps,
        num_examples=n,
        batch_size=batch_size,
        l2_norm_clip=l2_norm_clip,
    )


# -- many runs ------------------------------------------------------------------------------------
def many_run_audit(runs: int = 100, private: bool = True, target_epsilon: float = 2.0, epochs: int = 5,
                   batch_size: int = 64, l2_norm_clip: float = 1.0, learning_rate: float = 0.5,
                   magnitude: float = 1000.0, n_real: int | None = 500, delta: float | None = None,
                   seed: int = 0, confidence: float = 0.95) -> dict:
    """Classic audit: `runs` models with one gradient-space canary and `runs` without.

    Both sides run one mechanism (one compiled `make_private` model: the same q, noise and
    steps; weights reset before every run; fresh Poisson batches and noise per run).
    """
    from tfpriv.training.private_model import make_private
    start = time.time()
    real, y, canaries, canary_y, d = _classifier_data(1, "gradient", magnitude, n_real, seed)
    datasets = {True: (np.concatenate([real, canaries]), np.concatenate([y, canary_y])), False: (real, y)}
    n = len(real) + 1
    model = _linear_model(real.shape[1], seed, zero_rows_from=d)
    init = [w.copy() for w in model.get_weights()]
    config = DPConfig(aggregation="micro", l2_norm_clip=l2_norm_clip, noise_multiplier=0.0, seed=seed)
    dp = make_private(model, _per_example_loss(), config, num_examples=n, batch_size=batch_size,
                             delta=delta, target_epsilon=target_epsilon if private else None,
                             epochs=epochs if private else None)
    dp.compile(optimizer=keras.optimizers.SGD(learning_rate))
    scores: dict[bool, list[float]] = {True: [], False: []}
    steps = 0
    for r in range(runs):
        for with_canary in (True, False):
            model.set_weights(init)
            before = dp.ledger.total_steps
            batches, per_epoch = poisson_batches(datasets[with_canary], n, batch_size, seed * 100003 + 2 * r + with_canary)
            dp.fit(batches, epochs=epochs, steps_per_epoch=per_epoch, verbose=0)
            steps = dp.ledger.total_steps - before
            scores[with_canary].append(float(_gradient_scores(init[0], model.layers[0].kernel.numpy(), np.array([d]))[0]))
    reported = (RDP.epsilon([(dp.sampling_rate, dp.effective_noise_multiplier, steps)], dp.delta) if private
                else math.inf)
    bound = many_run_epsilon_lower_bound(scores[True], scores[False], dp.delta, confidence)
    return {
        "family": "make_private (linear classifier, digits)",
        "canary": "gradient-space (one canary)",
        "private": private,
        "reported_epsilon": reported,
        "delta": dp.delta,
        "noise_multiplier": dp.dp_config.noise_multiplier,
        "steps": steps,
        "runs_per_side": runs,
        **bound,
        "mean_score_in": float(np.mean(scores[True])),
        "mean_score_out": float(np.mean(scores[False])),
        "seconds": round(time.time() - start, 1),
    }
