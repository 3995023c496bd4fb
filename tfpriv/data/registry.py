"""`load_dataset`, the single entry point for all datasets (each loader returns a `tfpriv.data.dataset.Dataset`).

Loaders are imported lazily by name so that loading `pinwheel` does not import
scikit-learn and nothing imports `tensorflow_datasets` unless a `tfds:` name is asked for.
"""
from __future__ import annotations

import importlib
import os

from tfpriv.data.dataset import Dataset
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
