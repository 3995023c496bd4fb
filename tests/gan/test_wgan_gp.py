"""DP-WGAN-GP: the three errors of earlier DP-GAN code (004) cannot happen, and the GP path is exact.

1. per-example clipping, not clipping of the averaged gradient;
2. the noise std of the averaged critic gradient is z*C/B (B the expected batch size);
3. the whole critic's per-example gradient is clipped jointly at C.
"""
import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import (clip_jointly, critic_inputs, dp, global_norm, naive_per_example_grads, real_batch, row,
                               tiny_wgan)
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.wgan_gp import make_dpwgan_gp
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.accounting import RDP


@pytest.fixture(scope="module")
def cond_model():
    model = tiny_wgan(dp(clip=1.0, noise=1.0, batch=8.0), conditional=True)
    model.prepare(real_batch(8, conditional=True))
    return model


def test_clipped_sum_equals_naive_per_example_loop_not_clip_of_average(cond_model):
    inputs = critic_inputs(6, conditional=True, seed=1)
    naive = naive_per_example_grads(cond_model, inputs)
    norms = np.array([global_norm(g) for g in naive])
    clip = float(np.median(norms))  # half the examples are clipped, half are not
    assert (norms > clip * 1.01).sum() >= 2 and (norms < clip * 0.99).sum() >= 2
    expected = [sum(parts) for parts in zip(*[clip_jointly(g, clip) for g in naive])]
    # Both exact per-example paths of the engine: vmap over examples and tape.jacobian.
    assert cond_model.engine.per_example
    for clipping in ("per_example", "vectorized"):
        engine = DPGradientEngine(dp(clip=clip, batch=8.0, clipping=clipping), cond_model.critic, cond_model.spec,
                                  variables=cond_model.critic.trainable_variables)
        out = engine.clipped_sums(cond_model.loss_fn, inputs)
        np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), norms, rtol=1e-4)
        for got, want in zip(out["sample"], expected):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    # The wrong recipe (clip the summed/averaged gradient) gives a different answer.
    wrong = clip_jointly([sum(parts) for parts in zip(*naive)], clip)
    assert global_norm([a - b for a, b in zip(wrong, expected)]) > 0.1 * clip


def test_one_example_moves_the_clipped_sum_by_at_most_c(cond_model):
    clip = 0.5
    engine = DPGradientEngine(dp(clip=clip, batch=8.0), cond_model.critic, cond_model.spec,
                              variables=cond_model.critic.trainable_variables)
    base = critic_inputs(5, conditional=True, seed=2)
    outlier = critic_inputs(1, conditional=True, seed=3, scale=50.0)  # a huge per-example gradient
    both = {k: tf.concat([base[k], outlier[k]], 0) for k in base}
    s0 = engine.clipped_sums(cond_model.loss_fn, base)["sample"]
    s1 = engine.clipped_sums(cond_model.loss_fn, both)
    assert np.sqrt(s1["sample_sq_norms"].numpy()[-1]) > 20 * clip
    moved = global_norm([(a - b).numpy() for a, b in zip(s1["sample"], s0)])
    assert moved == pytest.approx(clip, rel=1e-4)


def test_whole_critic_is_clipped_jointly(cond_model):
    clip = 0.05
    inputs = row(critic_inputs(3, conditional=True, seed=4), 0)
    raw = naive_per_example_grads(cond_model, inputs)[0]
    assert global_norm(raw) > 10 * clip
    engine = DPGradientEngine(dp(clip=clip, batch=8.0), cond_model.critic, cond_model.spec,
                              variables=cond_model.critic.trainable_variables)
    # Every critic variable (and nothing else) is in the one clipped vector.
    assert {id(v) for v in engine.variables} == {id(v) for v in cond_model.critic.trainable_variables}
    assert not {id(v) for v in engine.variables} & {id(v) for v in cond_model.generator.trainable_variables}
    clipped = [g.numpy() for g in engine.clipped_sums(cond_model.loss_fn, inputs)["sample"]]
    assert global_norm(clipped) == pytest.approx(clip, rel=1e-4)
    factor = clip / global_norm(raw)
    for c, r in zip(clipped, raw):  # one factor for all groups (kernels, biases, every layer)
        np.testing.assert_allclose(c, factor * r, rtol=1e-4, atol=1e-9)
    # Group-wise clipping would have left each of the 8 groups at up to C: a norm far above C.
    groupwise = [clip_jointly([r], clip)[0] for r in raw]
    assert global_norm(groupwise) > 2 * clip
    # The accountant sees sensitivity 1 in units of that joint C.
    assert engine.effective_noise_multiplier == pytest.approx(1.0)


