"""The GAN's warm start: targets from the noisy class means, the generator's pretraining on them, and
the release it records."""
import numpy as np
import pytest

from tfpriv.compat import keras
from tfpriv.gan import warm_start
from tfpriv.gan.architectures import build_generator
from tfpriv.privacy.accounting import PrivacyLedger
from tfpriv.privacy.class_means import noisy_class_means
from tfpriv.privacy.rng import release_generator


def test_targets_are_images_in_the_unit_interval_with_a_peak_of_one_per_class():
    means = np.array([[-0.2, 0.1, 0.4, 0.2], [0.0, 0.0, 0.0, -1.0]])
    targets = warm_start.pretraining_targets(means, (2, 2, 1))
    assert targets.shape == (2, 2, 2, 1)
    np.testing.assert_allclose(targets[0].ravel(), [0.0, 0.25, 1.0, 0.5])
    assert np.all(targets[1] == 0)  # nothing positive: a blank target, not a division by zero


def test_the_warm_start_releases_with_the_seeds_noise_and_pretrains_the_generator_towards_the_means(monkeypatch):
    rng = np.random.default_rng(0)
    images = rng.random((60, 28, 28, 1)).astype(np.float32) * (np.arange(60) % 3 == 0)[:, None, None, None]
    labels = (np.arange(60) % 3).astype(np.int32)
    keras.utils.set_random_seed(0)
    generator = build_generator(2, 4, 3)
    expected = noisy_class_means(images, labels, 3, 5.0, release_generator(11, warm_start.RELEASE), clip=1.0)
    targets = warm_start.pretraining_targets(expected.means, (28, 28, 1))
    latents, classes = rng.standard_normal((30, 4)).astype(np.float32), np.arange(30, dtype=np.int32) % 3

    def error():
        return float(np.mean((np.asarray(generator([latents, classes])) - targets[classes]) ** 2))

    before = error()
    made = []
    monkeypatch.setattr(warm_start, "noisy_class_means", lambda *a, **k: made.append(noisy_class_means(*a, **k))
                        or made[-1])
    ledger = PrivacyLedger()
    warm_start.class_means_warm_start(images, labels, 3, generator, 40, seed=11, pretraining_seed=0)(
        ledger, {warm_start.RELEASE: 5.0})
    assert ledger.released == {"class_means": 5.0} and ledger.total_steps == 0
    np.testing.assert_array_equal(made[0].means, expected.means)  # the noise of (seed, "release", name)
    assert error() < 0.8 * before
    with pytest.raises(KeyError):  # makes only the release it is for
        warm_start.class_means_warm_start(images, labels, 3, generator, 1, 11, 0)(PrivacyLedger(), {"other": 1.0})
