"""Adult and Abalone against a naive csv-module reading of the same files."""
import csv
import shutil

import numpy as np
import pytest

from tfpriv.data import load_dataset, uci
from tfpriv.errors import DataError


def _csv_rows(path):
    with open(path, newline="") as fh:
        rows = [[f.strip() for f in r] for r in csv.reader(fh) if r and not r[0].startswith("|")]
    return rows


@pytest.fixture(scope="module")
def adult(data_dir):
    return load_dataset("adult", data_dir)


def test_adult_raw_and_clean_counts(data_dir, adult):
    train_rows = _csv_rows(data_dir / "adult/adult.data")
    test_rows = _csv_rows(data_dir / "adult/adult.test")
    assert (len(train_rows), len(test_rows)) == (32561, 16281)  # README's record counts
    complete_train = [r for r in train_rows if "?" not in r]
    complete_test = [r for r in test_rows if "?" not in r]
    assert (len(complete_train), len(complete_test)) == (30162, 15060)
    assert adult.x_train.shape[0] == 30162 and adult.x_test.shape[0] == 15060
    # Labels equal the naive reading, row for row.
    np.testing.assert_array_equal(adult.labels_train["income"], [r[14] == ">50K" for r in complete_train])
    np.testing.assert_array_equal(adult.labels_test["income"], [r[14] == ">50K." for r in complete_test])
    np.testing.assert_array_equal(adult.labels_test["gender"], [r[9] == "Male" for r in complete_test])
    assert np.bincount(adult.labels_train["income"]).tolist() == [22654, 7508]
    assert np.bincount(adult.labels_test["income"]).tolist() == [11360, 3700]
    assert np.bincount(adult.labels_train["gender"]).tolist() == [9782, 20380]
    assert adult.labels_train["income"].dtype == np.int64


def test_adult_features(data_dir, adult):
    names = adult.feature_names
    assert adult.kind == "tabular" and adult.likelihood == "gaussian"
    assert adult.x_train.dtype == np.float32 and adult.x_train.shape[1] == len(names) == 101
    assert adult.num_classes == {"gender": 2, "income": 2}
    assert not any(n.split("=")[0] in ("sex", "income", "fnlwgt") for n in names)
    continuous = [names.index(c) for c in uci.ADULT_CONTINUOUS]
    np.testing.assert_allclose(adult.x_train[:, continuous].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(adult.x_train[:, continuous].std(0), 1, atol=1e-4)
    # Every categorical attribute is exactly one-hot, in train and in test.
    for column in set(uci.ADULT_COLUMNS) - set(uci.ADULT_CONTINUOUS) - {"sex", "income", "fnlwgt"}:
        block = [i for i, n in enumerate(names) if n.startswith(column + "=")]
        assert block, column
        for x in (adult.x_train, adult.x_test):
            np.testing.assert_array_equal(x[:, block].sum(1), 1)
    # First train record: 39, State-gov, 77516, Bachelors, 13, Never-married, ... , <=50K.
    ages = np.array([float(r[0]) for r in _csv_rows(data_dir / "adult/adult.data") if "?" not in r])
    assert adult.x_train[0, names.index("age")] == pytest.approx((39 - ages.mean()) / ages.std(), rel=1e-5)
    for one in ("workclass=State-gov", "education=Bachelors", "marital-status=Never-married",
                "native-country=United-States"):  # fmt: skip
        assert adult.x_train[0, names.index(one)] == 1
    assert adult.x_train[0, names.index("workclass=Private")] == 0
    assert adult.labels_train["gender"][0] == 1 and adult.labels_train["income"][0] == 0


@pytest.fixture(scope="module")
def abalone(data_dir):
    return load_dataset("abalone", data_dir)


def test_abalone(data_dir, abalone):
    rows = _csv_rows(data_dir / "abalone/abalone.data")
    assert len(rows) == 4177
    assert abalone.x_train.shape == (3341, 7) and abalone.x_test.shape == (836, 7)
    assert abalone.feature_names == ("length", "diameter", "height", "whole_weight",
                                     "shucked_weight", "viscera_weight", "shell_weight")  # fmt: skip
    sex = np.concatenate([abalone.labels_train["sex"], abalone.labels_test["sex"]])
    assert np.bincount(sex).tolist() == [1528, 1307, 1342]  # M, F, I as in abalone.names
    for labels in (abalone.labels_train, abalone.labels_test):
        np.testing.assert_array_equal(labels["rings_gt_10"], labels["rings"] > 10)
        assert labels["rings"].min() >= 1 and labels["rings"].max() <= 29
    assert abalone.num_classes == {"sex": 3, "rings_gt_10": 2, "rings": 30}
    np.testing.assert_allclose(abalone.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(abalone.x_train.std(0), 1, atol=1e-4)
    # Stratified: each (sex, rings > 10) stratum is split 80/20 to within one record.
    for s in range(3):
        for r in (0, 1):
            n_tr = np.sum((abalone.labels_train["sex"] == s) & (abalone.labels_train["rings_gt_10"] == r))
            n_te = np.sum((abalone.labels_test["sex"] == s) & (abalone.labels_test["rings_gt_10"] == r))
            assert abs(n_te - 0.2 * (n_tr + n_te)) <= 1


def test_abalone_split_recovers_raw_records(data_dir, abalone):
    rows = _csv_rows(data_dir / "abalone/abalone.data")
    raw = np.array([r[1:8] for r in rows], dtype=np.float64)
    features, sex, rings = uci.abalone_table(data_dir)
    train, test = uci.abalone_split(sex, rings)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(4177))
    mean, std = raw[train].mean(0), raw[train].std(0)
    np.testing.assert_allclose(abalone.x_test * std + mean, raw[test], atol=1e-5)
    assert rows[0] == ["M", "0.455", "0.365", "0.095", "0.514", "0.2245", "0.101", "0.15", "15"]
    # The split ignores the run seed: test sets stay comparable across runs.
    np.testing.assert_array_equal(load_dataset("abalone", data_dir, seed=7).x_test, abalone.x_test)


def test_uci_corrupt_and_missing(data_dir, tmp_path):
    (tmp_path / "adult").mkdir()
    shutil.copyfile(data_dir / "adult/adult.data", tmp_path / "adult/adult.data")
    with pytest.raises(DataError, match=f"^--data_dir: {tmp_path} has no adult/adult.test$"):
        load_dataset("adult", tmp_path)
    (tmp_path / "abalone").mkdir()
    target = tmp_path / "abalone/abalone.data"
    target.write_bytes((data_dir / "abalone/abalone.data").read_bytes().replace(b"M,", b"F,", 1))
    with pytest.raises(DataError, match=f"^{target}: md5 mismatch"):
        load_dataset("abalone", tmp_path)
