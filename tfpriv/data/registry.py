"""`load_dataset`, the single entry point for all datasets (each loader returns a `tfpriv.data.dataset.Dataset`).

Loaders are imported lazily by name so that loading `pinwheel` does not import
scikit-learn and nothing imports `tensorflow_datasets` unless a `tfds:` name is asked for.
"""
from __future__ import annotations

import importlib
import os

from tfpriv.data.dataset import Dataset
from tfpriv.errors import UsageError
from tfpriv.registry import Registry

TFDS_PREFIX = "tfds:"

# name -> "module:function"; every function takes (data_dir, *, seed) and returns a Dataset;
# those in _SCALED also take `scaling` ("public" | "train", see tfpriv/data/uci.py). A `tfds:<name>`
# is resolved before the lookup (`load_tfds`), and listed in the lookup's error.
_LOADERS: Registry[str] = Registry("dataset", error=UsageError, also_valid=(f"{TFDS_PREFIX}<name>",))
_LOADERS.register("digits", "tfpriv.data.digits:load_digits")
_LOADERS.register("mnist", "tfpriv.data.idx:load_mnist")
_LOADERS.register("fashion_mnist", "tfpriv.data.idx:load_fashion_mnist")
_LOADERS.register("adult", "tfpriv.data.uci:load_adult")
_LOADERS.register("abalone", "tfpriv.data.uci:load_abalone")
_LOADERS.register("pinwheel", "tfpriv.data.pinwheel:load_pinwheel")

DATASETS: tuple[str, ...] = _LOADERS.names()
_SCALED = ("adult", "abalone")


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
    if isinstance(name, str) and name.startswith(TFDS_PREFIX):
        from tfpriv.data.tfds_source import load_tfds

        return load_tfds(name[len(TFDS_PREFIX):], data_dir, download=download)
    module_name, func_name = _LOADERS.get(name).split(":")  # UsageError naming `dataset` for an unknown name
    loader = getattr(importlib.import_module(module_name), func_name)
    if feature_scaling is not None and name in _SCALED:
        return loader(data_dir, seed=seed, scaling=feature_scaling)
    return loader(data_dir, seed=seed)
