import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.gan.architectures import build_critic, build_generator, generator_width
from tfpriv.gan.dpgan import make_dpgan
from tfpriv.gan.wgan_gp import make_dpwgan_gp


def test_critic_is_004s_three_strided_5x5_convs_with_capacity_filters():
    critic = build_critic(capacity=3)
    convs = [l for l in critic.layers if isinstance(l, keras.layers.Conv2D)]
    assert [c.filters for c in convs] == [3, 6, 12]
    assert all(c.kernel_size == (5, 5) and c.strides == (2, 2) and c.padding == "same" for c in convs)
    leaks = [l for l in critic.layers if isinstance(l, keras.layers.LeakyReLU)]
    assert len(leaks) == 3 and all(np.isclose(float(l.alpha), 0.2) for l in leaks)
    dense = [l for l in critic.layers if isinstance(l, keras.layers.Dense)]
    assert len(dense) == 1 and dense[0].units == 1 and dense[0].activation.__name__ == "linear"
    assert dense[0].kernel.shape == (4 * 4 * 12, 1)  # 28 -> 14 -> 7 -> 4


def test_critic_values_are_per_example():
    critic = build_critic(capacity=2, num_classes=10)
    rng = np.random.default_rng(0)
    x = rng.random((4, 28, 28, 1), dtype=np.float32)
    y = np.array([1, 2, 3, 4], np.int32)
    a = critic([x, y]).numpy()
    x2 = x.copy()
    x2[1:] = rng.random((3, 28, 28, 1))
    b = critic([x2, y]).numpy()
    assert a.shape == (4,) and a[0] == pytest.approx(b[0], abs=1e-6) and not np.allclose(a[1:], b[1:])
    assert critic([x, (y + 1) % 10]).numpy()[0] != pytest.approx(a[0], abs=1e-7)  # the label matters


def test_generator_makes_28x28_images_in_unit_interval():
    gen = build_generator(capacity=2, latent_size=5, num_classes=10)
    out = gen([np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32), np.array([0, 5, 9], np.int32)])
    assert out.shape == (3, 28, 28, 1)
    assert float(tf.reduce_min(out)) > 0.0 and float(tf.reduce_max(out)) < 1.0


@pytest.mark.parametrize("builder,kwargs,message", [
    (build_critic, {"capacity": 0}, "--capacity: must be >= 1, got 0"),
    (build_generator, {"capacity": 2, "latent_size": 0}, "--latent_size: must be >= 1, got 0"),
])
def test_bad_sizes_raise_usage_error(builder, kwargs, message):
    with pytest.raises(UsageError) as err:
        builder(**kwargs)
    assert str(err.value) == message


def _filters(model: keras.Model, kind: type) -> list[int]:
    return [l.filters for l in model.layers if type(l) is kind]


@pytest.mark.parametrize("make", [make_dpwgan_gp, make_dpgan])
def test_generator_capacity_widens_the_generator_only(make):
    """The critic (the private part) keeps `capacity`; the generator takes `generator_capacity`."""
    model = make(capacity=2, latent_size=4, num_classes=10, generator_capacity=5)
    assert _filters(model.critic, keras.layers.Conv2D) == [2, 4, 8]
    assert _filters(model.generator, keras.layers.Conv2DTranspose) == [10, 5, 1]
    assert model.generator.get_layer("project").units == 4 * 4 * 4 * 5
    same = make(capacity=2, latent_size=4, num_classes=10)
    assert _filters(same.generator, keras.layers.Conv2DTranspose) == [4, 2, 1]


def test_generator_width_defaults_to_capacity_and_refuses_zero():
    assert generator_width(3, None) == 3 and generator_width(3, 7) == 7
    with pytest.raises(UsageError) as err:
        make_dpwgan_gp(capacity=2, latent_size=4, generator_capacity=0)
    assert str(err.value) == "--generator_capacity: must be >= 1, got 0"
