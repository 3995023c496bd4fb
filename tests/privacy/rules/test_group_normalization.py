"""GroupNormalizationRule: groups of several channels, one group, one channel per group (instance norm),
on vectors and images, with and without γ/β, against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_make_private, check_rule
from tfpriv.compat import keras


@pytest.mark.parametrize("shape,kwargs", [([5, 6], dict(groups=3)), ([5, 3, 3, 4], dict(groups=2)),
                                          ([5, 3, 3, 4], dict(groups=1)), ([5, 4, 3], dict(groups=-1)),
                                          ([5, 3, 3, 4], dict(groups=2, center=False)),
                                          ([5, 3, 3, 4], dict(groups=2, scale=False))],
                         ids=["vector", "image", "one-group", "instance", "no-beta", "no-gamma"])
def test_group_normalization(shape, kwargs):
    x = np.random.default_rng(0).normal(size=shape) * 2 + 1
    layer = keras.layers.GroupNormalization(**kwargs)
    layer.build([None, *shape[1:]])
    rng = np.random.default_rng(1)
    layer.set_weights([rng.normal(size=w.shape) for w in layer.get_weights()])  # not the γ = 1, β = 0 start
    check_rule(layer, x, "group_normalization", clip=1.0)


def test_make_private_trains_a_group_normalization_convnet_on_the_fast_path():
    L = keras.layers
    x = np.random.default_rng(0).random((64, 6, 6, 1)).astype(np.float32)
    y = (x.reshape(64, -1).mean(axis=1) > 0.5).astype(np.int32)
    model = keras.Sequential([L.Input([6, 6, 1]), L.Conv2D(4, 3, name="conv"), L.GroupNormalization(2, name="norm"),
                                 L.Flatten(), L.Dense(2, name="out")])
    check_make_private(model, x, y, {"conv": "conv2d", "norm": "group_normalization", "out": "dense"})
