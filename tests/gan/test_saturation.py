"""The generator's saturation penalty (`tfpriv.gan.saturation`, `PrivateWGAN(saturation_bound=)`)."""
import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import N_TRAIN, dp, real_batch
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.saturation import LOGITS_LAYER, saturation_penalty, with_logits
from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp


def test_penalty_equals_a_naive_loop_and_is_zero_inside_the_bound():
    logits = np.random.default_rng(0).normal(scale=8.0, size=(3, 28, 28, 1)).astype(np.float32)
    got = saturation_penalty(logits, 6.0).numpy()
    for i in range(3):
        expected = np.mean([max(abs(x) - 6.0, 0.0) ** 2 for x in logits[i].ravel()])
        assert got[i] == pytest.approx(expected, rel=1e-5)
    assert saturation_penalty(np.clip(logits, -6.0, 6.0), 6.0).numpy() == pytest.approx(np.zeros(3))


def test_with_logits_shares_the_generator_and_returns_its_pre_sigmoid_values():
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
    both = with_logits(model.generator)
    inputs = [tf.random.normal([5, 4]), tf.range(5)]
    images, logits = both(inputs)
    np.testing.assert_allclose(images.numpy(), model.generator(inputs).numpy(), rtol=1e-6)
    np.testing.assert_allclose(images.numpy(), tf.sigmoid(logits).numpy(), rtol=1e-5, atol=1e-7)
    assert {id(v) for v in both.trainable_variables} == {id(v) for v in model.generator.trainable_variables}


def _model(bound: float, num_examples: int = N_TRAIN):
    """The critic's clipping check (DPConfig.verify) is off: the penalty is the generator's alone, so the
    critic's loss that check reads is the plain WGAN-GP's (checked by tests/gan/test_wgan_gp.py and by
    every GAN run of train.py)."""
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=3, generator_batch_size=6,
                           saturation_bound=bound)
    model.compile(dp_adam(1e-3), keras.optimizers.SGD(1.0), dp=dp(verify=False), num_examples=num_examples)
    model.prepare(real_batch(4, conditional=True))
    return model


@pytest.mark.parametrize("bound", [0.0, 0.05])
def test_generator_step_descends_the_adversarial_plus_saturation_loss(bound):
    """SGD(1) moves the generator by minus the gradient of mean(-D(G(z))) + mean_i s_i, recomputed here
    from the same draws of the model's stream (a bound of 0.05 makes the penalty active at initialisation)."""
    model = _model(bound)
    state = model.rng.state.numpy()
    labels = model._generator_labels(tf.constant(6))
    latent = model._latent(tf.constant(6))
    variables = model.generator.trainable_variables
    logits_model = keras.Model(model.generator.inputs, model.generator.get_layer(LOGITS_LAYER).output)
    with tf.GradientTape() as tape:
        fake = model.generator([latent, labels], training=True)
        loss = tf.reduce_mean(-model.critic([fake, labels], training=True))
        if bound:
            x = logits_model([latent, labels], training=True)
            penalty = tf.reduce_mean(tf.square(tf.nn.relu(tf.abs(x) - bound)), axis=[1, 2, 3])
            loss += tf.reduce_mean(penalty)
    expected = tape.gradient(loss, variables)
    model.rng.reset_from_seed(0)
    model.rng.state.assign(state)
    before = [v.numpy().copy() for v in variables]
    logs = model._generator_step()
    for b, v, g in zip(before, variables, expected):
        np.testing.assert_allclose(b - v.numpy(), g.numpy(), rtol=1e-4, atol=1e-6)
    if bound:
        assert float(logs["g_saturation"]) == pytest.approx(float(tf.reduce_mean(penalty)), rel=1e-5)
        assert float(logs["g_saturation"]) > 0
    else:
        assert "g_saturation" not in logs and "g_saturation" not in model.metric_names()


def test_the_penalty_costs_no_privacy_adds_no_variables_and_is_logged():
    epsilons, steps, counts = [], [], []
    for bound in (0.0, 0.05):
        model = _model(bound, num_examples=40)
        images = np.random.default_rng(0).random((40, 28, 28, 1), dtype=np.float32)
        labels = np.arange(40, dtype=np.int32) % 10
        history = model.fit({"image": images, "label": labels}, epochs=1, batch_size=8, verbose=0)
        assert ("g_saturation" in history.history) == (bound > 0)
        epsilons.append(model.ledger.epsilon(1e-5))
        steps.append(model.ledger.total_steps)
        counts.append(len(model.trainable_variables))
    assert epsilons[0] == epsilons[1] and np.isfinite(epsilons[0])
    assert steps[0] == steps[1] > 0 and counts[0] == counts[1]


def test_refuses_a_bad_bound_and_a_generator_without_the_logits_layer():
    with pytest.raises(ConfigError, match="^saturation_bound: must be a finite number >= 0"):
        make_dpwgan_gp(capacity=2, latent_size=4, saturation_bound=float("nan"))
    plain = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(784, activation="sigmoid")])
    with pytest.raises(ConfigError, match="^saturation_bound: the generator has no layer 'deconv3'"):
        with_logits(plain)
