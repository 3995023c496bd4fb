"""Conv2DRule: strided and dilated convolutions, same and valid padding, against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_rule
from tfpriv.compat import keras
from tfpriv.privacy.clipping import _ghost_pays
from tfpriv.privacy.rules.conv import ONE_HOT_CONV_MAX_CHANNELS


@pytest.mark.parametrize("kwargs", [dict(strides=2, padding="same"), dict(padding="valid", dilation_rate=2),
                                    dict(padding="same", use_bias=False)], ids=["strided", "dilated", "nobias"])
def test_conv2d(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 7, 7, 2])
    check_rule(keras.layers.Conv2D(3, 3, **kwargs), x, "conv2d")


def test_wide_conv2d_takes_ghost_norms_and_gathered_patches():
    """Patches of 16 channels (gathered, not by a one-hot convolution) and a layer where the
    ghost norm beats the instantiated gradient: the other branches of both decisions."""
    assert 16 > ONE_HOT_CONV_MAX_CHANNELS and _ghost_pays(4, 3 * 3 * 16, 128)
    x = np.random.default_rng(0).normal(size=[4, 4, 4, 16]) * 0.2
    check_rule(keras.layers.Conv2D(128, 3, padding="valid"), x, "conv2d", clip=0.05)
