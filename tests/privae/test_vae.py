"""The VAE's loss terms, all modes on every prior/divergence pair, and save/load."""
import itertools
import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privae.architectures import build_architecture, mlp_decoder, mlp_encoder
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE, load_vae
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import BatchLayout


def small_vae(prior="normal", regularizer=None, num_samples=1, likelihood="bernoulli", d=2):
    """A linear encoder and decoder (no hidden layer: the terms are the same, each traced step a third the ops)."""
    keras.utils.set_random_seed(0)
    enc, dec = mlp_encoder([6], d, hidden=()), mlp_decoder(d, [6], hidden=())
    kw = {"sigma": 0.5} if prior == "mixture" else {}
    return VAE(enc, dec, prior=make_prior(prior, d, **kw), likelihood=likelihood, alpha=2.0,
               regularizer=make_divergence(regularizer), num_samples=num_samples)


def test_closed_form_kl_matches_monte_carlo_with_many_samples():
    """For the standard normal prior the engine uses the closed form; MC (eq. 11) agrees."""
    vae = small_vae(num_samples=20000)
    x = tf.constant(np.random.default_rng(0).random([3, 6]) > 0.5, tf.float32)
    terms = vae.loss_terms(x, BatchLayout.single(3))
    mean, logvar = vae.encode(x)
    eps = tf.random.normal([3, 20000, 2])
    z = mean[:, None] + tf.exp(0.5 * logvar)[:, None] * eps
    log_q = -0.5 * tf.reduce_sum(math.log(2 * math.pi) + logvar[:, None] + eps ** 2, -1)
    mc = tf.reduce_mean(log_q - vae.prior.log_prob(z), 1)
    np.testing.assert_allclose(terms.sample["kld"].numpy(), mc.numpy(), atol=0.03)


def test_reconstruction_term_is_the_negative_bernoulli_log_likelihood():
    vae = small_vae()
    x = tf.constant([[1, 0, 1, 0, 1, 1]], tf.float32)
    mean, _ = vae.encode(x)
    vae.rng.reset_from_seed(5)
    terms = vae.loss_terms(x, BatchLayout.single(1))
    # the same draw again (the model's loss stream): rec = -sum x log p + (1-x) log(1-p) at z = mean + std*eps
    vae.rng.reset_from_seed(5)
    mean, logvar = vae.encode(x)
    eps = vae.rng.normal([1, 1, 2])
    z = mean[:, None] + tf.exp(0.5 * logvar)[:, None] * eps
    p = tf.sigmoid(vae.decode_params(tf.reshape(z, [-1, 2]))).numpy()
    expected = -np.sum(x.numpy() * np.log(p) + (1 - x.numpy()) * np.log(1 - p))
    assert float(terms.sample["rec"][0]) == pytest.approx(expected, rel=1e-4)


def test_laplace_reconstruction_term_and_log_px_use_obs_scale():
    keras.utils.set_random_seed(0)
    enc, dec = build_architecture("mlp", [6], 2)
    vae = VAE(enc, dec, likelihood="laplace", obs_scale=0.1)
    x = tf.constant(np.random.default_rng(3).random([2, 6]), tf.float32)
    vae.rng.reset_from_seed(7)
    terms = vae.loss_terms(x, BatchLayout.single(2))
    vae.rng.reset_from_seed(7)
    mean, logvar = vae.encode(x)
    z = mean + tf.exp(0.5 * logvar) * vae.rng.normal([2, 1, 2])[:, 0]
    loc = vae.decode_params(z).numpy()
    expected = -stats.laplace.logpdf(x.numpy(), loc=loc, scale=0.1).sum(1)
    np.testing.assert_allclose(terms.sample["rec"].numpy(), expected, rtol=1e-4)
    np.testing.assert_allclose(vae.decode(z).numpy(), loc)  # the mean is the location
    with pytest.raises(ConfigError, match="^obs_scale: "):
        VAE(enc, dec, likelihood="laplace", obs_scale=0.0)


PRIORS, REGULARIZERS = ["normal", "sparse", "mixture"], [None, "mmd", "kl_pq"]
PAIRS = list(itertools.product(PRIORS, REGULARIZERS))
OTHER_MODES = ["none", "micro", "batch"]


def modes(prior: str, regularizer: str | None) -> tuple[str, str]:
    """Every pair trains term-wise (per-partition regularizers: where prior and divergence meet the
    layout) and in one other mode, chosen so that each of none/micro/batch trains every prior and
    every divergence. The engine sees a pair only through its terms and variables: the batch term
    is there iff a divergence is, and no prior has variables; so prior x divergence x mode adds no
    path that the pairs do not (was every pair in every mode: 36 fits, now 18)."""
    other = OTHER_MODES[(PRIORS.index(prior) + REGULARIZERS.index(regularizer)) % len(OTHER_MODES)]
    return other, "termwise"


def test_the_other_modes_cover_every_prior_and_every_divergence():
    for mode in OTHER_MODES:
        pairs = [(p, r) for p, r in PAIRS if mode in modes(p, r)]
        assert {p for p, _ in pairs} == set(PRIORS) and {r for _, r in pairs} == set(REGULARIZERS), mode


@pytest.mark.parametrize("prior,regularizer", PAIRS)
def test_every_pair_trains_termwise_and_in_one_other_mode(prior, regularizer):
    x = (np.random.default_rng(1).random([64, 6]) > 0.5).astype(np.float32)
    for aggregation in modes(prior, regularizer):
        vae = small_vae(prior, regularizer, num_samples=2)
        dp = DPConfig(aggregation=aggregation, l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=0.5,
                      num_partitions=2, expected_batch_size=16, max_batch_size=40)
        vae.compile(keras.optimizers.Adam(1e-2), dp=dp, num_examples=len(x))
        before = [w.copy() for w in vae.get_weights()]
        hist = vae.fit(tf.data.Dataset.from_tensor_slices(x).batch(16), epochs=1, verbose=0, sampling="fixed")
        assert np.isfinite(hist.history["loss"][-1])
        assert any(not np.allclose(a, b) for a, b in zip(before, vae.get_weights()))
        assert set(vae.term_spec().batch) == ({"reg"} if regularizer else set())


@pytest.mark.parametrize("likelihood", ["bernoulli", "laplace"])
def test_save_and_load_keep_encode_decode_sample(tmp_path, likelihood):
    vae = small_vae("mixture", "kl_pq", likelihood=likelihood)
    x = tf.constant(np.random.default_rng(2).random([4, 6]), tf.float32)
    vae.loss_terms(x, BatchLayout.single(4))
    vae.save_vae(str(tmp_path / "vae"))
    loaded = load_vae(str(tmp_path / "vae"))
    np.testing.assert_allclose(loaded.encode(x)[0].numpy(), vae.encode(x)[0].numpy(), rtol=1e-6)
    z = tf.constant([[0.1, 0.2]])
    np.testing.assert_allclose(loaded.decode(z).numpy(), vae.decode(z).numpy(), rtol=1e-6)
    assert loaded.sample(5, seed=0).shape == (5, 6)
    assert loaded.regularizer.name == "kl_pq" and loaded.prior.name == "mixture"
    assert (loaded.likelihood, loaded.obs_scale) == (likelihood, vae.obs_scale)
