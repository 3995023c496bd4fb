"""Datasets from TensorFlow Datasets (`--dataset tfds:<name>`), read from `--data_dir`.

Only used when asked for. Nothing is downloaded unless `download=True`; if the prepared
dataset is not in `data_dir` (e.g. offline) a one-line `DataError` names it. Supported
structures: an `image` feature (uint8, scaled to [0,1], Bernoulli likelihood) or a numeric
`features` tensor (tabular, Gaussian likelihood); every scalar `ClassLabel` feature becomes
a label vector. The dataset's own `train` and `test` splits are used.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator

import numpy as np

from tfpriv.data.dataset import Dataset, make_dataset
from tfpriv.errors import DataError, UsageError

SPLITS = ("train", "test")


@contextlib.contextmanager
def _gcs_disabled(disable: bool) -> Iterator[None]:
    """Keep TFDS off the network: without this, `tfds.builder` looks up dataset metadata
    in gs://tfds-data even when nothing is to be downloaded. TFDS has no public switch,
    so its module flag is set (and restored) if it exists."""
    from tensorflow_datasets.core.utils import gcs_utils

    if not disable or not hasattr(gcs_utils, "_is_gcs_disabled"):
        yield
        return
    previous = gcs_utils._is_gcs_disabled
    gcs_utils._is_gcs_disabled = True
    try:
        yield
    finally:
        gcs_utils._is_gcs_disabled = previous


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def load_tfds(name: str, data_dir: str | os.PathLike | None, *, download: bool = False) -> Dataset:
    """Load TFDS dataset `name` (train and test splits) from `data_dir` as a `Dataset`."""
    label = f"tfds:{name}"
    if not name:
        raise UsageError("dataset: tfds:<name> needs a TFDS dataset name, e.g. tfds:mnist")
    if data_dir is None:
        raise UsageError(f"data_dir: required for dataset {label!r}")
    root = pathlib.Path(data_dir).expanduser()
    if not download and not root.is_dir():
        raise DataError(f"data_dir: {root} is not a directory and download is off ({label})")

    import tensorflow_datasets as tfds

    with _gcs_disabled(not download):
        try:
            builder = tfds.builder(name, data_dir=str(root))
        except tfds.core.registered.DatasetNotFoundError:
            raise UsageError(f"dataset: {label} is not a known TFDS dataset") from None
        except Exception as exc:  # noqa: BLE001 - TFDS raises many types; report one line
            raise DataError(f"{label}: cannot open in {root} ({_first_line(exc)})") from None
        if not download and not builder.is_prepared():
            raise DataError(f"{label}: not found in {root} (not downloaded; download is off)")
        try:
            if download:
                builder.download_and_prepare()
            missing = [s for s in SPLITS if s not in builder.info.splits]
            if missing:
                have = list(builder.info.splits)
                raise DataError(f"{label}: has no {missing[0]!r} split (has {have})")
            arrays = {s: tfds.as_numpy(builder.as_dataset(split=s, batch_size=-1)) for s in SPLITS}
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"{label}: cannot load from {root} ({_first_line(exc)})") from None
    return _to_dataset(name, builder.info.features, arrays)


def _to_dataset(name: str, features, arrays: dict[str, dict[str, np.ndarray]]) -> Dataset:
    import tensorflow_datasets as tfds

    label = f"tfds:{name}"
    class_labels = {
        key: feat.num_classes
        for key, feat in features.items()
        if isinstance(feat, tfds.features.ClassLabel) and feat.shape == ()
    }
    if "image" in features:
        kind, likelihood = "image", "bernoulli"
        x = {s: np.asarray(arrays[s]["image"], dtype=np.float32) / 255.0 for s in SPLITS}
    elif "features" in features:
        kind, likelihood = "tabular", "gaussian"
        x = {s: np.asarray(arrays[s]["features"], dtype=np.float32) for s in SPLITS}
        if x["train"].ndim != 2:
            shape = x["train"].shape[1:]
            raise DataError(f"{label}: 'features' must be a vector per example, got {shape}")
    else:
        raise DataError(f"{label}: unsupported structure (needs an 'image' or 'features' feature)")
    return make_dataset(
        label,
        x["train"],
        x["test"],
        {k: arrays["train"][k] for k in class_labels},
        {k: arrays["test"][k] for k in class_labels},
        kind=kind,
        likelihood=likelihood,
        num_classes=class_labels,
    )
