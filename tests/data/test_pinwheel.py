"""Pinwheel against a loop-by-loop restatement of Johnson et al.'s construction."""
import numpy as np
import pytest

from tfpriv.data import load_dataset, make_pinwheel
from tfpriv.data.pinwheel import check_scale, derived_test_seed, load_pinwheel
from tfpriv.errors import UsageError


def _reference(num_per_class, num_classes, radial_std, tangential_std, rate, seed):
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((num_classes * num_per_class, 2))
    points, labels = [], []
    for t, (e1, e2) in enumerate(noise):
        k = t // num_per_class
        r, s = 1.0 + radial_std * e1, tangential_std * e2
        a = 2 * np.pi * k / num_classes + rate * np.exp(r)
        # row vector (r, s) times [[cos a, -sin a], [sin a, cos a]], scaled by 10
        points.append(10 * np.array([r * np.cos(a) + s * np.sin(a), -r * np.sin(a) + s * np.cos(a)]))
        labels.append(k)
    order = rng.permutation(len(points))
    return np.array(points)[order], np.array(labels)[order]


def test_matches_reference():
    points, labels = make_pinwheel(num_per_class=30, num_classes=5, seed=11)
    ref_points, ref_labels = _reference(30, 5, 0.3, 0.05, 0.25, 11)
    assert points.dtype == np.float32 and labels.dtype == np.int64
    np.testing.assert_allclose(points, ref_points, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(labels, ref_labels)


def test_noise_free_arms_sit_at_known_angles():
    points, labels = make_pinwheel(num_per_class=3, radial_std=0.0, tangential_std=0.0, rate=0.25)
    a = 2 * np.pi * labels / 4 + 0.25 * np.e
    np.testing.assert_allclose(points, 10 * np.stack([np.cos(a), -np.sin(a)], axis=1), atol=1e-5)


def test_default_size_determinism_and_seeds():
    p0, l0 = make_pinwheel(seed=0)
    assert p0.shape == (400, 2) and np.bincount(l0).tolist() == [100] * 4
    p0b, l0b = make_pinwheel(seed=0)
    np.testing.assert_array_equal(p0, p0b)
    np.testing.assert_array_equal(l0, l0b)
    assert not np.allclose(make_pinwheel(seed=1)[0], p0)
    # Radii: |point| / 10 = |(1 + 0.3 e1, 0.05 e2)|, so nearly all lie within 10 * (1 +- 1).
    radius = np.linalg.norm(p0, axis=1) / 10
    assert 0.95 < np.median(radius) < 1.05 and radius.max() < 2.5
    with pytest.raises(UsageError, match="^seed: "):
        make_pinwheel(seed=-1)


def test_load_pinwheel():
    ds = load_dataset("pinwheel", seed=3)
    assert ds.kind == "points" and ds.likelihood == "gaussian" and ds.num_classes == {"cluster": 4}
    assert ds.x_train.shape == ds.x_test.shape == (400, 2) and ds.x_train.dtype == np.float32
    np.testing.assert_array_equal(ds.x_train, make_pinwheel(seed=3)[0])
    np.testing.assert_array_equal(ds.x_test, make_pinwheel(seed=derived_test_seed(3))[0])
    assert not np.allclose(ds.x_train, ds.x_test)
    assert np.bincount(ds.labels_test["cluster"]).tolist() == [100] * 4
    other = load_dataset("pinwheel", seed=4)
    assert not np.allclose(other.x_train, ds.x_train) and not np.allclose(other.x_test, ds.x_test)
    np.testing.assert_array_equal(load_dataset("pinwheel", seed=3).x_test, ds.x_test)


def test_scale_is_a_fixed_factor_of_the_generator():
    p10, l10 = make_pinwheel(seed=5)
    p1, l1 = make_pinwheel(seed=5, scale=1.0)
    np.testing.assert_allclose(p1 * 10, p10, rtol=1e-5, atol=1e-5)   # same draw, divided by the known 10
    np.testing.assert_array_equal(l1, l10)
    radius = np.linalg.norm(p1, axis=1)
    assert 0.95 < np.median(radius) < 1.05
    ds = load_pinwheel(seed=3, scale=2.5)
    np.testing.assert_allclose(ds.x_train, make_pinwheel(seed=3)[0] / 4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ds.x_test, make_pinwheel(seed=derived_test_seed(3))[0] / 4, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "ten", None])
def test_bad_scale_names_the_parameter(bad):
    with pytest.raises(UsageError, match="^scale: "):
        make_pinwheel(scale=bad)
    with pytest.raises(UsageError, match="^scale: "):
        check_scale(bad)
