import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.metrics.resnet import resnet


def torch_parameter_count(depth: int, in_channels: int = 1, num_classes: int = 10) -> int:
    """Trainable parameters of DPImageBench's ResNet(depth, in_c, num_classes) as PyTorch counts them
    (BasicBlock: two bias-free 3x3 convolutions and two batch norms; a 1x1 convolution and batch norm on
    the shortcut where the width changes), from its source's layer list."""
    n = (depth - 2) // 6
    total = in_channels * 9 * 16 + 2 * 16  # stem conv + bn
    inplanes = 16
    for planes in (16, 32, 64):
        for b in range(n):
            total += inplanes * planes * 9 + 2 * planes + planes * planes * 9 + 2 * planes
            if b == 0 and inplanes != planes:
                total += inplanes * planes + 2 * planes
            inplanes = planes
    return total + 64 * num_classes + num_classes


@pytest.mark.parametrize("depth", [8, 20, 110])
def test_parameter_count_matches_the_source(depth):
    model = resnet(depth=depth, seed=0)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == torch_parameter_count(depth)
    if depth == 110:
        assert trainable == 1_730_714 - 2 * 9 * 16  # the CIFAR ResNet-110 figure, with 1 input channel instead of 3


def test_stride_two_stages_halve_28_to_7_and_output_logits():
    model = resnet(depth=8, seed=0)
    assert model.get_layer("stage3_block1_relu2").output.shape[1:3] == (7, 7)
    logits = model(np.zeros((2, 28, 28, 1), np.float32))
    assert logits.shape == (2, 10)


@pytest.mark.parametrize("depth", [7, 12, 2])
def test_depth_must_be_6n_plus_2(depth):
    with pytest.raises(UsageError, match=r"^depth: DPImageBench's ResNet"):
        resnet(depth=depth)
