"""rules/conv.py: the three ways of taking patches agree with conv2d's windows, and the clipped kernel sum
by the filter-gradient op equals the sum of per-row outer products with dropped rows masked."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.rules import Conv2DRule, Tap
from tfpriv.privacy.rules.conv import ONE_HOT_CONV_MAX_CHANNELS, ONE_HOT_CONV_MAX_DEPTH, patches


def _extracted(images, kernel_hw, strides, dilation, padding):
    return tf.image.extract_patches(images, [1, *kernel_hw, 1], [1, *strides, 1], [1, *dilation, 1], padding.upper())


@pytest.mark.parametrize("channels,strides,dilation,padding", [(1, (2, 2), (1, 1), "same"), (3, (1, 1), (2, 2), "valid"),
                                                              (7, (2, 1), (1, 1), "same")])
def test_patches_by_one_hot_convolution_equal_extract_patches(channels, strides, dilation, padding):
    images = tf.constant(np.random.default_rng(0).normal(size=[2, 7, 6, channels]), tf.float32)
    assert channels <= ONE_HOT_CONV_MAX_CHANNELS and 3 * 2 * channels <= ONE_HOT_CONV_MAX_DEPTH  # the one-hot branch
    got = patches(images, (3, 2), strides, dilation, padding)
    np.testing.assert_array_equal(got.numpy(), _extracted(images, (3, 2), strides, dilation, padding).numpy())


@pytest.mark.parametrize("channels,kernel_hw,strides,dilation,padding,size", [
    (8, (3, 2), (2, 1), (1, 1), "same", (7, 6)), (16, (3, 3), (2, 2), (1, 1), "valid", (13, 13)),
    (16, (3, 3), (1, 3), (2, 1), "same", (9, 8)), (3, (5, 5), (3, 3), (1, 2), "same", (11, 10)),
    (9, (1, 4), (1, 2), (1, 1), "valid", (5, 9)), (12, (2, 2), (4, 4), (1, 1), "same", (6, 7))])
def test_gathered_patches_equal_extract_patches(channels, kernel_hw, strides, dilation, padding, size):
    """Deeper inputs (more channels, or a window deeper than a one-hot kernel pays for), odd sizes,
    SAME padding split unevenly, strides larger than the kernel."""
    images = tf.constant(np.random.default_rng(1).normal(size=[3, *size, channels]), tf.float32)
    assert channels > ONE_HOT_CONV_MAX_CHANNELS or np.prod(kernel_hw) * channels > ONE_HOT_CONV_MAX_DEPTH
    got = patches(images, kernel_hw, strides, dilation, padding)
    np.testing.assert_array_equal(got.numpy(), _extracted(images, kernel_hw, strides, dilation, padding).numpy())


def test_patches_of_unknown_spatial_shape_are_extracted():
    images = tf.constant(np.random.default_rng(2).normal(size=[2, 7, 6, 16]), tf.float32)
    traced = tf.function(lambda x: patches(x, (3, 3), (2, 2), (1, 1), "same"),
                         input_signature=[tf.TensorSpec([None, None, None, 16])])
    want = _extracted(images, (3, 3), (2, 2), (1, 1), "same")
    assert "ExtractImagePatches" in {op.type for op in traced.get_concrete_function().graph.get_operations()}
    np.testing.assert_array_equal(traced(images).numpy(), want.numpy())


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
