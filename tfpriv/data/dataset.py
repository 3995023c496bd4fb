"""`Dataset`: a train/test pair of read-only arrays with its labels, built by every loader (`make_dataset`)."""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A train/test pair of arrays with its labels and how a decoder should model it.

    Arrays are float32 and read-only (loaders may share them through a cache):
    images [N,H,W,C] in [0,1], tabular [N,F], points [N,2]. Label vectors are int64.
    """

    name: str
    x_train: np.ndarray
    x_test: np.ndarray
    labels_train: dict[str, np.ndarray]
    labels_test: dict[str, np.ndarray]
    kind: str  # "image" | "tabular" | "points"
    likelihood: str  # "bernoulli" (images in [0,1]) | "gaussian" (tabular, points)
    feature_names: tuple[str, ...] = ()
    num_classes: dict[str, int] = dataclasses.field(default_factory=dict)


def _readonly(array: np.ndarray, dtype: type) -> np.ndarray:
    out = np.ascontiguousarray(array, dtype=dtype)
    out.setflags(write=False)
    return out


def make_dataset(
    name: str,
    x_train: np.ndarray,
    x_test: np.ndarray,
    labels_train: dict[str, np.ndarray],
    labels_test: dict[str, np.ndarray],
    *,
    kind: str,
    likelihood: str,
    feature_names: tuple[str, ...] = (),
    num_classes: dict[str, int] | None = None,
) -> Dataset:
    """Build a `Dataset` with float32 features and int64 labels, all read-only."""
    return Dataset(
        name=name,
        x_train=_readonly(x_train, np.float32),
        x_test=_readonly(x_test, np.float32),
        labels_train={k: _readonly(v, np.int64) for k, v in labels_train.items()},
        labels_test={k: _readonly(v, np.int64) for k, v in labels_test.items()},
        kind=kind,
        likelihood=likelihood,
        feature_names=tuple(feature_names),
        num_classes=dict(num_classes or {}),
    )


def fresh_copy(ds: Dataset) -> Dataset:
    """The same (read-only) arrays in new dicts, so a caller editing a dict spares the cache."""
    return dataclasses.replace(
        ds,
        labels_train=dict(ds.labels_train),
        labels_test=dict(ds.labels_test),
        num_classes=dict(ds.num_classes),
    )
