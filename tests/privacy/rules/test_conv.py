"""rules/conv.py: both ways of taking patches agree with conv2d's windows, and the clipped kernel sum
by the filter-gradient op equals the sum of per-row outer products with dropped rows masked."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.rules import Conv2DRule, Tap
from tfpriv.privacy.rules.conv import ONE_HOT_CONV_MAX_DEPTH, patches


@pytest.mark.parametrize("channels,strides,dilation,padding", [(1, (2, 2), (1, 1), "same"), (3, (1, 1), (2, 2), "valid"),
                                                              (8, (2, 1), (1, 1), "same")])
def test_patches_by_one_hot_convolution_equal_extract_patches(channels, strides, dilation, padding):
    images = tf.constant(np.random.default_rng(0).normal(size=[2, 7, 6, channels]), tf.float32)
    got = patches(images, (3, 2), strides, dilation, padding)
    want = tf.image.extract_patches(images, [1, 3, 2, 1], [1, *strides, 1], [1, *dilation, 1], padding.upper())
    assert 3 * 2 * channels <= ONE_HOT_CONV_MAX_DEPTH  # the one-hot branch (deeper: extract_patches itself)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_kernel_sum_masks_dropped_rows_even_when_they_hold_nan():
    layer = keras.layers.Conv2D(4, 3, strides=2, padding="same")
    x = np.random.default_rng(1).normal(size=[3, 6, 6, 2]).astype(np.float32)
    layer(x)
    x[1, 2, 2, 0] = np.nan
    rule = Conv2DRule()
    z = rule.product(layer, tf.constant(x), layer.kernel)
    grad = tf.constant(np.random.default_rng(2).normal(size=z.shape), tf.float32)
    alive = tf.constant([True, False, True])
    tap = Tap(layer, rule, tf.constant(x), z, {})
    got = rule.kernel_sum(tap, grad, alive).numpy()
    u, v = rule.factors(tap, grad)
    want = sum(np.einsum("ti,tj->ij", u[r].numpy(), v[r].numpy()) for r in (0, 2)).reshape(layer.kernel.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
