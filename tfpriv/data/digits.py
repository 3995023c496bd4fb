"""scikit-learn's bundled 8x8 handwritten digits: the embedded default, no files needed.

1797 images with pixel values 0..16, scaled to [0,1] and shaped [N,8,8,1]. There is no
official split, so a fixed 80/20 split (seed 0) stratified on the digit is used:
1437 train / 360 test.
"""
from __future__ import annotations

import os

import numpy as np

from tfpriv.data.dataset import Dataset, make_dataset

TEST_FRACTION = 0.2
SPLIT_SEED = 0
MAX_PIXEL = 16.0


def load_digits(data_dir: str | os.PathLike | None = None, *, seed: int = 0) -> Dataset:
    """Digits as images [N,8,8,1] in [0,1], labels {"label"}; `data_dir` and `seed` unused."""
    del data_dir, seed  # bundled with scikit-learn; the split is fixed
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    bunch = datasets.load_digits()
    images = bunch.images.reshape(-1, 8, 8, 1) / MAX_PIXEL
    labels = bunch.target.astype(np.int64)
    train, test = train_test_split(
        np.arange(len(labels)), test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return make_dataset(
        "digits",
        images[train],
        images[test],
        {"label": labels[train]},
        {"label": labels[test]},
        kind="image",
        likelihood="bernoulli",
        num_classes={"label": 10},
    )
