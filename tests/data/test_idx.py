"""IDX parsing on hand-made files, and MNIST / Fashion-MNIST against published facts."""
import gzip
import shutil
import struct
import time

import numpy as np
import pytest

from tfpriv.data import idx, load_dataset, read_idx
from tfpriv.errors import DataError

FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")  # fmt: skip


def _idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_roundtrip(tmp_path, compress):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 7
    raw = _idx_bytes(array)
    assert struct.unpack(">I", raw[:4])[0] == idx.IMAGE_MAGIC == 0x0803
    path = tmp_path / ("a.gz" if compress else "a")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    out = read_idx(path)
    assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, array)


def test_read_idx_labels_magic(tmp_path):
    raw = _idx_bytes(np.array([5, 0, 4], dtype=np.uint8))
    assert struct.unpack(">I", raw[:4])[0] == idx.LABEL_MAGIC
    (tmp_path / "l").write_bytes(raw)
    np.testing.assert_array_equal(read_idx(tmp_path / "l"), [5, 0, 4])


def test_read_idx_malformed(tmp_path):
    good = _idx_bytes(np.zeros((2, 2), dtype=np.uint8))
    cases = {
        "magic": b"\x01" + good[1:],
        "type": good[:2] + b"\x0d" + good[3:],  # float data
        "short": good[:-1],
        "long": good + b"\x00",
        "gzip": b"\x1f\x8b" + b"garbage",
    }
    for name, raw in cases.items():
        path = tmp_path / name
        path.write_bytes(raw)
        with pytest.raises(DataError) as err:
            read_idx(path)
        assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "name, first_labels, mean, std, train_counts, test_counts",
    [
        # Pixel mean/std over the training set are the well-known normalisation constants.
        ("mnist", [5, 0, 4, 1, 9], 0.1307, 0.3081,
         [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949],
         [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]),
        ("fashion_mnist", [9, 0, 0, 3, 0], 0.2860, 0.3530, [6000] * 10, [1000] * 10),
    ],
)  # fmt: skip
def test_real_images(data_dir, name, first_labels, mean, std, train_counts, test_counts):
    ds = load_dataset(name, data_dir)
    assert ds.name == name and ds.kind == "image" and ds.likelihood == "bernoulli"
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and ds.labels_train["label"].dtype == np.int64
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0 and ds.x_test.max() == 1.0
    assert ds.labels_train["label"][:5].tolist() == first_labels
    assert np.bincount(ds.labels_train["label"]).tolist() == train_counts
    assert np.bincount(ds.labels_test["label"]).tolist() == test_counts
    assert ds.x_train.mean(dtype=np.float64) == pytest.approx(mean, abs=5e-5)
    assert ds.x_train.std(dtype=np.float64) == pytest.approx(std, abs=5e-5)
    assert ds.num_classes == {"label": 10}
    # Pixels are exactly the uint8 file values / 255.
    raw = read_idx(data_dir / name / "t10k-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(ds.x_test[:50, ..., 0], raw[:50].astype(np.float32) / np.float32(255))


def test_cached_reload_is_fast_and_safe(data_dir):
    first = load_dataset("mnist", data_dir)
    start = time.perf_counter()
    second = load_dataset("mnist", data_dir)
    assert time.perf_counter() - start < 0.1
    assert second.x_train is first.x_train  # shared, hence read-only
    with pytest.raises(ValueError):
        first.x_train[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        first.labels_train["label"][0] = 3
    first.labels_train["label"] = np.zeros(3)  # a caller's dict is its own
    assert load_dataset("mnist", data_dir).labels_train["label"].shape == (60000,)


def _copy_mnist(data_dir, dest):
    (dest / "mnist").mkdir()
    for f in FILES:
        shutil.copyfile(data_dir / "mnist" / f, dest / "mnist" / f)


def test_corrupt_and_missing_files(data_dir, tmp_path):
    _copy_mnist(data_dir, tmp_path)
    target = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(target.read_bytes())
    raw[2000] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=f"^{target}: md5 mismatch"):
        load_dataset("mnist", tmp_path)
    target.unlink()
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no mnist/t10k-labels-idx1-ubyte.gz$"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match=r"has no fashion_mnist files \(looked for train-images-idx3-ubyte.gz, "):
        load_dataset("fashion_mnist", tmp_path)


def test_file_changed_after_caching_is_caught(data_dir, tmp_path):
    _copy_mnist(data_dir, tmp_path)
    assert load_dataset("mnist", tmp_path).labels_test["label"][0] == 7
    target = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(target.read_bytes())
    raw[-10] ^= 0x01
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="md5 mismatch"):
        load_dataset("mnist", tmp_path)
