"""The generator's mode-seeking term (`tfpriv.gan.diversity`, `PrivateWGAN(diversity_weight=)`)."""
import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import N_TRAIN, dp, global_norm, real_batch
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.diversity import EPS, mode_seeking_loss, mode_seeking_ratio
from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp


def test_ratio_and_loss_equal_a_naive_loop_per_pair():
    rng = np.random.default_rng(0)
    fa, fb = rng.random((3, 28, 28, 1), dtype=np.float32), rng.random((3, 28, 28, 1), dtype=np.float32)
    za, zb = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    ratio = mode_seeking_ratio(fa, fb, za, zb).numpy()
    for i in range(3):
        expected = np.mean(np.abs(fa[i] - fb[i])) / np.mean(np.abs(za[i] - zb[i]))
        assert ratio[i] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(mode_seeking_loss(tf.constant([0.0, 1.0, 4.0])).numpy(), [1 / EPS, 1.0, 0.25], rtol=1e-4)
    assert mode_seeking_ratio(fa, fa, za, zb).numpy() == pytest.approx(np.zeros(3))  # collapse: ratio 0


def _model(weight: float, conditional: bool = True, batch: int = 6, num_examples: int = N_TRAIN):
    """The critic's clipping check (DPConfig.verify) is off: the term is the generator's alone, so the
    critic's loss that check reads is the plain WGAN-GP's (checked by tests/gan/test_wgan_gp.py and by
    every GAN run of train.py)."""
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10 if conditional else None, seed=3,
                           generator_batch_size=batch, diversity_weight=weight)
    model.compile(dp_adam(1e-3), keras.optimizers.SGD(1.0), dp=dp(verify=False), num_examples=num_examples)
    model.prepare(real_batch(4, conditional=conditional))
    return model


def test_paired_fakes_share_a_label_and_labels_stay_uniform():
    model = _model(1.0)
    labels = model._generator_labels(tf.constant(7)).numpy()
    assert labels.shape == (7,) and np.array_equal(labels[:3], labels[3:6])
    many = model._generator_labels(tf.constant(20001)).numpy()
    counts = np.bincount(many, minlength=10) / len(many)
    assert np.all(np.abs(counts - 0.1) < 0.01)  # uniform: no look at the private label marginal


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_generator_step_descends_the_adversarial_plus_mode_seeking_loss(weight):
    """SGD(1) moves the generator by minus the gradient of mean(-D(G(z))) + w * mean_pairs 1/(ratio + eps),
    recomputed here from the same draws of the model's stream."""
    model = _model(weight)
    state = model.rng.state.numpy()
    n, pairs = 6, 3
    labels = model._generator_labels(tf.constant(n))
    latent = model._latent(tf.constant(n))
    variables = model.generator.trainable_variables
    with tf.GradientTape() as tape:
        fake = model.generator([latent, labels], training=True)
        loss = tf.reduce_mean(-model.critic([fake, labels], training=True))
        ratios = tf.stack([tf.reduce_mean(tf.abs(fake[i] - fake[pairs + i])) /
                           tf.reduce_mean(tf.abs(latent[i] - latent[pairs + i])) for i in range(pairs)])
        loss += weight * tf.reduce_mean(1.0 / (ratios + EPS))
    expected = tape.gradient(loss, variables)
    model.rng.reset_from_seed(0)
    model.rng.state.assign(state)
    before = [v.numpy().copy() for v in variables]
    logs = model._generator_step()
    moved = [b - v.numpy() for b, v in zip(before, variables)]
    for m, g in zip(moved, expected):
        np.testing.assert_allclose(m, g.numpy(), rtol=1e-4, atol=1e-6)
    if weight:
        assert float(logs["g_diversity"]) == pytest.approx(float(tf.reduce_mean(ratios)), rel=1e-5)
    else:
        assert "g_diversity" not in logs and "g_diversity" not in model.metric_names()


def test_the_term_costs_no_privacy_and_is_logged():
    """The critic's mechanism and ledger are the same with and without the term (generator-only loss)."""
    epsilons, steps = [], []
    for weight in (0.0, 1.0):
        model = _model(weight, conditional=False, num_examples=40)
        history = model.fit(np.random.default_rng(0).random((40, 28, 28, 1), dtype=np.float32), epochs=1,
                            batch_size=8, verbose=0)
        epsilons.append(model.ledger.epsilon(1e-5))
        assert ("g_diversity" in history.history) == (weight > 0)
        steps.append(model.ledger.total_steps)
    assert epsilons[0] == epsilons[1] and np.isfinite(epsilons[0])
    assert steps[0] == steps[1] > 0


def test_refuses_bad_weights_and_a_generator_batch_without_pairs():
    with pytest.raises(ConfigError, match="^diversity_weight: must be a finite number >= 0"):
        make_dpwgan_gp(capacity=2, latent_size=4, diversity_weight=-1.0)
    with pytest.raises(ConfigError, match="^generator_batch_size: the mode-seeking term pairs fakes"):
        _model(1.0, batch=1)
