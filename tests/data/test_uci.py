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
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no adult/adult.test$"):
        load_dataset("adult", tmp_path)
    (tmp_path / "abalone").mkdir()
    target = tmp_path / "abalone/abalone.data"
    target.write_bytes((data_dir / "abalone/abalone.data").read_bytes().replace(b"M,", b"F,", 1))
    with pytest.raises(DataError, match=f"^{target}: md5 mismatch"):
        load_dataset("abalone", tmp_path)


# --- feature scaling: "public" (data-independent) vs "train" (train statistics, not private) ---


def _adult_names_schema(path):
    """{attribute: [values]} of the `name: v1, v2, ... .` lines of adult.names."""
    schema = {}
    for line in open(path, encoding="ascii"):
        line = line.strip()
        if line.startswith("|") or ":" not in line:
            continue
        name, values = line.split(":", 1)
        schema[name.strip()] = [v.strip() for v in values.strip().rstrip(".").split(",")]
    return schema


def test_adult_category_lists_match_adult_names(data_dir):
    schema = _adult_names_schema(data_dir / "adult/adult.names")
    assert list(schema) == list(uci.ADULT_COLUMNS[:-1])  # the 14 attributes, in order (income is the class)
    for name in uci.ADULT_COLUMNS[:-1]:
        if name in uci.ADULT_CONTINUOUS or name in uci.ADULT_DROPPED:
            assert schema[name] == ["continuous"], name
        else:
            assert list(uci.ADULT_CATEGORIES[name]) == schema[name], name
    assert set(uci.ADULT_CATEGORIES) | set(uci.ADULT_CONTINUOUS) | {"fnlwgt"} == set(uci.ADULT_COLUMNS[:-1])
    assert len(uci.ADULT_CATEGORIES["education"]) == 16  # education-num's public range [1, 16]


def test_abalone_published_statistics_match_abalone_names(data_dir):
    text = (data_dir / "abalone/abalone.names").read_text(encoding="ascii")
    rows = {}
    for line in text[text.index("Statistics for numeric domains"):].splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] in ("Min", "Max", "Mean", "SD"):
            rows[fields[0]] = [float(v) for v in fields[1:]]
    assert rows["Mean"][:7] == list(uci.ABALONE_PUBLISHED_MEAN)
    assert rows["SD"][:7] == list(uci.ABALONE_PUBLISHED_SD)
    assert rows["Min"][:7] == list(uci.ABALONE_PUBLISHED_MIN)
    assert rows["Max"][:7] == list(uci.ABALONE_PUBLISHED_MAX)
    assert rows["Max"][7] == uci.ABALONE_PUBLISHED_MAX_RINGS


@pytest.fixture(scope="module")
def adult_public(data_dir):
    return load_dataset("adult", data_dir, feature_scaling="public")


