"""Conv2DTransposeRule: strided same and valid transposed convolutions against the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_rule
from tfpriv.compat import keras
from tfpriv.privacy.clipping import _ghost_pays
from tfpriv.privacy.rules.conv import ONE_HOT_CONV_MAX_CHANNELS


@pytest.mark.parametrize("kwargs", [dict(strides=2, padding="same"), dict(strides=1, padding="valid")],
                         ids=["same", "valid"])
def test_conv2d_transpose(kwargs):
    x = np.random.default_rng(0).normal(size=[4, 4, 4, 2])
    check_rule(keras.layers.Conv2DTranspose(3, 3, **kwargs), x, "conv2d_transpose")


def test_wide_conv2d_transpose_takes_ghost_norms_and_gathered_patches():
    """Output-gradient patches of 16 channels (gathered), and ghost norms (9 positions, dv=128)."""
    assert 16 > ONE_HOT_CONV_MAX_CHANNELS and _ghost_pays(9, 3 * 3 * 16, 128)
    x = np.random.default_rng(0).normal(size=[4, 3, 3, 128]) * 0.2
    check_rule(keras.layers.Conv2DTranspose(16, 3, padding="valid"), x, "conv2d_transpose", clip=0.05)
