"""Malformed data files: every corruption is one `DataError` line naming the file, never a crash or NaN.

The loaders verify MD5s first, so a corrupted original fails its checksum (tested in test_idx.py,
test_uci.py and, from the command line, tests/cli/test_train.py). Here the parsers themselves are
fuzzed with hypothesis (truncation points, byte flips, dropped columns, random strings), with the
checksum step bypassed, so a file with a recomputed checksum or an edited copy is still caught.
"""
import contextlib
import gzip
import pathlib
import struct
import tempfile
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfpriv.data import checksums, idx, load_dataset, read_idx, uci
from tfpriv.errors import DataError

FUZZ = settings(max_examples=40)  # with the derandomized profile of tests/conftest.py

ADULT_TRAIN = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K",
    "31, Private, 45781, Masters, 14, Never-married, Prof-specialty, Not-in-family, White, Female, 14084, 0, 50, United-States, >50K",
]  # fmt: skip
ADULT_TEST = [
    "|1x3 Cross validator",
    "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.",
    "38, Private, 89814, HS-grad, 9, Married-civ-spouse, Farming-fishing, Husband, White, Female, 0, 0, 50, ?, >50K.",
    "44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, 7688, 0, 40, United-States, >50K.",
]  # fmt: skip
ABALONE = ["M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15", "F,0.53,0.42,0.135,0.677,0.2565,0.1415,0.21,9",
           "I,0.33,0.255,0.08,0.205,0.0895,0.0395,0.055,7"] * 4  # enough rows for the stratified split


def _idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


GOOD_IDX = _idx_bytes(np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4))


def _check_error(err: DataError, path) -> None:
    message = str(err)
    assert message.startswith(f"{path}") and "\n" not in message, message
    assert err.param == "data_dir"  # shown on the command line as --data_dir: <path>: ...


@contextlib.contextmanager
def _no_checksums():
    """The parsers alone: files under a data_dir are read without their MD5 check."""
    with mock.patch.object(checksums, "verify_md5", lambda path, md5: pathlib.Path(path)):
        yield


# --- IDX ---------------------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_read_idx_truncated_gzip_is_one_data_error(tmp_path, data):
    compressed = gzip.compress(GOOD_IDX)
    cut = data.draw(st.integers(0, len(compressed) - 1), label="cut")
    path = tmp_path / "t.gz"
    path.write_bytes(compressed[:cut])
    with pytest.raises(DataError) as err:
        read_idx(path)
    _check_error(err.value, path)


@FUZZ
@given(data=st.data(), compress=st.booleans())
def test_read_idx_byte_flips_give_data_error_or_the_header_shape(tmp_path, data, compress):
    raw = gzip.compress(GOOD_IDX) if compress else GOOD_IDX
    # flips anywhere in a gzip stream (its CRC covers the payload), in the header of a raw file
    where = data.draw(st.integers(0, len(raw) - 1 if compress else 15), label="offset")
    flip = data.draw(st.integers(1, 255), label="xor")
    corrupted = bytearray(raw)
    corrupted[where] ^= flip
    path = tmp_path / "f"
    path.write_bytes(bytes(corrupted))
    try:
        out = read_idx(path)
    except DataError as err:
        _check_error(err, path)
    else:  # a flip the format cannot see (gzip header's mtime/OS bytes): the data is intact
        np.testing.assert_array_equal(out, read_idx_bytes(GOOD_IDX))


def read_idx_bytes(raw: bytes) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "x").write_bytes(raw)
        return read_idx(pathlib.Path(d) / "x")


def _write_mnist(root: pathlib.Path, images: np.ndarray, labels: np.ndarray, test_labels=None) -> None:
    (root / "mnist").mkdir(parents=True, exist_ok=True)
    for split, lab in (("train", labels), ("t10k", labels if test_labels is None else test_labels)):
        (root / "mnist" / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(images)))
        (root / "mnist" / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(lab)))


@pytest.mark.parametrize("images, labels, test_labels, message", [
    (np.zeros((3, 28, 27)), np.zeros(3), None, r"train-images-idx3-ubyte.gz: expected images \[N,28,28\], got \(3, 28, 27\)"),
    (np.zeros((3, 28, 28)), np.zeros(4), None, "train-labels-idx1-ubyte.gz: expected 3 labels, got shape"),
    (np.zeros((3, 28, 28)), np.zeros((3, 1)), None, "train-labels-idx1-ubyte.gz: expected 3 labels, got shape"),
    (np.zeros((3, 28, 28)), np.zeros(3), np.array([1, 10, 2]), "t10k-labels-idx1-ubyte.gz: label values must be 0..9, got 10"),
])  # fmt: skip
def test_mnist_wrong_dims_and_label_values(tmp_path, images, labels, test_labels, message):
    _write_mnist(tmp_path, images, labels, test_labels)
    with _no_checksums(), pytest.raises(DataError, match=f"^{tmp_path}/mnist/{message}") as err:
        load_dataset("mnist", tmp_path)
    _check_error(err.value, tmp_path)