def test_adult_public_values_in_documented_ranges(data_dir, adult_public):
    names = adult_public.feature_names
    assert len(names) == 102  # 5 continuous + the 97 categories of the schema (sex is a label)
    assert "workclass=Never-worked" in names  # in the schema, in no complete record
    for x in (adult_public.x_train, adult_public.x_test):
        assert x.min() >= 0.0 and x.max() <= 1.0
        for column in uci.ADULT_CATEGORIES:
            block = [i for i, n in enumerate(names) if n.startswith(column + "=")]
            if column != "sex":
                np.testing.assert_array_equal(x[:, block].sum(1), 1)
    rows = [r for r in _csv_rows(data_dir / "adult/adult.data") if "?" not in r]
    raw = {c: np.array([float(r[uci.ADULT_COLUMNS.index(c)]) for r in rows]) for c in uci.ADULT_CONTINUOUS}
    x = adult_public.x_train
    np.testing.assert_allclose(x[:, names.index("age")], raw["age"] / 100, rtol=1e-6)
    np.testing.assert_allclose(x[:, names.index("education-num")], (raw["education-num"] - 1) / 15, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(x[:, names.index("hours-per-week")], raw["hours-per-week"] / 99, rtol=1e-6)
    for c in ("capital-gain", "capital-loss"):
        np.testing.assert_allclose(x[:, names.index(c)], np.log1p(raw[c]) / np.log1p(99999), rtol=1e-6)
    assert x[:, names.index("capital-gain")].max() == pytest.approx(1.0)  # the top-coded 99999s
    assert adult_public.labels_train["income"].tolist() == load_dataset("adult", data_dir).labels_train["income"].tolist()


def test_adult_public_clips_to_the_public_ranges():
    cols = {c: ["Private"] for c in uci.ADULT_COLUMNS}
    cols.update({"workclass": ["Private"], "education": ["HS-grad"], "marital-status": ["Divorced"],
                 "occupation": ["Sales"], "relationship": ["Wife"], "race": ["White"], "sex": ["Female"],
                 "native-country": ["Peru"], "fnlwgt": ["1"], "income": ["<=50K"],
                 "age": ["130"], "education-num": ["0"], "capital-gain": ["250000"], "capital-loss": ["-5"],
                 "hours-per-week": ["168"]})
    x, _, names = uci.adult_features(cols, cols, "public")
    got = {c: x[0, names.index(c)] for c in uci.ADULT_CONTINUOUS}
    assert got == {"age": 1.0, "education-num": 0.0, "capital-gain": 1.0, "capital-loss": 0.0, "hours-per-week": 1.0}
    cols["native-country"] = ["Atlantis"]
    with pytest.raises(DataError, match="'Atlantis' is not in the public schema"):
        uci.adult_features(cols, cols, "public")


def _without(cols, i):
    return {c: v[:i] + v[i + 1:] for c, v in cols.items()}


def test_adult_public_scaling_does_not_depend_on_the_training_records(data_dir):
    train_cols, test_cols, _, _ = uci.adult_columns(data_dir)
    x_tr, x_te, names = uci.adult_features(train_cols, test_cols, "public")
    # Remove a record: every other record's row is unchanged, bit for bit.
    removed_tr, removed_te, removed_names = uci.adult_features(_without(train_cols, 5), test_cols, "public")
    assert removed_names == names
    np.testing.assert_array_equal(removed_tr, np.delete(x_tr, 5, axis=0))
    np.testing.assert_array_equal(removed_te, x_te)
    # Perturb a record to extremes (and to the only record of a category): others unchanged.
    perturbed = {c: list(v) for c, v in train_cols.items()}
    for c, v in {"age": "17", "capital-gain": "99999", "capital-loss": "4356", "hours-per-week": "99",
                 "native-country": "Holand-Netherlands", "workclass": "Never-worked"}.items():
        perturbed[c][7] = v
    p_tr, p_te, p_names = uci.adult_features(perturbed, test_cols, "public")
    assert p_names == names
    np.testing.assert_array_equal(np.delete(p_tr, 7, axis=0), np.delete(x_tr, 7, axis=0))
    np.testing.assert_array_equal(p_te, x_te)
    # The same edits change the train-statistics transform of other records (what public avoids).
    t_tr, _, _ = uci.adult_features(train_cols, test_cols, "train")
    tp_tr, _, tp_names = uci.adult_features(perturbed, test_cols, "train")
    assert len(tp_names) != t_tr.shape[1] or not np.array_equal(np.delete(tp_tr, 7, axis=0), np.delete(t_tr, 7, axis=0))


def test_abalone_public_scaling(data_dir):
    public = load_dataset("abalone", data_dir, feature_scaling="public")
    features, sex, rings = uci.abalone_table(data_dir)
    train, test = uci.abalone_split(sex, rings)
    mean, sd = np.array(uci.ABALONE_PUBLISHED_MEAN), np.array(uci.ABALONE_PUBLISHED_SD)
    np.testing.assert_allclose(public.x_train, (features[train] - mean) / sd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(public.x_test, (features[test] - mean) / sd, rtol=1e-6, atol=1e-6)
    # Documented range: the published Min/Max, to within their 3-decimal rounding.
    low = (np.array(uci.ABALONE_PUBLISHED_MIN) - 5e-4 - mean) / sd
    high = (np.array(uci.ABALONE_PUBLISHED_MAX) + 5e-4 - mean) / sd
    for x in (public.x_train, public.x_test):
        assert (x >= low - 1e-6).all() and (x <= high + 1e-6).all()
    assert public.num_classes == {"sex": 3, "rings_gt_10": 2, "rings": 30}
    # Remove or perturb a training record: every other record's row is unchanged.
    x_tr, x_te = uci.abalone_features(features[train], features[test], "public")
    r_tr, r_te = uci.abalone_features(np.delete(features[train], 3, axis=0), features[test], "public")
    np.testing.assert_array_equal(r_tr, np.delete(x_tr, 3, axis=0))
    np.testing.assert_array_equal(r_te, x_te)
    perturbed = features[train].copy()
    perturbed[3] *= 50.0
    p_tr, p_te = uci.abalone_features(perturbed, features[test], "public")
    np.testing.assert_array_equal(np.delete(p_tr, 3, axis=0), np.delete(x_tr, 3, axis=0))
    np.testing.assert_array_equal(p_te, x_te)
    t_tr, _ = uci.abalone_features(features[train], features[test], "train")
    tp_tr, _ = uci.abalone_features(perturbed, features[test], "train")
    assert not np.array_equal(np.delete(tp_tr, 3, axis=0), np.delete(t_tr, 3, axis=0))


def test_default_scaling_is_train(data_dir, adult):
    np.testing.assert_array_equal(load_dataset("adult", data_dir, feature_scaling="train").x_train, adult.x_train)
    assert uci.load_adult(data_dir).x_train.shape == adult.x_train.shape


@pytest.mark.parametrize("requested,dataset,private,expected", [
    ("auto", "adult", True, "public"), ("auto", "abalone", True, "public"),
    ("auto", "adult", False, "train"), ("auto", "abalone", False, "train"),
    ("public", "adult", False, "public"), ("public", "abalone", True, "public"),
    ("train", "adult", False, "train"),
    ("auto", "mnist", True, None), ("auto", "digits", False, None),
])
def test_resolve_feature_scaling(requested, dataset, private, expected):
    assert uci.resolve_feature_scaling(requested, dataset, private) == expected


@pytest.mark.parametrize("requested,dataset,private,message", [
    ("train", "adult", True, "feature_scaling: train scales adult's features with statistics of the private"),
    ("train", "abalone", True, "feature_scaling: train scales abalone's features"),
    ("minmax", "adult", False, "feature_scaling: must be one of auto, public, train, got 'minmax'"),
    ("public", "mnist", True, "feature_scaling: only applies to dataset=adult or abalone, got dataset=mnist"),
])
def test_resolve_feature_scaling_refusals(requested, dataset, private, message):
    from tfpriv.errors import UsageError

    with pytest.raises(UsageError) as err:
        uci.resolve_feature_scaling(requested, dataset, private)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_loaders_refuse_unknown_scaling(data_dir):
    from tfpriv.errors import UsageError

    with pytest.raises(UsageError, match="^scaling: must be one of public, train, got 'auto'"):
        uci.load_abalone(data_dir, scaling="auto")
