"""The canary audits only the study of docs/audit.md runs (`audit_sweep.py --parts=canaries`): one-run
audits of a PriVAE and of the DP-WGAN-GP critic, and the classic many-run audit of `make_private`.
The classifier's one-run audit and the shared helpers (data, inclusion, Poisson batches, the record)
are `tfpriv.audit.canary`; the method is described there and in docs/audit.md.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from tfpriv.audit.bounds import many_run_epsilon_lower_bound  # noqa: E402
from tfpriv.audit.canary import (classifier_data, digits, gradient_scores, inclusion, linear_model,  # noqa: E402
                                 one_run_record, per_example_loss, poisson_batches)
from tfpriv.compat import keras  # noqa: E402
from tfpriv.privacy.accounting import RDP  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.terms import BatchLayout  # noqa: E402


# -- PriVAE ---------------------------------------------------------------------------------------
def _neg_elbo(vae, x: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Per-example negative ELBO (rec + kld) averaged over `draws` fixed reparameterisation draws."""
    with vae.dp_state.swapped(rng=tf.random.Generator.from_seed(seed, alg="philox")):
        total = np.zeros(len(x))
        for _ in range(draws):
            terms = vae.loss_terms(tf.constant(x), BatchLayout.single(len(x)), training=False)
            total += terms.sample_total().numpy()
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
    return one_run_record(
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
    return one_run_record(
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
    real, y, canaries, canary_y, d = classifier_data(1, "gradient", magnitude, n_real, seed)
    datasets = {True: (np.concatenate([real, canaries]), np.concatenate([y, canary_y])), False: (real, y)}
    n = len(real) + 1
    model = linear_model(real.shape[1], seed, zero_rows_from=d)
    init = [w.copy() for w in model.get_weights()]
    config = DPConfig(aggregation="micro", l2_norm_clip=l2_norm_clip, noise_multiplier=0.0, seed=seed)
    dp = make_private(model, per_example_loss(), config, num_examples=n, batch_size=batch_size,
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
            scores[with_canary].append(float(gradient_scores(init[0], model.layers[0].kernel.numpy(), np.array([d]))[0]))
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
