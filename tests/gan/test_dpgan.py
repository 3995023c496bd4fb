"""DPGAN: exact fast-path clipping at c_g, weight clipping, the logistic loss and Xie et al.'s noise formula."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import critic_inputs, dp, global_norm, naive_per_example_grads, real_batch, tiny_dpgan
from tfpriv.errors import ConfigError
from tfpriv.gan.dpgan import privacy_comparison, xie_epsilon, xie_sigma_n
from tfpriv.privacy.accounting import RDP


@pytest.mark.parametrize("gan_loss,weight_clip", [("wasserstein", 0.01), ("logistic", 0.0)])
def test_fast_path_clips_each_example_at_c_g_like_a_naive_loop(gan_loss, weight_clip):
    model = tiny_dpgan(dp(clip=1.0, clipping="fast"), conditional=True, gan_loss=gan_loss, weight_clip=weight_clip)
    model.prepare(real_batch(6, conditional=True))  # runs the engine's fast-path verification
    inputs = critic_inputs(6, conditional=True, seed=11)
    naive = naive_per_example_grads(model, inputs)
    norms = np.array([global_norm(g) for g in naive])
    c_g = float(np.median(norms))
    engine = type(model.engine)(dp(clip=c_g, clipping="fast"), model.critic, model.spec,
                                variables=model.critic.trainable_variables)
    assert engine.recorder is not None  # the ghost-norm path, not per-example Jacobians
    out = engine.clipped_sums(model.loss_fn, inputs)
    np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), norms, rtol=1e-4)
    expected = [sum(g[k] * min(1.0, c_g / n) for g, n in zip(naive, norms)) for k in range(len(naive[0]))]
    for got, want in zip(out["sample"], expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-5)


def test_critic_weights_are_clipped_after_each_update():
    model = tiny_dpgan(dp(clip=1.0, noise=0.5, batch=8.0, clipping="fast"), critic_steps=2)
    model.d_optimizer.learning_rate.assign(0.5)
    model.prepare(real_batch(8))
    model.train_step(real_batch(8))
    weights = np.concatenate([v.numpy().ravel() for v in model.critic.trainable_variables])
    assert np.abs(weights).max() == pytest.approx(model.weight_clip)
    assert np.mean(np.isclose(np.abs(weights), model.weight_clip)) > 0.5  # the clip was active
    assert model.ledger.total_steps == 1 and int(model.g_optimizer.iterations.numpy()) == 0


def _scores(model, inputs) -> tuple[np.ndarray, np.ndarray]:
    d = lambda x: model.critic([inputs[x], inputs["label"]]).numpy().astype(np.float64)  # noqa: E731
    return d("image"), d("fake")


def test_logistic_loss_is_the_cross_entropy_of_a_real_fake_classifier():
    model = tiny_dpgan(dp(clipping="fast"), conditional=True, gan_loss="logistic", weight_clip=0.0)
    inputs = critic_inputs(5, conditional=True, seed=3, scale=3.0)
    terms = model.loss_fn(inputs, None)
    assert list(terms.sample) == ["logistic"]
    d_real, d_fake = _scores(model, inputs)
    sigmoid = lambda t: 1.0 / (1.0 + np.exp(-t))  # noqa: E731
    want = -np.log(sigmoid(d_real)) - np.log(1.0 - sigmoid(d_fake))
    np.testing.assert_allclose(terms.sample["logistic"].numpy(), want, rtol=1e-5)
    scores = tf.constant([-3.0, -0.5, 0.0, 2.0])  # non-saturating: -log D(G(z))
    np.testing.assert_allclose(model.generator_loss(scores).numpy(), -np.log(sigmoid(scores.numpy())), rtol=1e-5)
    wgan = tiny_dpgan(dp(clipping="fast"), conditional=True)
    d_real, d_fake = _scores(wgan, inputs)
    np.testing.assert_allclose(wgan.loss_fn(inputs, None).sample["wasserstein"].numpy(), d_fake - d_real,
                               rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(wgan.generator_loss(scores).numpy(), -scores.numpy())


def test_weight_clip_zero_turns_clipping_off():
    # The update that test_critic_weights_are_clipped_after_each_update clips to c_p, left unclipped.
    model = tiny_dpgan(dp(clip=1.0, noise=0.5, batch=8.0, clipping="fast", verify=False), gan_loss="logistic",
                       weight_clip=0.0)
    model.d_optimizer.learning_rate.assign(0.5)
    model.prepare(real_batch(8))
    model.train_step(real_batch(8))
    weights = np.concatenate([v.numpy().ravel() for v in model.critic.trainable_variables])
    assert np.abs(weights).max() > 0.1 and model.ledger.total_steps == 1
    assert model.metric_names() == ["d_loss", "g_loss"]  # no Wasserstein distance or penalty to log


def test_xie_formula_and_comparison_with_our_accountant():
    # sigma_n = 2 q sqrt(n_d log(1/delta)) / eps: q=0.01, n_d=5, delta=1e-5, eps=1.
    assert xie_sigma_n(1.0, 0.01, 5, 1e-5) == pytest.approx(0.02 * math.sqrt(5 * math.log(1e5)))
    assert xie_epsilon(xie_sigma_n(2.0, 0.01, 5, 1e-5), 0.01, 5, 1e-5) == pytest.approx(2.0)
    cmp = privacy_comparison(noise_multiplier=1.0, q=64 / 60000, critic_steps=5, delta=1e-5,
                             expected_batch_size=64, total_critic_steps=5000)
    assert cmp["rdp_epsilon_run"] == pytest.approx(RDP.epsilon([(64 / 60000, 1.0, 5000)], 1e-5))
    assert cmp["rdp_epsilon_one_outer_loop"] == pytest.approx(RDP.epsilon([(64 / 60000, 1.0, 5)], 1e-5))
    # Noise on the mean: sigma_n = z/B, so the formula's epsilon is B times the "on the sum" reading.
    assert cmp["xie_epsilon_one_outer_loop_sigma_on_mean"] == pytest.approx(
        64 * cmp["xie_epsilon_one_outer_loop_sigma_on_sum"])


@pytest.mark.parametrize("kwargs,message", [
    ({"weight_clip": -1.0}, "weight_clip: must be a finite number >= 0 (0: off), got -1.0"),
    ({"weight_clip": 0.0}, "weight_clip: the Wasserstein critic needs weight clipping (> 0)"),
    ({"gan_loss": "hinge"}, "gan_loss: must be one of wasserstein, logistic, got 'hinge'"),
])
def test_bad_settings_are_refused(kwargs, message):
    from tfpriv.gan.dpgan import make_dpgan
    with pytest.raises(ConfigError) as err:
        make_dpgan(capacity=2, latent_size=4, **kwargs)
    assert str(err.value).startswith(message)
