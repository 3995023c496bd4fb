"""What Conv1D, Conv2D and Conv2DTranspose share: the tapped forward, image patches, kernel reshapes,
per-row bias sums, and clipped kernel sums by the convolution's own filter-gradient op."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfpriv.privacy.rules.base import FactorRule, activation_tail, mask_rows

# How the patches are taken, by the input's channels C (ms per call at the bench convnet's and a
# CIFAR-shaped input, experiments/throughput/patches.py): a convolution with a one-hot kernel for
# shallow inputs (C < 8 and depth kh*kw*C <= 64: cost ~ depth^2 per position, a few GEMM flops;
# [256, 28, 28, 1] 1.2 ms against 2.1 gathered), else one gather of the windows' pixels, contiguous
# C-wide copies ([256, 13, 13, 16] 1.0 ms against 2.6 by tf.image.extract_patches and 4.1 by one-hot
# convolution; [256, 14, 14, 32] 1.7 against 5.4 and 13.2). tf.image.extract_patches (about a
# microsecond per patch whatever its depth) only when the spatial shape is not static.
ONE_HOT_CONV_MAX_CHANNELS = 7
ONE_HOT_CONV_MAX_DEPTH = 64


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding (before, after) of one spatial axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _window_indices(height: int, width: int, kernel_hw, strides, dilation) -> tuple[np.ndarray, int, int]:
    """Flat pixel indices [H' * W' * kh * kw] of every output position's window, (kh, kw) minor."""
    (kh, kw), (sh, sw), (dh, dw) = kernel_hw, strides, dilation
    out_h, out_w = (height - (kh - 1) * dh - 1) // sh + 1, (width - (kw - 1) * dw - 1) // sw + 1
    rows = np.arange(out_h)[:, None, None, None] * sh + np.arange(kh)[None, None, :, None] * dh
    cols = np.arange(out_w)[None, :, None, None] * sw + np.arange(kw)[None, None, None, :] * dw
    return (rows * width + cols).reshape(-1).astype(np.int32), out_h, out_w


def patches(images: tf.Tensor, kernel_hw, strides, dilation, padding: str) -> tf.Tensor:
    """[R, H, W, C] -> [R, H', W', kh*kw*C] in (kh, kw, C) order, matching conv2d's windows."""
    kh, kw = kernel_hw
    _, height, width, channels = images.shape
    if channels is not None and channels <= ONE_HOT_CONV_MAX_CHANNELS and kh * kw * channels <= ONE_HOT_CONV_MAX_DEPTH:
        # Output channel (i, j, c) of a one-hot kernel copies input channel c at window offset (i, j).
        depth = kh * kw * channels
        one_hot = tf.reshape(tf.eye(depth, dtype=images.dtype), [kh, kw, channels, depth])
        return tf.nn.conv2d(images, one_hot, strides=[1, strides[0], strides[1], 1], padding=padding.upper(),
                            dilations=[1, dilation[0], dilation[1], 1])
    if None in (height, width, channels):
        return tf.image.extract_patches(
            images, sizes=[1, kh, kw, 1], strides=[1, strides[0], strides[1], 1],
            rates=[1, dilation[0], dilation[1], 1], padding=padding.upper())
    if padding.upper() == "SAME":
        pad_h = _same_padding(height, kh, strides[0], dilation[0])
        pad_w = _same_padding(width, kw, strides[1], dilation[1])
        images = tf.pad(images, [[0, 0], pad_h, pad_w, [0, 0]])
        height, width = height + sum(pad_h), width + sum(pad_w)
    index, out_h, out_w = _window_indices(height, width, kernel_hw, strides, dilation)
    windows = tf.gather(tf.reshape(images, [-1, height * width, channels]), index, axis=1)
    return tf.reshape(windows, [-1, out_h, out_w, kh * kw * channels])


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