def test_noise_std_of_averaged_critic_gradient_is_z_c_over_expected_batch(cond_model):
    z, clip, expected_batch = 1.5, 0.1, 50.0
    engine = DPGradientEngine(dp(clip=clip, noise=z, batch=expected_batch, seed=1),
                              cond_model.critic, cond_model.spec, variables=cond_model.critic.trainable_variables)
    spec = {"image": tf.TensorSpec([None, 28, 28, 1]), "fake": tf.TensorSpec([None, 28, 28, 1]),
            "mix": tf.TensorSpec([None]), "label": tf.TensorSpec([None], tf.int32)}
    private_gradient = tf.function(lambda x: engine.gradients(cond_model.loss_fn, x)[0], input_signature=[spec])
    for batch in (3, 12):  # two realised (Poisson) sizes, one expected batch size
        inputs = critic_inputs(batch, conditional=True, seed=5)
        draws = [np.concatenate([g.numpy().ravel() for g in private_gradient(inputs)]) for _ in range(3)]
        # Same clipped sum in every draw: differences are pure noise with variance 2 std^2.
        diffs = np.concatenate([draws[0] - draws[1], draws[1] - draws[2]])
        std = diffs.std() / np.sqrt(2.0)
        assert diffs.size > 2000
        # z*C/B, independent of the realised batch size; not z*C, z*C/sqrt(B) or z*C/B^2.
        assert std == pytest.approx(z * clip / expected_batch, rel=0.06)


@pytest.mark.parametrize("conditional,gp_weight", [(True, 10.0), (False, 10.0), (True, 0.0)])
def test_terms_are_the_papers_with_the_critic_called_on_each_image_apart(conditional, gp_weight):
    """Wasserstein term D(fake_i) - D(real_i), penalty gp_weight (||grad D(xhat_i)|| - 1)^2 with xhat_i =
    m_i real_i + (1 - m_i) fake_i, each computed here by its own critic call (the model calls the critic once
    on fakes and reals together when the penalty is on)."""
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10 if conditional else None, seed=0,
                           gp_weight=gp_weight)
    inputs = critic_inputs(5, conditional=conditional, seed=9)
    labels = inputs.get("label")
    terms = model.critic_terms(inputs["image"], inputs["fake"], labels, inputs["mix"])
    for i in range(5):
        critic = (lambda x: model.critic(x if labels is None else [x, labels[i:i + 1]], training=True))  # noqa: E731
        want = float(critic(inputs["fake"][i:i + 1])[0] - critic(inputs["image"][i:i + 1])[0])
        np.testing.assert_allclose(float(terms["wasserstein"][i]), want, rtol=1e-5, atol=1e-6)
        m = float(inputs["mix"][i])
        xhat = tf.Variable(m * inputs["image"][i:i + 1] + (1 - m) * inputs["fake"][i:i + 1])
        with tf.GradientTape() as tape:
            value = critic(xhat)
        penalty = gp_weight * (np.linalg.norm(tape.gradient(value, xhat).numpy()) - 1.0) ** 2
        np.testing.assert_allclose(float(terms["penalty"][i]), penalty, rtol=1e-4, atol=1e-6)


def test_verify_refuses_fast_clipping_for_the_gradient_penalty(cond_model):
    fast = DPGradientEngine(dp(clipping="fast"), cond_model.critic, cond_model.spec,
                            variables=cond_model.critic.trainable_variables)
    with pytest.raises(ConfigError, match="fast clipping is not exact"):
        fast.verify(cond_model.loss_fn, critic_inputs(4, conditional=True, seed=6))
    with pytest.raises(ConfigError, match="^--clipping: the gradient penalty"):
        tiny_wgan(dp(clipping="fast", verify=False))


