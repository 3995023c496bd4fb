"""MNIST and Fashion-MNIST from their original IDX files (gzip), md5-verified.

IDX format (LeCun et al.): a big-endian header of two zero bytes, a type code (0x08 for
unsigned bytes), the number of dimensions d, then d uint32 sizes, then the data in C
order. Image files have magic 2051 (0x00000803: ubyte, 3 dims), label files 2049
(0x00000801: ubyte, 1 dim).

The four files are read from `data_dir/<name>/` or, if they are not there, directly from
`data_dir` (a `data_dir` pointing at the dataset's own folder). MNIST also ships with the package
(`tfpriv/data/bundled/mnist/`, package data, CC BY-SA 3.0; see the README there): `load_mnist`
reads the bundled copy, verified against the same MD5s, only when `data_dir` is None. A
`data_dir` that was given is an instruction: if it does not exist or does not hold the files
(all four), that is an error, never a silent switch to the bundled copy.
"""
from __future__ import annotations

import gzip
import os
import pathlib
import struct
import zlib

import numpy as np

from tfpriv.data import checksums
from tfpriv.data.dataset import Dataset, fresh_copy, make_dataset
from tfpriv.errors import DataError

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
_UBYTE = 0x08

_SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

# Datasets whose original files ship inside the package, under BUNDLED_DIR/<name>/.
BUNDLED_DIR = pathlib.Path(__file__).resolve().parent / "bundled"
BUNDLED: tuple[str, ...] = ("mnist",)

# (dataset name, resolved folder of its files) -> (identities of its four files, Dataset).
_cache: dict[tuple[str, str], tuple[tuple, Dataset]] = {}


def read_idx(path: str | os.PathLike, *, expected_md5: str | None = None) -> np.ndarray:
    """Parse an IDX file (gzip-compressed or raw) into a uint8 array shaped by its header.

    If `expected_md5` is given the file is verified first. Malformed files (bad magic,
    non-ubyte data, payload size not matching the header) raise `DataError` naming `path`.
    """
    path = pathlib.Path(path)
    if expected_md5 is not None:
        checksums.verify_md5(path, expected_md5)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: not a valid gzip file ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path}: not an IDX file (bad magic number)")
    if raw[2] != _UBYTE:
        raise DataError(f"{path}: IDX type code 0x{raw[2]:02x} unsupported (want 0x08, ubyte)")
    ndim = raw[3]
    header_len = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header_len:
        raise DataError(f"{path}: truncated IDX header ({ndim} dims)")
    dims = struct.unpack(f">{ndim}I", raw[4:header_len])
    expected = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header_len != expected:
        raise DataError(
            f"{path}: IDX payload has {len(raw) - header_len} bytes, header {dims} needs {expected}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(dims).copy()


def _magic(array: np.ndarray) -> int:
    return (_UBYTE << 8) | array.ndim


def _read_split(folder: pathlib.Path, name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    image_file, label_file = _SPLIT_FILES[split]
    images = read_idx(folder / image_file, expected_md5=checksums.MD5[f"{name}/{image_file}"])
    labels = read_idx(folder / label_file, expected_md5=checksums.MD5[f"{name}/{label_file}"])
    if _magic(images) != IMAGE_MAGIC or images.shape[1:] != (28, 28):
        raise DataError(f"{folder / image_file}: expected images [N,28,28], got {images.shape}")
    if _magic(labels) != LABEL_MAGIC or labels.shape != (images.shape[0],):
        n = images.shape[0]
        raise DataError(f"{folder / label_file}: expected {n} labels, got shape {labels.shape}")
    if labels.size and labels.max() > 9:
        raise DataError(f"{folder / label_file}: label values must be 0..9, got {labels.max()}")
    return images, labels


_FILES: tuple[str, ...] = tuple(f for pair in _SPLIT_FILES.values() for f in pair)


def bundled_root(name: str) -> pathlib.Path | None:
    """The package folder holding `name`'s bundled files (BUNDLED_DIR), or None if not shipped."""
    if name in BUNDLED and all((BUNDLED_DIR / name / f).is_file() for f in _FILES):
        return BUNDLED_DIR
    return None


def data_root(name: str, data_dir: str | os.PathLike | None) -> pathlib.Path:
    """The folder holding `name`'s four files: `data_dir/<name>/`, else `data_dir` itself; the
    bundled copy (mnist) only when `data_dir` is None.

    Errors: no `data_dir` for a dataset that is not bundled (`UsageError`); a `data_dir` that is
    not a directory, holds only some of the files (a broken copy), or none of them in either
    place (`DataError`, naming the folders and files looked for).
    """
    bundled = bundled_root(name)
    if data_dir is None and bundled is not None:
        return bundled / name
    root = checksums.require_data_dir(data_dir, name)
    for folder in (root / name, root):
        missing = [f for f in _FILES if not (folder / f).is_file()]
        if not missing:
            return folder
        if len(missing) < len(_FILES):
            raise DataError(f"data_dir: {root} has no {(folder / missing[0]).relative_to(root)}")
    hint = "; the copy bundled with tfpriv is read only when no data_dir is given" if bundled is not None else ""
    raise DataError(f"data_dir: {root} has no {name} files (looked for {', '.join(_FILES)} "
                    f"in {root / name}/ and in {root}/){hint}")


def _load(name: str, data_dir: str | os.PathLike | None) -> Dataset:
    folder = data_root(name, data_dir)
    identities = tuple(checksums.file_identity(folder / f) for f in _FILES)
    cache_key = (name, str(folder.resolve()))
    hit = _cache.get(cache_key)
    if hit is not None and hit[0] == identities:
        return fresh_copy(hit[1])

    x, y = {}, {}
    for split in _SPLIT_FILES:
        images, labels = _read_split(folder, name, split)
        pixels = images[..., None].astype(np.float32)
        pixels /= np.float32(255.0)
        x[split], y[split] = pixels, labels.astype(np.int64)
    ds = make_dataset(
        name,
        x["train"],
        x["test"],
        {"label": y["train"]},
        {"label": y["test"]},
        kind="image",
        likelihood="bernoulli",
        num_classes={"label": 10},
    )
    _cache[cache_key] = (identities, ds)
    return fresh_copy(ds)


def load_mnist(data_dir: str | os.PathLike | None = None, *, seed: int = 0) -> Dataset:
    """MNIST: 60000 train / 10000 test images [N,28,28,1] in [0,1], labels {"label"}.

    Read from `data_dir/mnist/` (or `data_dir` itself), or from the bundled copy if `data_dir`
    is None (see the module docstring); MD5-verified either way.
    """
    del seed  # fixed original split
    return _load("mnist", data_dir)


def load_fashion_mnist(data_dir: str | os.PathLike | None, *, seed: int = 0) -> Dataset:
    """Fashion-MNIST: 60000 train / 10000 test images [N,28,28,1] in [0,1], labels {"label"};
    read from `data_dir/fashion_mnist/` (or `data_dir` itself)."""
    del seed  # fixed original split
    return _load("fashion_mnist", data_dir)


def clear_cache() -> None:
    """Drop cached datasets (for tests and memory)."""
    _cache.clear()
