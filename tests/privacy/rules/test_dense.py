"""DenseRule: norms and clipped sums on rank-2 and rank-3 inputs equal the naive loop."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import check_rule
from tfpriv.compat import keras


@pytest.mark.parametrize("shape", [[5, 4], [5, 3, 4]], ids=["rank2", "rank3"])
def test_dense(shape):
    x = np.random.default_rng(0).normal(size=shape)
    check_rule(keras.layers.Dense(3, activation="relu"), x, "dense")
    check_rule(keras.layers.Dense(3, use_bias=False), x, "dense")
