"""Batch-wise divergences: per-partition values, masking, and what they measure."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.privae.divergences import CauchyMMD, KLPriorToAggregate, divergence_from_config, make_divergence
from tfpriv.privae.priors import GaussianMixture, StandardNormal
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


def _naive_kl_pq(mean, logvar, members, draws, prior):
    """|s| times the mean over the prior draws of log p(z) - log (1/|s|) sum_i q(z | x_i), one loop per draw."""
    values = []
    for zj in draws:
        dens = [np.prod(np.exp(-0.5 * (zj - mean[i]) ** 2 / np.exp(logvar[i])) / np.sqrt(2 * np.pi * np.exp(logvar[i])))
                for i in members]
        values.append(float(prior.log_prob(tf.constant(zj[None], tf.float32))[0]) - np.log(np.mean(dens)))
    return len(members) * np.mean(values)


class _MixtureWithDraws(GaussianMixture):
    """The 4-corner mixture (sigma 0.3) whose sample() returns given draws."""

    def __init__(self, draws):
        super().__init__(2, sigma=0.3)
        self.draws = draws

    def sample(self, n, seed=None, rng=None):
        return self.draws[:n]


def test_kl_pq_with_a_fixed_number_of_prior_samples_matches_a_naive_loop():
    """prior_samples=m: partition j draws m prior samples of its own (the j-th block of m draws) and its
    term is |s_j| times their mean; an empty partition's term is 0; padding rows get no gradient."""
    draws = tf.random.stateless_uniform([3 * 7, 2], seed=[2, 5], minval=-0.5, maxval=1.5)
    prior = _MixtureWithDraws(draws)
    mean = tf.random.stateless_normal([3, 4, 2], seed=[0, 5]) * 0.5 + 0.5
    logvar = tf.random.stateless_uniform([3, 4, 2], seed=[1, 5], minval=-3.0, maxval=-1.0)
    mask = tf.constant([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], tf.float32)
    value = KLPriorToAggregate(prior_samples=7)(mean, mean, logvar, mask, prior).numpy()
    d = draws.numpy().reshape(3, 7, 2)
    for j, members in enumerate(([0, 1, 2], [0])):
        expected = _naive_kl_pq(mean.numpy()[j], logvar.numpy()[j], members, d[j], prior)
        np.testing.assert_allclose(value[j], expected, rtol=1e-4)
    assert value[2] == 0.0
    with tf.GradientTape() as tape:
        tape.watch(mean)
        total = tf.reduce_sum(KLPriorToAggregate(prior_samples=7)(mean, mean, logvar, mask, prior))
    grad = tape.gradient(total, mean).numpy()
    assert np.all(grad[0, 3] == 0) and np.all(grad[1, 1:] == 0) and np.all(grad[2] == 0) and np.any(grad[0, :3] != 0)


def test_kl_pq_with_fixed_prior_samples_keeps_partitions_apart_and_estimates_the_same_kl():
    """Adding a member to partition 1 leaves partition 0's term (its rows and its own m draws) unchanged;
    averaged over draws, m = 64 draws and the default |s_j| draws estimate the same |s_j| * KL(p||q)."""
    from tfpriv.privacy.rng import stream_generator
    prior = StandardNormal(2)
    z = tf.random.stateless_normal([2, 5, 2], seed=[0, 1])
    logvar = tf.fill([2, 5, 2], -1.0)
    kl = KLPriorToAggregate(prior_samples=6)
    smaller = tf.constant([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], tf.float32)
    larger = tf.constant([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], tf.float32)          # one more member in partition 1
    before = kl(z, z, logvar, smaller, prior, stream_generator(4, "loss"))
    after = kl(z, z, logvar, larger, prior, stream_generator(4, "loss"))
    assert before.numpy()[0] == after.numpy()[0] and before.numpy()[1] != after.numpy()[1]
    mask = tf.constant([[1, 1, 1, 1, 1]], tf.float32)
    rng = stream_generator(5, "loss")
    default = [KLPriorToAggregate()(z[:1], z[:1], logvar[:1], mask, prior, rng).numpy()[0] for _ in range(400)]
    fixed = [KLPriorToAggregate(prior_samples=64)(z[:1], z[:1], logvar[:1], mask, prior, rng).numpy()[0]
             for _ in range(40)]
    # the same expectation: the Monte Carlo averages agree within 3 standard errors of their difference
    # (about 6 % of the mean here)
    stderr = np.hypot(np.std(default) / np.sqrt(len(default)), np.std(fixed) / np.sqrt(len(fixed)))
    assert abs(np.mean(fixed) - np.mean(default)) < 3 * stderr < 0.25 * np.mean(default)


def test_prior_samples_is_validated_and_saved_with_the_divergence():
    with pytest.raises(ConfigError, match="^prior_samples: "):
        KLPriorToAggregate(prior_samples=0)
    with pytest.raises(ConfigError, match="^prior_samples: "):
        make_divergence("none", prior_samples=8)
    for name in ("kl_pq", "mmd"):
        divergence = make_divergence(name, prior_samples=8)
        assert divergence.prior_samples == 8
        assert divergence_from_config(divergence.config()).config() == divergence.config()
    assert divergence_from_config({"name": "kl_pq"}).prior_samples is None   # saved before the option existed


def _key_counter(generator):
    state = generator.state.numpy()
    return state[2:3].astype(np.int64)[0], state[:2].astype(np.int64)


class _Replay:
    """Stands in for a generator: returns given draws (reshaped) instead of random ones."""

    def __init__(self, draws):
        self.draws = draws

    def normal(self, shape):
        return tf.reshape(self.draws, shape)
