"""DP class means (the GAN warm start's release): clipped sums against a naive loop, the noise std,
the sensitivity whatever an example holds."""
import numpy as np
import pytest

from tfpriv.errors import ConfigError
from tfpriv.privacy.class_means import clipped_rows, noisy_class_means, sensitivity


class Recorded:
    """A stand-in generator: zero noise, and the scale of every draw recorded."""

    def __init__(self):
        self.scales = []

    def normal(self, loc, scale, size):
        self.scales.append(scale)
        return np.zeros(size)


def naive_table(x, y, classes, clip, kappa):
    sums, counts = np.zeros((classes, x[0].size)), np.zeros(classes)
    for image, label in zip(x, y):
        v = np.asarray(image, np.float64).ravel()
        if not np.all(np.isfinite(v)):
            v = np.zeros_like(v)
        norm = np.sqrt(sum(float(t) ** 2 for t in v))
        sums[label] += v * min(1.0, clip / norm) if norm > 0 else v
        counts[label] += 1
    return sums, counts


def test_the_noiseless_table_is_the_naive_loops_clipped_sums_and_counts():
    rng = np.random.default_rng(0)
    x = rng.random((40, 3, 4, 1)) * rng.choice([0.1, 1.0, 5.0], (40, 1, 1, 1))  # norms below and above the clip
    y = rng.integers(0, 4, 40)
    rec = Recorded()
    out = noisy_class_means(x, y, 5, 2.0, rec, clip=0.7, count_weight=0.3)
    sums, counts = naive_table(x, y, 5, 0.7, 0.3)
    np.testing.assert_allclose(out.sums, sums, rtol=1e-12)
    np.testing.assert_allclose(out.counts, counts, rtol=1e-12)  # class 4 holds no example: count 0, sum 0
    np.testing.assert_allclose(out.means[:4], sums[:4] / counts[:4, None], rtol=1e-12)
    assert np.all(out.means[4] == 0)


def test_every_entry_gets_noise_of_std_z_times_the_sensitivity():
    rec = Recorded()
    out = noisy_class_means(np.ones((5, 6)), np.zeros(5, int), 2, 3.0, rec, clip=0.6, count_weight=0.8)
    assert rec.scales == [pytest.approx(3.0 * 1.0)] * 2 and out.noise_stddev == pytest.approx(3.0)  # hypot(0.6, 0.8)
    x, y = np.zeros((10, 500)), np.arange(10) % 2
    drawn = noisy_class_means(x, y, 2, 2.0, np.random.default_rng(1))
    assert np.std(drawn.sums) == pytest.approx(2.0 * np.sqrt(2), rel=0.05)
    assert np.std(drawn.counts - 5) == pytest.approx(2.0 * np.sqrt(2), abs=2.5)  # 2 counts: a loose check


@pytest.mark.parametrize("extra", [np.full(6, np.nan), np.full(6, np.inf), np.full(6, -1e30), np.full(6, 1e300),
                                   np.array([1e308, -1e308, 0, 0, 0, 0]), np.zeros(6), np.arange(6.0)])
def test_adding_one_example_moves_the_table_by_at_most_the_sensitivity(extra):
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(20, 6)), rng.integers(0, 3, 20)
    kappa, clip = 0.5, 2.0
    before = noisy_class_means(x, y, 3, 1.0, Recorded(), clip=clip, count_weight=kappa)
    after = noisy_class_means(np.vstack([x, extra]), np.append(y, 1), 3, 1.0, Recorded(), clip=clip,
                              count_weight=kappa)
    change = np.hstack([after.sums - before.sums, kappa * (after.counts - before.counts)[:, None]])
    assert np.all(np.isfinite(change))
    assert np.linalg.norm(change) <= sensitivity(clip, kappa) * (1 + 1e-12)


def test_clipped_rows_scale_to_the_clip_without_overflow():
    rows = clipped_rows(np.array([[3.0, 4.0], [1e300, 1e300], [0.3, 0.4], [np.nan, 1.0]]), 1.0)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), [1.0, 1.0, 0.5, 0.0], rtol=1e-12)


@pytest.mark.parametrize("kwargs,message", [
    ({"labels": np.array([0, 5])}, r"^labels: must lie in \[0, num_classes\)"),
    ({"labels": np.array([0])}, "^labels: 1 labels for 2 examples"),
    ({"noise_multiplier": 0.0}, "^noise_multiplier: must be positive"),
    ({"clip": np.inf}, "^clip: must be positive and finite"),
])
def test_bad_arguments_are_refused_naming_the_parameter(kwargs, message):
    args = {"examples": np.ones((2, 3)), "labels": np.array([0, 1]), "num_classes": 3, "noise_multiplier": 1.0,
            "rng": Recorded(), **kwargs}
    with pytest.raises(ConfigError, match=message):
        noisy_class_means(**args)
