"""Conv1DRule: strided, dilated and causal 1-D convolutions against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_make_private, check_rule
from tfpriv.compat import keras


@pytest.mark.parametrize("kwargs", [dict(strides=2, padding="same"), dict(padding="valid", dilation_rate=2),
                                    dict(padding="causal", dilation_rate=2), dict(padding="same", use_bias=False)],
                         ids=["strided", "dilated", "causal", "nobias"])
def test_conv1d(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 9, 2])
    check_rule(keras.layers.Conv1D(3, 3, **kwargs), x, "conv1d")


def test_wide_conv1d():
    """Windows deeper than the one-hot limit (5*16 = 80 > 64): extract_patches."""
    x = np.random.default_rng(0).normal(size=[4, 8, 16]) * 0.2
    check_rule(keras.layers.Conv1D(32, 5, padding="same"), x, "conv1d", clip=0.05)


def test_make_private_trains_a_conv1d_model_on_the_fast_path():
    L = keras.layers
    x = np.random.default_rng(0).normal(size=[64, 10, 2]).astype(np.float32)
    y = (x[:, :, 0].mean(axis=1) > 0).astype(np.int32)
    model = keras.Sequential([L.Input([10, 2]), L.Conv1D(4, 3, padding="causal", name="conv"),
                                 L.GlobalMaxPooling1D(), L.Dense(2, name="out")])
    check_make_private(model, x, y, {"conv": "conv1d", "out": "dense"})
