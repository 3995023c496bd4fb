"""LayerNormalizationRule: last-axis and multi-axis normalisation, with and without γ/β, against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_make_private, check_rule
from tfpriv.compat import keras


@pytest.mark.parametrize("shape,kwargs", [([5, 4], {}), ([5, 3, 4], {}), ([5, 3, 4], dict(axis=[1, 2])),
                                          ([5, 2, 3, 4], dict(axis=[1, 3])), ([5, 3, 4], dict(center=False)),
                                          ([5, 3, 4], dict(scale=False))],
                         ids=["rank2", "rank3", "two-axes", "split-axes", "no-beta", "no-gamma"])
def test_layer_normalization(shape, kwargs):
    x = np.random.default_rng(0).normal(size=shape) * 2 + 1
    layer = keras.layers.LayerNormalization(**kwargs)
    layer.build([None, *shape[1:]])
    rng = np.random.default_rng(1)
    layer.set_weights([rng.normal(size=w.shape) for w in layer.get_weights()])  # not the γ = 1, β = 0 start
    check_rule(layer, x, "layer_normalization", clip=1.0)


def test_make_private_trains_a_layer_normalization_model_on_the_fast_path():
    L = keras.layers
    x = np.random.default_rng(0).normal(size=[64, 6, 3]).astype(np.float32)
    y = (x[:, :, 0].mean(axis=1) > 0).astype(np.int32)
    model = keras.Sequential([L.Input([6, 3]), L.Dense(4, name="proj"), L.LayerNormalization(name="norm"),
                                 L.Flatten(), L.Dense(2, name="out")])
    check_make_private(model, x, y, {"proj": "dense", "norm": "layer_normalization", "out": "dense"})
