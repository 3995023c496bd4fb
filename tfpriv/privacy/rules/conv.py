"""What Conv2D and Conv2DTranspose share: image patches, kernel reshapes, per-row bias sums."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.privacy.rules.base import FactorRule


def patches(images: tf.Tensor, kernel_hw, strides, dilation, padding: str) -> tf.Tensor:
    """[R, H, W, C] -> [R, H', W', kh*kw*C] in (kh, kw, C) order, matching conv2d's windows."""
    kh, kw = kernel_hw
    return tf.image.extract_patches(
        images, sizes=[1, kh, kw, 1], strides=[1, strides[0], strides[1], 1],
        rates=[1, dilation[0], dilation[1], 1], padding=padding.upper())


class ConvRule(FactorRule):
    """Shared by Conv2D and Conv2DTranspose: kernel reshapes and per-row bias sums."""

    def kernel_from_outer(self, layer, outer):
        lead = tf.shape(outer)[:-2]
        return tf.reshape(outer, tf.concat([lead, self.kernel(layer).shape], 0))

    def bias_rows(self, tap, grad):
        return tf.reduce_sum(grad, axis=[1, 2])
