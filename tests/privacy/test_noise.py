"""Measured noise std of the privatized gradient equals the documented formula."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import LossTerms, TermSpec

SPEC = TermSpec(sample=("rec",), batch=("div",))


def wide_model():
    tf.keras.utils.set_random_seed(0)
    return tf.keras.Sequential([tf.keras.Input([60]), tf.keras.layers.Dense(150)])   # 9150 coordinates


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
