"""`PrivateWGAN`'s noise multiplicity: example i's critic loss is the mean over its own K draws, and the
engine still clips each example (not each draw) at C."""
import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import (N_TRAIN, clip_jointly, critic_inputs, dp, global_norm, naive_per_example_grads,
                               real_batch, row)
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.dpgan import make_dpgan, rmsprop
from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rng import in_step

K = 3


def _model(k: int = K, conditional: bool = True, config=None):
    keras.utils.set_random_seed(0)
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10 if conditional else None, seed=0,
                           generator_batch_size=4, noise_multiplicity=k)
    model.compile(dp_adam(1e-3), dp_adam(1e-3), dp=config or dp(clip=1.0, noise=1.0, batch=8.0), num_examples=N_TRAIN)
    return model


@pytest.fixture(scope="module")
def model():
    """The K-draw critic; the clipping check (DPConfig.verify) is off: its per-example sums are checked
    against a naive loop below, and a K = 2 GAN run (tests/gan/test_job.py) verifies its path."""
    m = _model(config=dp(clip=1.0, noise=1.0, batch=8.0, verify=False))
    m.prepare(real_batch(8, conditional=True))
    return m


def _multi_inputs(n: int, seed: int) -> dict:
    """Fixed rows with K fakes and K interpolation weights per example (real images at spread-out scales,
    so the examples' gradient norms differ)."""
    rng = np.random.default_rng(seed)
    base = critic_inputs(n, conditional=True, seed=seed)
    base["image"] = base["image"] * tf.reshape(tf.linspace(0.5, 3.0, n), [n, 1, 1, 1])
    base["fake"] = tf.constant(rng.random((n, K, 28, 28, 1), dtype=np.float32))
    base["mix"] = tf.constant(rng.random((n, K)).astype(np.float32))
    return base


def test_each_examples_terms_are_the_mean_of_its_k_draws(model):
    inputs = _multi_inputs(4, seed=1)
    got = model.loss_fn(inputs, None).sample
    for name in ("wasserstein", "penalty"):
        assert got[name].shape == (4,)
    for i in range(4):
        draws = [model.critic_terms(inputs["image"][i:i + 1], inputs["fake"][i, k:k + 1], inputs["label"][i:i + 1],
                                    inputs["mix"][i, k:k + 1]) for k in range(K)]
        for name in ("wasserstein", "penalty"):
            want = np.mean([float(d[name][0]) for d in draws])
            assert float(got[name][i]) == pytest.approx(want, rel=1e-5, abs=1e-6)
    # Not the terms of one draw: the K draws differ, so their mean is not any single one.
    first = model.critic_terms(inputs["image"][:1], inputs["fake"][0, :1], inputs["label"][:1], inputs["mix"][0, :1])
    assert float(first["wasserstein"][0]) != pytest.approx(float(got["wasserstein"][0]), rel=1e-3)


@pytest.mark.parametrize("clipping", ["per_example", "vectorized"])
def test_clipped_sum_clips_each_example_not_each_draw(model, clipping):
    inputs = _multi_inputs(6, seed=2)
    naive = naive_per_example_grads(model, inputs)  # gradient of example i's mean-of-K loss alone
    norms = np.array([global_norm(g) for g in naive])
    clip = float(np.mean(np.sort(norms)[2:4]))  # between the 3rd and 4th norm: some examples are clipped, some not
    assert (norms > clip * 1.01).sum() >= 2 and (norms < clip * 0.99).sum() >= 2
    expected = [sum(parts) for parts in zip(*[clip_jointly(g, clip) for g in naive])]
    engine = DPGradientEngine(dp(clip=clip, batch=8.0, clipping=clipping), model.critic, model.spec,
                              variables=model.critic.trainable_variables)
    out = engine.clipped_sums(model.loss_fn, inputs)
    np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), norms, rtol=1e-4)
    for got, want in zip(out["sample"], expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    # One added example (K huge draws) moves the clipped sum by exactly C, not K * C.
    outlier = {key: value * 50.0 if key == "image" else value for key, value in row(_multi_inputs(1, seed=3), 0).items()}
    both = {key: tf.concat([inputs[key], outlier[key]], 0) for key in inputs}
    moved = global_norm([(a - b).numpy() for a, b in zip(engine.clipped_sums(model.loss_fn, both)["sample"], out["sample"])])
    assert moved == pytest.approx(clip, rel=1e-4)


def test_each_examples_k_draws_are_its_own(model):
    """Adding an example changes no other example's fakes or weights (rows of one keyed draw)."""
    batch = real_batch(5, conditional=True, seed=4)
    state = model.rng.state.numpy()
    draws = []
    for n in (4, 5):
        model.rng.state.assign(state)
        with in_step(model.rng):
            draws.append(model.critic_inputs({key: value[:n] for key, value in batch.items()}))
    small, large = draws
    assert small["fake"].shape == (4, K, 28, 28, 1) and small["mix"].shape == (4, K)
    np.testing.assert_allclose(small["fake"].numpy(), large["fake"].numpy()[:4], atol=1e-6)
    np.testing.assert_array_equal(small["mix"].numpy(), large["mix"].numpy()[:4])
    assert np.ptp(small["mix"].numpy(), axis=1).min() > 0  # K different weights per example


def test_a_train_step_is_one_mechanism_step_with_k_draws(model):
    before = model.ledger.total_steps
    model.train_step(real_batch(8, conditional=True, seed=5))
    assert model.ledger.total_steps == before + 1


def test_refuses_a_bad_multiplicity_and_fast_clipping():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="noise_multiplicity: must be an integer >= 1"):
            make_dpwgan_gp(capacity=2, latent_size=4, noise_multiplicity=bad)
    gan = make_dpgan(capacity=2, latent_size=4, seed=0, noise_multiplicity=2)
    with pytest.raises(ConfigError, match="noise_multiplicity: .*fast"):
        gan.compile(rmsprop(1e-3), rmsprop(1e-3), dp=dp(clipping="fast"), num_examples=N_TRAIN)
