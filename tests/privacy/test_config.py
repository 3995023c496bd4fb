"""Sensitivities, effective noise multipliers and refusals of DPConfig."""
import math

import pytest

from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig


def cfg(**kw):
    base = dict(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=2.0,
                num_partitions=4, expected_batch_size=64)
    base.update(kw)
    return DPConfig(**base)


@pytest.mark.parametrize("kw,has_batch,sensitivity", [
    (dict(aggregation="micro"), False, 1.0),
    (dict(aggregation="micro", max_batch_size=100), True, 199.0),     # (2 B_max - 1): Prop. 3, add-or-remove
    (dict(aggregation="batch"), True, 2.0),                           # one multi-example group
    (dict(aggregation="batch"), False, 2.0),
    (dict(aggregation="termwise"), True, math.sqrt(5.0)),             # C1 block + 2*C2 partition block
    (dict(aggregation="termwise", num_partitions=0), True, math.sqrt(2.0)),
    (dict(aggregation="termwise", batch_clip=0.0), True, 1.0),       # C2 = 0 drops the batch term
    (dict(aggregation="termwise"), False, 1.0),
])
def test_sensitivity_and_effective_noise(kw, has_batch, sensitivity):
    c = cfg(**kw)
    assert c.sensitivity(has_batch) == pytest.approx(sensitivity)
    assert c.effective_noise_multiplier(has_batch) == pytest.approx(2.0 / sensitivity)
    assert c.noise_multiplier_for(c.effective_noise_multiplier(has_batch), has_batch) == pytest.approx(2.0)


def test_noise_std_formulas():
    assert cfg(aggregation="micro").noise_stddev(False) == pytest.approx(2.0 * 1.0 / 64)
    assert cfg(aggregation="batch").noise_stddev(True) == pytest.approx(2.0)
    # eq. 16: z * sqrt((C1/B)^2 + (C2/b)^2)
    assert cfg().noise_stddev(True) == pytest.approx(2.0 * math.hypot(1.0 / 64, 0.5 / 4))
    assert cfg(num_partitions=0).noise_stddev(True) == pytest.approx(2.0 * math.hypot(1.0 / 64, 0.5 / 64))
    # a parameter the batch-wise terms do not reach: the sample-wise noise alone
    assert cfg().noise_stddev(True, batch_terms_reach=False) == pytest.approx(2.0 * 1.0 / 64)
    assert cfg(aggregation="micro").noise_stddev(True, batch_terms_reach=False) == pytest.approx(2.0 * 1.0 / 64)
    assert cfg(aggregation="none").noise_stddev(True) == 0.0


def test_micro_with_batch_terms_refuses_without_a_batch_cap():
    with pytest.raises(ConfigError, match="max_batch_size"):
        cfg(aggregation="micro").sensitivity(True)


@pytest.mark.parametrize("kw,param", [
    (dict(l2_norm_clip=0.0), "l2_norm_clip"),
    (dict(l2_norm_clip=-1.0), "l2_norm_clip"),
    (dict(l2_norm_clip=float("inf")), "l2_norm_clip"),
    (dict(noise_multiplier=-0.1), "noise_multiplier"),
    (dict(batch_clip=-1.0), "batch_clip"),
    (dict(num_partitions=65), "num_partitions"),
    (dict(num_partitions=-1), "num_partitions"),
    (dict(aggregation="mean"), "aggregation"),
    (dict(clipping="ghost"), "clipping"),
    (dict(max_batch_size=0), "max_batch_size"),
])
def test_invalid_settings_name_their_parameter(kw, param):
    with pytest.raises(ConfigError) as err:
        cfg(**kw)
    assert str(err.value).startswith(param + ": ") and err.value.param == param
    assert "\n" not in str(err.value)
