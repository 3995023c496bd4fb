"""What Conv1D, Conv2D and Conv2DTranspose share: the tapped forward, image patches, kernel reshapes,
per-row bias sums, and clipped kernel sums by the convolution's own filter-gradient op."""
from __future__ import annotations

import tensorflow as tf

from tfpriv.privacy.rules.base import FactorRule, activation_tail, mask_rows

# Patches of depth kh*kw*C up to this are taken by a convolution with a one-hot kernel (cost
# ∝ depth^2 per position, a few GEMM flops), deeper ones by tf.image.extract_patches, whose
# CPU kernel costs about a microsecond per patch whatever its depth (measured in issue 13:
# 256x14x14 patches of depth 16 in 1.7 ms by convolution, 45 ms by extract_patches; depth 512
# in 200 ms by convolution, 30 ms by extract_patches).
ONE_HOT_CONV_MAX_DEPTH = 64


def patches(images: tf.Tensor, kernel_hw, strides, dilation, padding: str) -> tf.Tensor:
    """[R, H, W, C] -> [R, H', W', kh*kw*C] in (kh, kw, C) order, matching conv2d's windows."""
    kh, kw = kernel_hw
    channels = images.shape[-1]
    if channels is not None and kh * kw * channels <= ONE_HOT_CONV_MAX_DEPTH:
        # Output channel (i, j, c) of a one-hot kernel copies input channel c at window offset (i, j).
        depth = kh * kw * channels
        one_hot = tf.reshape(tf.eye(depth, dtype=images.dtype), [kh, kw, channels, depth])
        return tf.nn.conv2d(images, one_hot, strides=[1, strides[0], strides[1], 1], padding=padding.upper(),
                            dilations=[1, dilation[0], dilation[1], 1])
    return tf.image.extract_patches(
        images, sizes=[1, kh, kw, 1], strides=[1, strides[0], strides[1], 1],
        rates=[1, dilation[0], dilation[1], 1], padding=padding.upper())


class ConvRule(FactorRule):
    """Shared by Conv1D, Conv2D and Conv2DTranspose: the tapped forward, kernel reshapes, per-row bias
    sums, kernel sums."""

    input_rank = 4  # of the inputs the layer convolves (batch axis included)

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank != self.input_rank:
            raise TypeError(f"{layer.name}: the DP engine's {type(layer).__name__} rule needs rank-{self.input_rank} "
                            f"inputs, got {x.shape}")
        z = self.product(layer, x, self.kernel(layer))
        return activation_tail(layer, z, self.bias(layer)), z

    def product(self, layer, x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        """The layer's kernel product (its output before bias and activation)."""
        raise NotImplementedError

    def kernel_from_outer(self, layer, outer):
        lead = tf.shape(outer)[:-2]
        return tf.reshape(outer, tf.concat([lead, self.kernel(layer).shape], 0))

    def bias_rows(self, tap, grad):
        return tf.reduce_sum(grad, axis=[1, 2])

    def kernel_sum(self, tap, grad, alive):
        """The filter gradient of the layer's own product (the op the non-private backward pass
        runs), with dropped rows' inputs and gradients zeroed (none if alive is None): no patches
        are materialised."""
        kernel = tf.convert_to_tensor(self.kernel(tap.layer))
        x = mask_rows(tf.cast(tap.inputs, grad.dtype), alive)
        with tf.GradientTape() as tape:
            tape.watch(kernel)
            z = self.product(tap.layer, x, kernel)
        return tape.gradient(z, kernel, output_gradients=mask_rows(grad, alive))
