"""DepthwiseConv2DRule and SeparableConv2DRule: depth multipliers, strides, dilation, same and valid
padding, against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_make_private, check_rule
from tfpriv.compat import keras

CASES = [dict(strides=2, padding="same", depth_multiplier=2), dict(padding="valid", dilation_rate=2),
         dict(padding="same", use_bias=False, depth_multiplier=3)]
IDS = ["strided", "dilated", "nobias"]


@pytest.mark.parametrize("kwargs", CASES, ids=IDS)
def test_depthwise_conv2d(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 7, 7, 3])
    check_rule(keras.layers.DepthwiseConv2D(3, activation="tanh", **kwargs), x, "depthwise_conv2d")


@pytest.mark.parametrize("kwargs", CASES, ids=IDS)
def test_separable_conv2d(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 7, 7, 3])
    check_rule(keras.layers.SeparableConv2D(4, 3, activation="tanh", **kwargs), x, "separable_conv2d")


def test_make_private_trains_a_depthwise_separable_convnet_on_the_fast_path():
    L = keras.layers
    x = np.random.default_rng(0).random((64, 8, 8, 2)).astype(np.float32)
    y = (x.reshape(64, -1).mean(axis=1) > 0.5).astype(np.int32)
    model = keras.Sequential([L.Input([8, 8, 2]), L.DepthwiseConv2D(3, depth_multiplier=2, name="depthwise"),
                                 L.SeparableConv2D(4, 3, name="separable"), L.Flatten(), L.Dense(2, name="out")])
    check_make_private(model, x, y, {"depthwise": "depthwise_conv2d", "separable": "separable_conv2d", "out": "dense"})
