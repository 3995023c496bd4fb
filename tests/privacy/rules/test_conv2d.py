"""Conv2DRule: strided and dilated convolutions, same and valid padding, against the naive loop."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy.rules.helpers import check_rule


@pytest.mark.parametrize("kwargs", [dict(strides=2, padding="same"), dict(padding="valid", dilation_rate=2),
                                    dict(padding="same", use_bias=False)], ids=["strided", "dilated", "nobias"])
def test_conv2d(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 7, 7, 2])
    check_rule(tf.keras.layers.Conv2D(3, 3, **kwargs), x, "conv2d")