def test_mnist_swapped_image_and_label_files(tmp_path):
    _write_mnist(tmp_path, np.zeros((3, 28, 28)), np.zeros(3))
    folder = tmp_path / "mnist"
    images, labels = folder / "train-images-idx3-ubyte.gz", folder / "train-labels-idx1-ubyte.gz"
    swap = images.read_bytes()
    images.write_bytes(labels.read_bytes())
    labels.write_bytes(swap)
    with _no_checksums(), pytest.raises(DataError, match=f"^{images}: expected images") as err:
        load_dataset("mnist", tmp_path)
    _check_error(err.value, tmp_path)


def test_truncated_original_fails_its_checksum_first(tmp_path, data_dir):
    (tmp_path / "mnist").mkdir()
    for f in idx._SPLIT_FILES["train"] + idx._SPLIT_FILES["test"]:
        (tmp_path / "mnist" / f).symlink_to(data_dir / "mnist" / f)
    target = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"  # read first: the test stays fast
    with open(target, "rb") as f:
        head = f.read(4096)
    target.unlink()
    target.write_bytes(head)
    with pytest.raises(DataError, match=f"^{target}: md5 mismatch") as err:
        load_dataset("mnist", tmp_path)
    _check_error(err.value, target)
    with _no_checksums(), pytest.raises(DataError, match=f"^{target}: not a valid gzip file"):
        load_dataset("mnist", tmp_path)


# --- CSV: Adult and Abalone --------------------------------------------------------------------


def _write_adult(root: pathlib.Path, train: list[str], test: list[str]) -> None:
    (root / "adult").mkdir(parents=True, exist_ok=True)
    (root / "adult/adult.data").write_text("\n".join(train) + "\n")
    (root / "adult/adult.test").write_text("\n".join(test) + "\n")


def _load_adult(root, scaling):
    with _no_checksums():
        return uci.load_adult(root, scaling=scaling)


def test_adult_fixture_loads(tmp_path):
    _write_adult(tmp_path, ADULT_TRAIN, ADULT_TEST)
    ds = _load_adult(tmp_path, "public")
    assert ds.x_train.shape == (3, 102) and ds.x_test.shape == (2, 102)  # the '?' record is dropped
    assert ds.labels_train["income"].tolist() == [0, 0, 1] and ds.labels_test["gender"].tolist() == [1, 1]


def _edit(line: str, column: str, value: str) -> str:
    fields = line.split(", ")
    fields[uci.ADULT_COLUMNS.index(column)] = value
    return ", ".join(fields)


@pytest.mark.parametrize("column, value, scaling, message", [
    ("age", "nan", "public", r"train column 'age' has a non-finite value 'nan'"),
    ("hours-per-week", "inf", "public", r"train column 'hours-per-week' has a non-finite value 'inf'"),
    ("capital-gain", "-Infinity", "train", r"train column 'capital-gain' has a non-finite value '-Infinity'"),
    ("age", "thirty", "train", r"train column 'age' is not numeric"),
    ("workclass", "Astronaut", "public", r"column 'workclass': value 'Astronaut' is not in the public schema"),
])  # fmt: skip
def test_adult_bad_feature_values(tmp_path, column, value, scaling, message):
    _write_adult(tmp_path, [_edit(ADULT_TRAIN[0], column, value)] + ADULT_TRAIN[1:], ADULT_TEST)
    with pytest.raises(DataError, match=f"^{tmp_path}/adult: {message}") as err:
        _load_adult(tmp_path, scaling)
    _check_error(err.value, tmp_path)


def test_adult_unknown_category_is_all_zero_with_train_scaling(tmp_path):
    # train scaling one-hots over the categories seen in train: an unseen test value is an all-zero block
    _write_adult(tmp_path, ADULT_TRAIN, [ADULT_TEST[0], _edit(ADULT_TEST[1], "race", "Martian")])
    ds = _load_adult(tmp_path, "train")
    race = [i for i, n in enumerate(ds.feature_names) if n.startswith("race=")]
    assert ds.x_test[0, race].sum() == 0 and np.isfinite(ds.x_test).all()


