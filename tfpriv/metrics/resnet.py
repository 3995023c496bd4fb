"""DPImageBench's ResNet classifier (`evaluation/classifier/resnet.py` of 2019ChenGong/DPImageBench) in Keras.

The CIFAR-style ResNet of its evaluator: a 3x3 convolution to 16 channels, three stages of
BasicBlocks (16, 32, 64 channels; strides 1, 2, 2; (depth - 2) / 6 blocks each; a 1x1
convolution with batch normalisation on the shortcut where the shape changes), global average
pooling (the source's AvgPool2d(img_size // 4) on the 7x7 map of a 28x28 image) and a linear
layer to logits. DPImageBench builds it with its defaults for 28x28 images: depth 110.
Initialisation as there: convolutions N(0, 2 / (k * k * out_channels)), batch norm (1, 0),
the linear layer PyTorch's default U(+-1/sqrt(fan_in)); batch norm with PyTorch's eps 1e-5 and
momentum 0.1. Padding is explicit (1 pixel), so stride-2 convolutions see the same pixels as
PyTorch's. It is trained without privacy on synthetic images (post-processing of a generator).
"""
from __future__ import annotations

import math

from tfpriv.compat import keras
from tfpriv.errors import UsageError

DEFAULT_DEPTH = 110  # DPImageBench's ResNet(...) for MNIST / Fashion-MNIST uses the class default
STAGE_WIDTHS = (16, 32, 64)

layers = keras.layers


def _conv(filters: int, kernel: int, stride: int, name: str) -> keras.layers.Layer:
    init = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")
    return layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=False, kernel_initializer=init,
                         name=name)


def _bn(name: str) -> keras.layers.Layer:
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name)


def _conv3x3(x, filters: int, stride: int, name: str):
    return _conv(filters, 3, stride, name)(layers.ZeroPadding2D(1, name=f"{name}_pad")(x))


def _basic_block(x, filters: int, stride: int, name: str):
    shortcut = x
    out = layers.ReLU(name=f"{name}_relu1")(_bn(f"{name}_bn1")(_conv3x3(x, filters, stride, f"{name}_conv1")))
    out = _bn(f"{name}_bn2")(_conv3x3(out, filters, 1, f"{name}_conv2"))
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _bn(f"{name}_down_bn")(_conv(filters, 1, stride, f"{name}_down_conv")(x))
    return layers.ReLU(name=f"{name}_relu2")(layers.Add(name=f"{name}_add")([out, shortcut]))


def check_depth(depth: int) -> None:
    if depth < 8 or (depth - 2) % 6:
        raise UsageError(f"depth: DPImageBench's ResNet with BasicBlocks needs depth 6n + 2 >= 8 "
                         f"(e.g. 8, 20, 32, 110), got {depth}")


def resnet(input_shape: tuple[int, int, int] = (28, 28, 1), num_classes: int = 10, depth: int = DEFAULT_DEPTH,
           seed: int | None = None) -> keras.Model:
    """DPImageBench's ResNet (BasicBlock) of `depth` = 6n + 2 layers: images in [-1, 1] -> logits."""
    check_depth(depth)
    if seed is not None:
        keras.utils.set_random_seed(seed)
    blocks = (depth - 2) // 6
    inputs = keras.Input(input_shape)
    x = layers.ReLU(name="stem_relu")(_bn("stem_bn")(_conv3x3(inputs, STAGE_WIDTHS[0], 1, "stem_conv")))
    for s, width in enumerate(STAGE_WIDTHS):
        for b in range(blocks):
            x = _basic_block(x, width, 2 if s and b == 0 else 1, f"stage{s + 1}_block{b + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    bound = 1.0 / math.sqrt(STAGE_WIDTHS[-1])
    logits = layers.Dense(num_classes, name="fc",
                          kernel_initializer=keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform"),
                          bias_initializer=keras.initializers.RandomUniform(-bound, bound))(x)
    return keras.Model(inputs, logits, name=f"dpimagebench_resnet{depth}")
