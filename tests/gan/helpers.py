"""Tiny GANs and fixed per-example inputs for the GAN tests."""
from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tfpriv.gan.dpgan import make_dpgan, rmsprop
from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp
from tfpriv.privacy.config import DPConfig


N_TRAIN = 1000  # the training-set size the tiny GANs are accounted for


def dp(clip: float = 1.0, noise: float = 1.0, batch: float = 8.0, clipping: str = "per_example", seed: int = 0,
       verify: bool = True) -> DPConfig:
    return DPConfig(aggregation="micro", l2_norm_clip=clip, noise_multiplier=noise, expected_batch_size=batch,
                    clipping=clipping, seed=seed, verify=verify)


def tiny_wgan(config: DPConfig, conditional: bool = False, critic_steps: int = 1, d_optimizer=None):
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10 if conditional else None,
                           critic_steps=critic_steps, seed=0, generator_batch_size=4)
    model.compile(d_optimizer or dp_adam(1e-3), dp_adam(1e-3), dp=config, num_examples=N_TRAIN)
    return model


def tiny_dpgan(config: DPConfig, conditional: bool = False, critic_steps: int = 2, **kwargs):
    """kwargs: make_dpgan's gan_loss, weight_clip."""
    model = make_dpgan(capacity=2, latent_size=4, num_classes=10 if conditional else None,
                       critic_steps=critic_steps, seed=0, generator_batch_size=4, **kwargs)
    model.compile(rmsprop(1e-3), rmsprop(1e-3), dp=config, num_examples=N_TRAIN)
    return model


def critic_inputs(n: int, conditional: bool = False, seed: int = 0, scale: float = 1.0) -> dict:
    """Fixed real/fake/mix(/label) rows, so each example's loss term is deterministic."""
    rng = np.random.default_rng(seed)
    out = {
        "image": tf.constant(scale * rng.random((n, 28, 28, 1), dtype=np.float32)),
        "fake": tf.constant(rng.random((n, 28, 28, 1), dtype=np.float32)),
        "mix": tf.constant(rng.random(n).astype(np.float32)),
    }
    if conditional:
        out["label"] = tf.constant(rng.integers(0, 10, n).astype(np.int32))
    return out


def real_batch(n: int, conditional: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {"image": tf.constant(rng.random((n, 28, 28, 1), dtype=np.float32))}
    if conditional:
        out["label"] = tf.constant(rng.integers(0, 10, n).astype(np.int32))
    return out


def row(inputs: dict, i: int) -> dict:
    return {k: v[i:i + 1] for k, v in inputs.items()}


def naive_per_example_grads(model, inputs: dict) -> list[list[np.ndarray]]:
    """Example by example: the gradient of that example's loss alone (a batch of one)."""
    n = int(inputs["image"].shape[0])
    out = []
    for i in range(n):
        with tf.GradientTape() as tape:
            terms = model.loss_fn(row(inputs, i), None)
            loss = tf.reduce_sum(terms.sample_total())
        grads = tape.gradient(loss, model.critic.trainable_variables,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        out.append([g.numpy() for g in grads])
    return out


def global_norm(grads) -> float:
    return float(np.sqrt(sum(np.sum(np.square(g)) for g in grads)))


def clip_jointly(grads, c: float) -> list:
    """One example's gradients scaled together to global norm <= c (the naive clip)."""
    n = global_norm(grads)
    return [g * min(1.0, c / max(n, 1e-12)) for g in grads]


def small_test_split(monkeypatch, n: int = 500) -> None:
    """For one test, `load_dataset` keeps the first n test images (scoring all 10,000 takes most of
    a tiny run's or re-score's time); the training split, which holds the validation split, stays whole."""
    import tfpriv.data
    load = tfpriv.data.load_dataset

    def load_small(*args, **kwargs):
        data = load(*args, **kwargs)
        return dataclasses.replace(data, x_test=data.x_test[:n],
                                   labels_test={k: v[:n] for k, v in data.labels_test.items()})

    monkeypatch.setattr(tfpriv.data, "load_dataset", load_small)
