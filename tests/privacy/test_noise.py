"""Measured noise std of the privatized gradient equals the documented formula."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import LossTerms, TermSpec

SPEC = TermSpec(sample=("rec",), batch=("div",))


def wide_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input([60]), keras.layers.Dense(150)])   # 9150 coordinates


def loss_fn_for(model):
    def loss_fn(x, layout):
        z = model(x)
        mean = tf.reduce_sum(layout.gather(z), axis=1) / tf.maximum(tf.reduce_sum(layout.mask, 1), 1.0)[:, None]
        return LossTerms({"rec": tf.reduce_sum(tf.square(z), 1)}, {"div": tf.reduce_sum(tf.square(mean), 1)})
    return loss_fn


@pytest.mark.parametrize("aggregation,kw,expected", [
    ("micro", dict(max_batch_size=40), 1.3 * 0.7 / 32),
    ("batch", dict(), 1.3 * 0.7),
    ("termwise", dict(), 1.3 * math.hypot(0.7 / 32, 0.2 / 1)),
])
def test_measured_noise_std_matches_formula(aggregation, kw, expected):
    model = wide_model()
    loss_fn = loss_fn_for(model)
    x = tf.random.stateless_normal([20, 60], seed=[1, 1])
    common = dict(aggregation=aggregation, l2_norm_clip=0.7, batch_clip=0.2, num_partitions=1,
                  expected_batch_size=32, **kw)
    clean, _ = DPGradientEngine(DPConfig(noise_multiplier=0.0, seed=3, **common), model, SPEC).gradients(loss_fn, x)
    noisy_engine = DPGradientEngine(DPConfig(noise_multiplier=1.3, seed=3, **common), model, SPEC)
    assert noisy_engine.noise_stddev == pytest.approx(expected)
    noisy, _ = noisy_engine.gradients(loss_fn, x)
    noise = np.concatenate([(n - c).numpy().ravel() for n, c in zip(noisy, clean)])
    # 9150 draws: the sample std is within 4% of the truth with overwhelming probability.
    assert np.std(noise) == pytest.approx(expected, rel=0.04)
    assert abs(np.mean(noise)) < 4 * expected / math.sqrt(noise.size)


def test_noise_is_not_repeated_across_steps():
    model = wide_model()
    loss_fn = loss_fn_for(model)
    engine = DPGradientEngine(DPConfig(aggregation="micro", noise_multiplier=1.0, expected_batch_size=8, seed=0),
                              model, TermSpec(sample=("rec",)))
    x = tf.zeros([0, 60])
    a, _ = engine.gradients(lambda x, l: LossTerms({"rec": tf.reduce_sum(model(x), 1)}), x)
    b, _ = engine.gradients(lambda x, l: LossTerms({"rec": tf.reduce_sum(model(x), 1)}), x)
    assert not np.allclose(a[0].numpy(), b[0].numpy())


def encoder_decoder():
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input([60]), keras.layers.Dense(60)])   # 3660 coordinates
    decoder = keras.Sequential([keras.Input([60]), keras.layers.Dense(80)])   # 4880 coordinates
    return encoder, decoder


def latent_divergence_loss(encoder, decoder, psi_on_output=False):
    """phi: a reconstruction through both nets; psi: a divergence of the partition's mean code only."""
    def loss_fn(x, layout):
        z = encoder(x)
        out = decoder(z)
        coded = out if psi_on_output else z
        mean = tf.reduce_sum(layout.gather(coded), axis=1) / tf.maximum(tf.reduce_sum(layout.mask, 1), 1.0)[:, None]
        return LossTerms({"rec": tf.reduce_sum(tf.square(out), 1)}, {"div": tf.reduce_sum(tf.square(mean), 1)})
    return loss_fn


@pytest.mark.parametrize("clipping,clipped_sum,num_partitions", [
    ("fast", "bookkeeping", 4), ("fast", "reweight", 4), ("vectorized", "bookkeeping", 4),
    ("per_example", "bookkeeping", 4), ("per_example", "bookkeeping", 0), ("fast", "bookkeeping", 0),
])
def test_batch_wise_noise_only_on_variables_the_batch_wise_terms_reach(clipping, clipped_sum, num_partitions):
    """termwise: the decoder, which a latent divergence does not reach, gets z*C1/B; the encoder z*hypot(C1/B, C2/b)."""
    encoder, decoder = encoder_decoder()
    loss_fn = latent_divergence_loss(encoder, decoder)
    x = tf.random.stateless_normal([20, 60], seed=[1, 1])
    common = dict(aggregation="termwise", l2_norm_clip=0.7, batch_clip=0.7, num_partitions=num_partitions,
                  expected_batch_size=32, clipping=clipping, clipped_sum=clipped_sum)
    layout = DPGradientEngine(DPConfig(seed=5, **common), [encoder, decoder], SPEC).layout(tf.constant(20))
    clean_engine = DPGradientEngine(DPConfig(noise_multiplier=0.0, **common), [encoder, decoder], SPEC)
    sums = clean_engine.clipped_sums(loss_fn, x, layout)
    for g in sums["batch"][2:]:  # the psi sum is exactly 0 on the decoder
        assert not np.any(g.numpy())
    assert any(np.any(g.numpy()) for g in sums["batch"][:2])
    noisy_engine = DPGradientEngine(DPConfig(noise_multiplier=1.3, seed=3, **common), [encoder, decoder], SPEC)
    clean_engine.layout = noisy_engine.layout = lambda batch_size: layout  # the same partitions in both
    clean, _ = clean_engine.gradients(loss_fn, x)
    noisy, _ = noisy_engine.gradients(loss_fn, x)
    assert noisy_engine.psi_reaches == (True, True, False, False)
    b = 32 if num_partitions == 0 else num_partitions
    for part, expected in ((slice(0, 2), 1.3 * math.hypot(0.7 / 32, 0.7 / b)), (slice(2, 4), 1.3 * 0.7 / 32)):
        noise = np.concatenate([(n - c).numpy().ravel() for n, c in zip(noisy[part], clean[part])])
        assert np.std(noise) == pytest.approx(expected, rel=0.06)  # >= 3,660 draws: ~1.2 % standard error
        assert abs(np.mean(noise)) < 4 * expected / math.sqrt(noise.size)
    assert noisy_engine.noise_stddev == pytest.approx(1.3 * math.hypot(0.7 / 32, 0.7 / b))


