"""MNIST bundled as package data: the files, their licence note, packaging, and the loader's fallback."""
import pathlib
import re
import shutil
import tomllib

import numpy as np
import pytest

from tfpriv.data import checksums, idx, load_dataset
from tfpriv.errors import DataError, UsageError

from tests.conftest import REPO_ROOT

FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")  # fmt: skip
BUNDLED_MNIST = idx.BUNDLED_DIR / "mnist"


@pytest.fixture(autouse=True)
def _fresh_caches():
    idx.clear_cache()
    checksums.clear_cache()
    yield
    idx.clear_cache()
    checksums.clear_cache()


def test_bundled_files_are_the_originals(data_dir):
    assert idx.BUNDLED_DIR == pathlib.Path(idx.__file__).resolve().parent / "bundled"
    assert idx.bundled_root("mnist") == idx.BUNDLED_DIR
    assert idx.bundled_root("fashion_mnist") is None
    for name in FILES:
        rel = f"mnist/{name}"
        size, md5 = checksums.FILES[rel]
        path = BUNDLED_MNIST / name
        assert path.stat().st_size == size
        assert checksums.md5_file(path) == md5
        assert path.read_bytes() == (data_dir / rel).read_bytes()


def test_licence_note_lists_source_licence_and_checksums(data_dir):
    readme = (BUNDLED_MNIST / "README.md").read_text()
    licence = (BUNDLED_MNIST / "LICENSE").read_text()
    assert "CC BY-SA 3.0" in readme and "CC BY-SA 3.0" in licence
    assert "creativecommons.org/licenses/by-sa/3.0" in licence
    assert "LeCun" in readme and "LeCun" in licence
    shared = (data_dir / "README.md").read_text()
    ours = re.findall(r"^\| (\S+) \| (\d+) \| ([0-9a-f]{32}) \| ([0-9a-f]{64}) \|", readme, flags=re.M)
    assert sorted(name for name, *_ in ours) == sorted(FILES)
    for name, size, md5, sha256 in ours:
        assert (int(size), md5) == checksums.FILES[f"mnist/{name}"]
        assert f"| mnist/{name} | {size} | {md5} | {sha256} |" in shared


def test_pyproject_ships_the_bundled_files():
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["tfpriv.data"]
    package_dir = REPO_ROOT / "tfpriv" / "data"
    shipped = {p.name for pattern in patterns for p in package_dir.glob(pattern)}
    assert shipped == {*FILES, "README.md", "LICENSE"}
    assert idx.BUNDLED_DIR == package_dir.resolve() / "bundled"


def _assert_same(a, b):
    assert a.name == b.name == "mnist"
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(a.labels_train["label"], b.labels_train["label"])
    np.testing.assert_array_equal(a.labels_test["label"], b.labels_test["label"])
    assert a.x_train.shape == b.x_train.shape == (60000, 28, 28, 1)
    np.testing.assert_array_equal(a.x_train[::97], b.x_train[::97])


def test_no_data_dir_reads_the_bundled_copy(data_dir):
    assert idx.data_root("mnist", None) == BUNDLED_MNIST
    bundled = load_dataset("mnist")
    _assert_same(bundled, load_dataset("mnist", data_dir))
    assert bundled.labels_train["label"][:5].tolist() == [5, 0, 4, 1, 9]


def test_given_data_dir_without_the_files_is_refused_not_replaced(tmp_path, data_dir):
    looked_for = (f"^data_dir: {tmp_path} has no mnist files \\(looked for {', '.join(FILES)} "
                  f"in {tmp_path}/mnist/ and in {tmp_path}/\\); the copy bundled with tfpriv is read only when "
                  "no data_dir is given$")
    with pytest.raises(DataError, match=looked_for):
        load_dataset("mnist", tmp_path)  # empty folder
    (tmp_path / "fashion_mnist").mkdir()
    for name in FILES:
        shutil.copyfile(data_dir / "fashion_mnist" / name, tmp_path / "fashion_mnist" / name)
    with pytest.raises(DataError, match=looked_for):
        load_dataset("mnist", tmp_path)
    assert idx.data_root("fashion_mnist", tmp_path) == tmp_path / "fashion_mnist"
    assert idx.data_root("mnist", data_dir) == data_dir / "mnist"


def test_data_dir_may_be_the_datasets_own_folder(data_dir):
    assert idx.data_root("mnist", data_dir / "mnist") == data_dir / "mnist"
    _assert_same(load_dataset("mnist", data_dir / "mnist"), load_dataset("mnist"))
    # the files are checked against the dataset's MD5s wherever they are found
    with pytest.raises(DataError, match=f"^{data_dir / 'fashion_mnist'}/t.*: md5 mismatch"):
        load_dataset("mnist", data_dir / "fashion_mnist")


def test_partial_or_missing_data_dir_is_still_an_error(tmp_path, data_dir):
    (tmp_path / "mnist").mkdir()
    shutil.copyfile(data_dir / "mnist" / FILES[1], tmp_path / "mnist" / FILES[1])
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no mnist/train-images-idx3-ubyte.gz$"):
        load_dataset("mnist", tmp_path)
    shutil.rmtree(tmp_path / "mnist")
    shutil.copyfile(data_dir / "mnist" / FILES[1], tmp_path / FILES[1])
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no train-images-idx3-ubyte.gz$"):
        load_dataset("mnist", tmp_path)
    missing = tmp_path / "nope"
    with pytest.raises(DataError, match=f"^data_dir: {missing} is not a directory"):
        load_dataset("mnist", missing)


def test_other_datasets_are_not_bundled(tmp_path):
    with pytest.raises(UsageError, match="^data_dir: required for dataset 'fashion_mnist'"):
        load_dataset("fashion_mnist")
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no fashion_mnist files \\(looked for .*\\)$"):
        load_dataset("fashion_mnist", tmp_path)


def test_bundled_copy_is_checksum_verified(monkeypatch):
    rel = "mnist/t10k-labels-idx1-ubyte.gz"
    wrong = "0" * 32
    monkeypatch.setitem(checksums.MD5, rel, wrong)
    with pytest.raises(DataError) as err:
        load_dataset("mnist")
    msg = str(err.value)
    assert msg.startswith(f"{BUNDLED_MNIST / 't10k-labels-idx1-ubyte.gz'}: md5 mismatch")
    assert f"expected {wrong}" in msg and "\n" not in msg


def test_corrupt_bundled_copy_fails_loudly(monkeypatch, tmp_path):
    (tmp_path / "mnist").mkdir()
    for name in FILES:
        shutil.copyfile(BUNDLED_MNIST / name, tmp_path / "mnist" / name)
    target = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    raw = bytearray(target.read_bytes())
    raw[1000] ^= 0xFF
    target.write_bytes(bytes(raw))
    monkeypatch.setattr(idx, "BUNDLED_DIR", tmp_path)
    with pytest.raises(DataError, match=f"^{target}: md5 mismatch"):
        load_dataset("mnist")


def test_without_the_bundled_copy_the_old_errors_stand(monkeypatch, tmp_path):
    monkeypatch.setattr(idx, "BUNDLED_DIR", tmp_path / "not_installed")
    assert idx.bundled_root("mnist") is None
    with pytest.raises(UsageError, match="^data_dir: required for dataset 'mnist'"):
        load_dataset("mnist")
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no mnist files \\(looked for .*\\)$"):
        load_dataset("mnist", tmp_path)