@pytest.mark.parametrize("train, test, message", [
    ([_edit(ADULT_TRAIN[0], "income", ">=50K")] + ADULT_TRAIN[1:], ADULT_TEST,
     r"adult/adult.data: unexpected label value '>=50K'"),
    (ADULT_TRAIN, ADULT_TEST[:1] + [_edit(ADULT_TEST[1], "sex", "female")], r"adult/adult.test: unexpected label value 'female'"),
    ([ADULT_TRAIN[0].rsplit(", ", 1)[0]] + ADULT_TRAIN[1:], ADULT_TEST, r"adult/adult.data:1: expected 15 fields, got 14"),
    (ADULT_TRAIN, ADULT_TEST[:1], r"adult/adult.test: no records"),
    (ADULT_TRAIN, ADULT_TEST[:1] + ADULT_TEST[2:3], r"adult/adult.test: no complete records"),
])  # fmt: skip
def test_adult_bad_labels_columns_and_empty_files(tmp_path, train, test, message):
    _write_adult(tmp_path, train, test)
    with pytest.raises(DataError, match=f"^{tmp_path}/{message}") as err:
        _load_adult(tmp_path, "public")
    _check_error(err.value, tmp_path)


FIELD = st.one_of(st.sampled_from(["nan", "inf", "-1", "", "?", "1e400", "Male", ">50K", "0x10", "½"]),
                  st.text(max_size=8))


@FUZZ
@given(data=st.data(), scaling=st.sampled_from(uci.SCALINGS))
def test_adult_fuzzed_records(tmp_path, data, scaling):
    """A random field replaced by random text, a column dropped, or the file truncated: the load
    either succeeds with finite features and 0/1 labels or raises one DataError line naming the file."""
    train = list(ADULT_TRAIN)
    row = data.draw(st.integers(0, len(train) - 1), label="row")
    fields = train[row].split(", ")
    action = data.draw(st.sampled_from(["replace", "drop", "truncate"]), label="action")
    if action == "replace":
        fields[data.draw(st.integers(0, len(fields) - 1), label="column")] = data.draw(FIELD, label="value")
        train[row] = ", ".join(fields)
    elif action == "drop":
        del fields[data.draw(st.integers(0, len(fields) - 1), label="column")]
        train[row] = ", ".join(fields)
    text = "\n".join(train) + "\n"
    if action == "truncate":
        text = text[: data.draw(st.integers(0, len(text)), label="cut")]
    _write_adult(tmp_path, [], ADULT_TEST)
    try:
        (tmp_path / "adult/adult.data").write_text(text, encoding="utf-8")
        ds = _load_adult(tmp_path, scaling)
    except DataError as err:
        _check_error(err, tmp_path)
    else:
        assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
        assert set(np.unique(ds.labels_train["income"])) <= {0, 1}


def _write_abalone(root: pathlib.Path, lines: list[str]) -> None:
    (root / "abalone").mkdir(parents=True, exist_ok=True)
    (root / "abalone/abalone.data").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("row, scaling, message", [
    ("X,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15", "public", "sex 'X' is not one of M, F, I"),
    ("M,nan,0.365,0.095,0.514,0.2245,0.101,0.15,15", "public", "column 'length' has a non-finite value 'nan'"),
    ("M,0.455,0.365,0.095,0.514,0.2245,0.101,inf,15", "train", "column 'shell_weight' has a non-finite value 'inf'"),
    ("M,0.455,0.365,big,0.514,0.2245,0.101,0.15,15", "train", "column 'height' is not numeric"),
    ("M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15.5", "public", "column 'rings' is not an integer"),
    ("M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,-3", "train", "column 'rings' must be >= 1"),
    ("M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,40", "public", "rings 40 above the published maximum 29"),
    ("M,0.455,0.365,0.095,0.514,0.2245,0.101,15", "train", r"\d+: expected 9 fields, got 8"),
])  # fmt: skip
def test_abalone_bad_records(tmp_path, row, scaling, message):
    _write_abalone(tmp_path, ABALONE + [row])
    with _no_checksums(), pytest.raises(DataError, match=f"^{tmp_path}/abalone/abalone.data:? ?{message}") as err:
        uci.load_abalone(tmp_path, scaling=scaling)
    _check_error(err.value, tmp_path)


def test_abalone_fixture_loads_and_empty_file_is_refused(tmp_path):
    _write_abalone(tmp_path, ABALONE)
    with _no_checksums():
        ds = uci.load_abalone(tmp_path, scaling="public")
        assert len(ds.x_train) + len(ds.x_test) == len(ABALONE) and np.isfinite(ds.x_train).all()
        _write_abalone(tmp_path, [])
        with pytest.raises(DataError, match=f"^{tmp_path}/abalone/abalone.data: no records$"):
            uci.load_abalone(tmp_path)