def test_the_reach_of_the_batch_wise_terms_is_known_from_an_empty_first_batch():
    """per_example with singleton partitions in eager mode: an empty batch does not run the per-example
    function, yet the reach (and so the noise on each variable) is the same as on a full batch."""
    encoder, decoder = encoder_decoder()
    engine = DPGradientEngine(DPConfig(aggregation="termwise", batch_clip=0.2, num_partitions=0, noise_multiplier=1.0,
                                       expected_batch_size=32, clipping="per_example", seed=0),
                              [encoder, decoder], SPEC)
    engine.gradients(latent_divergence_loss(encoder, decoder), tf.zeros([0, 60]))
    assert engine.psi_reaches == (True, True, False, False)


def test_a_change_in_what_the_batch_wise_terms_reach_is_refused():
    encoder, decoder = encoder_decoder()
    engine = DPGradientEngine(DPConfig(aggregation="termwise", batch_clip=0.2, num_partitions=4, noise_multiplier=1.0,
                                       expected_batch_size=32, clipping="vectorized", seed=0),
                              [encoder, decoder], SPEC)
    x = tf.random.stateless_normal([8, 60], seed=[1, 2])
    engine.gradients(latent_divergence_loss(encoder, decoder), x)
    with pytest.raises(ConfigError, match="batch-wise terms reach different variables"):
        engine.gradients(latent_divergence_loss(encoder, decoder, psi_on_output=True), x)


def test_reweight_leaves_the_batch_wise_gradient_out_of_variables_marked_unreached():
    """The reweighting backward pass runs on the tape, not the taps: a variable marked unreached gets the
    phi sum alone even where the tape connects psi to it."""
    encoder, decoder = encoder_decoder()
    loss_fn = latent_divergence_loss(encoder, decoder, psi_on_output=True)  # psi reaches the decoder too
    engine = DPGradientEngine(DPConfig(aggregation="termwise", batch_clip=0.7, num_partitions=4, noise_multiplier=0.0,
                                       expected_batch_size=32, clipped_sum="reweight"), [encoder, decoder], SPEC)
    x = tf.random.stateless_normal([12, 60], seed=[3, 1])
    layout = engine.layout(tf.constant(12))
    p, _ = engine._pass(loss_fn, x, layout, tf.constant(12))
    c_phi, c_psi = tf.fill([12], 0.5), tf.fill([layout.num_partitions], 0.25)
    both = p.weighted(c_phi, c_psi, method="reweight")
    phi_only = p.weighted(c_phi, None, method="reweight")
    assert not np.allclose(both[2].numpy(), phi_only[2].numpy())
    p.psi_reaches = [True, True, False, False]
    masked = p.weighted(c_phi, c_psi, method="reweight")
    for k in (2, 3):
        np.testing.assert_allclose(masked[k].numpy(), phi_only[k].numpy(), rtol=1e-6)
    for k in (0, 1):
        np.testing.assert_allclose(masked[k].numpy(), both[k].numpy(), rtol=1e-6)


def test_noise_draws_group_small_same_dtype_variables_and_leave_a_large_one_alone():
    """Few draws for a small model (each draw has a fixed cost), bounded temporaries for a large one."""
    from tfpriv.privacy.engine import NOISE_DRAW_PARAMETERS, _noise_draws
    big = NOISE_DRAW_PARAMETERS
    grads = [tf.zeros([3, 4]), tf.zeros([4]), tf.zeros([big]), tf.zeros([5]), tf.zeros([2], tf.float64),
             tf.zeros([big - 10]), tf.zeros([11])]
    assert _noise_draws(grads) == [[0, 1], [2], [3], [4], [5], [6]]
    assert _noise_draws([tf.zeros([10])] * 4) == [[0, 1, 2, 3]]
