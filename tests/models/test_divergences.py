"""Batch-wise divergences: per-partition values, masking, and what they measure."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.models.divergences import CauchyMMD, KLPriorToAggregate, make_divergence
from tfpriv.models.priors import GaussianMixture, StandardNormal
from tfpriv.errors import ConfigError


def test_mmd_is_small_for_prior_samples_and_large_for_shifted_codes():
    prior = StandardNormal(3)
    tf.random.set_seed(0)
    good = prior.sample(200)[None]
    bad = good + 3.0
    mask = tf.ones([1, 200])
    mmd = CauchyMMD()
    zeros = tf.zeros_like(good)
    assert abs(float(mmd(good, zeros, zeros, mask, prior)[0])) < 0.05
    assert float(mmd(bad, zeros, zeros, mask, prior)[0]) > 1.0


def test_kl_pq_prefers_codes_that_cover_every_prior_mode():
    prior = GaussianMixture(2, sigma=0.03)
    tf.random.set_seed(1)
    covering = tf.constant(np.repeat(prior.means, 8, axis=0)[None], tf.float32)        # codes at all 4 corners
    collapsed = tf.zeros_like(covering)                                                  # all codes at one corner
    logvar = tf.fill(tf.shape(covering), tf.constant(2 * np.log(0.05), tf.float32))
    mask = tf.ones([1, 32])
    kl = KLPriorToAggregate()
    good = float(kl(covering, covering, logvar, mask, prior)[0])
    bad = float(kl(collapsed, collapsed, logvar, mask, prior)[0])
    assert good < bad and bad - good > 100


def test_partitions_are_independent_and_padding_is_ignored():
    prior = StandardNormal(2)
    z = tf.random.stateless_normal([2, 5, 2], seed=[0, 1])
    mask = tf.constant([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], tf.float32)
    kl = KLPriorToAggregate()
    logvar = tf.zeros_like(z)
    tf.random.set_seed(3)
    full = kl(z, z, logvar, mask, prior)
    garbage = tf.where(mask[..., None] > 0, z, 1e3)     # padding rows hold junk
    tf.random.set_seed(3)
    again = kl(garbage, garbage, logvar, mask, prior)
    np.testing.assert_allclose(full.numpy(), again.numpy(), rtol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(z)
        value = kl(z, z, logvar, mask, prior)[0]
    grad = tape.gradient(value, z).numpy()
    assert np.all(grad[1] == 0) and np.all(grad[0, 3:] == 0) and np.any(grad[0, :3] != 0)


def test_unknown_divergence_is_refused():
    assert make_divergence("none") is None
    with pytest.raises(ConfigError, match="^regularizer: "):
        make_divergence("wasserstein")


@pytest.mark.parametrize("divergence", [CauchyMMD(), KLPriorToAggregate()], ids=["mmd", "kl_pq"])
def test_each_partition_uses_as_many_prior_samples_as_it_has_members(divergence):
    """Adding an example to the largest partition must not change how other partitions' terms are
    drawn: partition j's term is a function of its rows and of |s_j| prior draws of its own."""
    from tfpriv.privacy.rng import stream_generator
    prior = StandardNormal(2)
    z = tf.random.stateless_normal([2, 5, 2], seed=[0, 1])
    logvar = tf.fill([2, 5, 2], -1.0)
    mask = tf.constant([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], tf.float32)   # |s_0| = 2, |s_1| = 5
    rng = stream_generator(4, "loss")
    value = divergence(z, z, logvar, mask, prior, rng)
    rng.reset_from_key_counter(*_key_counter(stream_generator(4, "loss")))
    y = tf.reshape(prior.sample(10, rng=rng), [2, 5, 2])                  # the same draws, as [P, M, D]
    own = tf.constant([[1, 1, 0, 0, 0]], tf.float32)
    # partition 0 alone, with only the first |s_0| = 2 of its prior draws: its term
    if isinstance(divergence, CauchyMMD):
        from tfpriv.metrics.kernels import cauchy_mmd
        expected = cauchy_mmd(z[:1], y[:1], x_mask=own, y_mask=own, scales=divergence.scales)
    else:
        rng.reset_from_key_counter(*_key_counter(stream_generator(4, "loss")))
        expected = KLPriorToAggregate()(z[:1], z[:1], logvar[:1], own, prior, _Replay(y[:1]))
    np.testing.assert_allclose(value[0].numpy(), expected.numpy()[0], rtol=1e-5)


def test_mmd_with_a_fixed_number_of_prior_samples():
    prior = StandardNormal(2)
    z = tf.random.stateless_normal([3, 4, 2], seed=[0, 2])
    mask = tf.constant([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], tf.float32)
    value = CauchyMMD(prior_samples=8)(z, z, z, mask, prior).numpy()
    assert value.shape == (3,) and np.all(np.isfinite(value)) and value[2] == 0.0
    with pytest.raises(ConfigError, match="prior_samples"):
        CauchyMMD(prior_samples=1)


def _key_counter(generator):
    state = generator.state.numpy()
    return state[2:3].astype(np.int64)[0], state[:2].astype(np.int64)


class _Replay:
    """Stands in for a generator: returns given draws (reshaped) instead of random ones."""

    def __init__(self, draws):
        self.draws = draws

    def normal(self, shape):
        return tf.reshape(self.draws, shape)