def test_train_step_applies_the_noised_gradient_unscaled_and_counts_critic_steps():
    """The step's noise and counts (the critic's clipping: the tests above); the clipping check before
    training (DPConfig.verify) is off."""
    z, clip, expected_batch = 100.0, 1.0, 50.0
    model = tiny_wgan(dp(clip=clip, noise=z, batch=expected_batch, seed=7, verify=False), critic_steps=2,
                      d_optimizer=keras.optimizers.SGD(1.0))
    model.prepare(real_batch(7))
    model.ledger.begin(0.01, z)
    step = tf.function(model.train_step, input_signature=[{"image": tf.TensorSpec([None, 28, 28, 1])}])
    before = [v.numpy().copy() for v in model.critic.trainable_variables]
    step(real_batch(5))
    delta = np.concatenate([(b - v.numpy()).ravel() for b, v in zip(before, model.critic.trainable_variables)])
    # SGD(1) moves the critic by the engine's gradient: clipped part <= 5*C/B = 0.1 in norm,
    # noise std z*C/B = 2 per coordinate (a stray batch factor would be off by 50x or 7x).
    assert delta.std() == pytest.approx(z * clip / expected_batch, rel=0.06)
    for k in range(4):
        step(real_batch(4 + k % 3, seed=k))  # Poisson-like varying sizes, one trace
    assert model.ledger.total_steps == 5  # one Poisson-sampled Gaussian per critic step
    assert int(model.d_optimizer.iterations.numpy()) == 5
    assert int(model.g_optimizer.iterations.numpy()) == 2  # after critic steps 2 and 4
    assert model.ledger.epsilon(1e-5) == pytest.approx(RDP.epsilon([(0.01, z, 5)], 1e-5))


def test_label_is_part_of_the_clipped_example(cond_model):
    """The one-hot label channels of the critic's first kernel get gradient only for the example's label."""
    inputs = critic_inputs(2, conditional=True, seed=8)
    kernel_index = [i for i, v in enumerate(cond_model.critic.trainable_variables) if "conv1/kernel" in v.name][0]
    for i, grads in enumerate(naive_per_example_grads(cond_model, inputs)):
        kernel = grads[kernel_index]  # [5, 5, 1 + 10, capacity]
        label = int(inputs["label"][i])
        per_channel = np.abs(kernel).sum(axis=(0, 1, 3))
        assert per_channel[1 + label] > 0
        assert np.all(per_channel[1:][np.arange(10) != label] == 0)
    flipped = dict(inputs, label=tf.constant((inputs["label"].numpy() + 1) % 10))
    a = naive_per_example_grads(cond_model, inputs)[0]
    b = naive_per_example_grads(cond_model, flipped)[0]
    assert global_norm([x - y for x, y in zip(a, b)]) > 1e-3


def test_generator_ema_is_the_average_of_the_generator_trajectory():
    """--generator_ema: post-processing of the generator's own updates (no data, no privacy cost). The
    critic's clipping check (DPConfig.verify) is off: only the generator steps."""
    from tfpriv.gan.wgan_gp import dp_adam
    model = make_dpwgan_gp(capacity=2, latent_size=4, seed=0, generator_batch_size=4)
    model.compile(dp_adam(1e-3), dp_adam(1e-2, ema=0.9), dp=dp(verify=False), num_examples=1000)
    model.prepare(real_batch(4))
    variables = model.generator.trainable_variables
    average = [v.numpy() for v in variables]
    for _ in range(3):
        model._generator_step()
        average = [0.9 * a + 0.1 * v.numpy() for a, v in zip(average, variables)]
    raw = [v.numpy() for v in variables]
    model.g_optimizer.finalize_variable_values(variables)
    for v, a, r in zip(variables, average, raw):
        np.testing.assert_allclose(v.numpy(), a, rtol=1e-5, atol=1e-7)
    assert global_norm([a - r for a, r in zip(average, raw)]) > 1e-4
