"""Digits: scikit-learn's bundled images, scaled, with a fixed stratified split."""
import numpy as np
from sklearn.datasets import load_digits

from tfpriv.data import load_dataset


def test_digits_needs_no_data_dir():
    ds = load_dataset("digits")
    assert ds.kind == "image" and ds.likelihood == "bernoulli"
    assert ds.x_train.shape == (1437, 8, 8, 1) and ds.x_test.shape == (360, 8, 8, 1)
    assert ds.x_train.dtype == np.float32 and ds.labels_test["label"].dtype == np.int64
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert ds.num_classes == {"label": 10}
    # Stratified 80/20: each digit's 174..183 images give 35..37 to test.
    assert all(35 <= c <= 37 for c in np.bincount(ds.labels_test["label"]))
    # Same images as scikit-learn's (pixel / 16), as a multiset of (image, label) pairs.
    ref = load_digits()
    ref_keys = sorted((img.tobytes(), int(t)) for img, t in zip((ref.images / 16).astype(np.float32), ref.target))
    x = np.concatenate([ds.x_train, ds.x_test])[..., 0]
    y = np.concatenate([ds.labels_train["label"], ds.labels_test["label"]])
    assert sorted((img.tobytes(), int(t)) for img, t in zip(x, y)) == ref_keys


def test_digits_split_is_fixed():
    a, b = load_dataset("digits", seed=0), load_dataset("digits", seed=3)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(a.labels_train["label"], b.labels_train["label"])
