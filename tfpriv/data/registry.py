"""The `Dataset` container and `load_dataset`, the single entry point for all datasets.

Loaders are imported lazily by name so that loading `pinwheel` does not import
scikit-learn and nothing imports `tensorflow_datasets` unless a `tfds:` name is asked for.
"""
from __future__ import annotations

import dataclasses
import importlib
import os

import numpy as np

from tfpriv.errors import UsageError

TFDS_PREFIX = "tfds:"

# name -> "module:function"; every function takes (data_dir, *, seed) and returns a Dataset;
# those in _SCALED also take `scaling` ("public" | "train", see tfpriv/data/uci.py).
_LOADERS: dict[str, str] = {
    "digits": "tfpriv.data.digits:load_digits",
    "mnist": "tfpriv.data.idx:load_mnist",
    "fashion_mnist": "tfpriv.data.idx:load_fashion_mnist",
    "adult": "tfpriv.data.uci:load_adult",
    "abalone": "tfpriv.data.uci:load_abalone",
    "pinwheel": "tfpriv.data.pinwheel:load_pinwheel",
}

DATASETS: tuple[str, ...] = tuple(_LOADERS)
_SCALED = ("adult", "abalone")


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


def _valid_names() -> str:
    return ", ".join(DATASETS) + f", {TFDS_PREFIX}<name>"


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    download: bool = False,
    feature_scaling: str | None = None,
) -> Dataset:
    """Load dataset `name` from `data_dir` (files verified against their md5).

    `mnist` also ships with the package: it is read from the bundled copy only when `data_dir`
    is None; a given `data_dir` must hold the files (`tfpriv.data.idx.data_root`).

    `seed` only changes synthetic data (pinwheel); the train/test splits of real datasets
    are fixed so that test sets are comparable across runs. `download` is honoured only for
    `tfds:<name>` datasets; every other dataset is read offline. `feature_scaling`
    ("public" | "train", None = the loader's default "train") is passed to the loaders of
    adult and abalone, whose preprocessing has these two modes; the other datasets have no
    data-dependent preprocessing and ignore it.
    """
    if not isinstance(name, str) or not name:
        raise UsageError(f"dataset: must be one of {_valid_names()}, got {name!r}")
    if name.startswith(TFDS_PREFIX):
        from tfpriv.data.tfds_source import load_tfds

        return load_tfds(name[len(TFDS_PREFIX):], data_dir, download=download)
    target = _LOADERS.get(name)
    if target is None:
        raise UsageError(f"dataset: unknown dataset {name!r}; valid: {_valid_names()}")
    module_name, func_name = target.split(":")
    loader = getattr(importlib.import_module(module_name), func_name)
    if feature_scaling is not None and name in _SCALED:
        return loader(data_dir, seed=seed, scaling=feature_scaling)
    return loader(data_dir, seed=seed)
