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
    with pytest.raises(ConfigError, match="--regularizer"):
        make_divergence("wasserstein")
