"""Conv2DTransposeRule: strided same and valid transposed convolutions against the naive loop."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy.rules.helpers import check_rule


@pytest.mark.parametrize("kwargs", [dict(strides=2, padding="same"), dict(strides=1, padding="valid")],
                         ids=["same", "valid"])
def test_conv2d_transpose(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 4, 4, 2])
    check_rule(tf.keras.layers.Conv2DTranspose(3, 3, **kwargs), x, "conv2d_transpose")
