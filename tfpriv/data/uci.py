"""UCI Adult and Abalone from their original comma-separated files, md5-verified.

Adult: train = `adult.data`, test = `adult.test` (UCI's own split). Fields are stripped
of whitespace; `adult.test`'s first line (`|1x3 Cross validator`) and empty lines are
skipped; the test labels' trailing `.` is removed. Records with a `?` in any field are
dropped (32561 -> 30162 train, 16281 -> 15060 test). `fnlwgt` is dropped: it is the
census sampling weight of a record, not an attribute of the person. `sex` and `income`
are labels, not features. Continuous features are standardised with train mean and
(population) std; categorical ones are one-hot over the categories seen in train
(sorted), a test category unseen in train would get an all-zero block.

Abalone: the 7 numeric measurements, standardised with train statistics; labels are sex
(M/F/I -> 0/1/2), rings > 10 and the raw ring count. No official split exists, so a fixed
80/20 split (seed 0) stratified on (sex, rings > 10) is used: 3341 train / 836 test.
"""
from __future__ import annotations

import os
import pathlib

import numpy as np

from tfpriv.data import checksums
from tfpriv.data.registry import Dataset, make_dataset
from tfpriv.errors import DataError

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)  # fmt: skip
ADULT_CONTINUOUS = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")
ADULT_DROPPED = ("fnlwgt",)
ADULT_LABEL_COLUMNS = ("sex", "income")
_SEX = {"Female": 0, "Male": 1}
_INCOME = {"<=50K": 0, ">50K": 1}

ABALONE_COLUMNS = (
    "sex", "length", "diameter", "height", "whole_weight", "shucked_weight",
    "viscera_weight", "shell_weight", "rings",
)  # fmt: skip
ABALONE_FEATURES = ABALONE_COLUMNS[1:8]
ABALONE_SEX = {"M": 0, "F": 1, "I": 2}
ABALONE_TEST_FRACTION = 0.2
ABALONE_SPLIT_SEED = 0


def _read_records(path: pathlib.Path, num_fields: int) -> list[list[str]]:
    """Comma-separated records with stripped fields; skips empty lines and `|` comments."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as ASCII text ({exc})") from None
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("|"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != num_fields:
            raise DataError(f"{path}:{lineno}: expected {num_fields} fields, got {len(fields)}")
        records.append(fields)
    return records


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x - mean) / std with train statistics; constant columns are only centred."""
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std[std == 0] = 1.0
    return (train - mean) / std, (test - mean) / std


def _adult_split(path: pathlib.Path) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """Columns (as string lists) of the complete records, and the label vectors."""
    records = [r for r in _read_records(path, len(ADULT_COLUMNS)) if "?" not in r]
    columns = {name: [r[i] for r in records] for i, name in enumerate(ADULT_COLUMNS)}
    try:
        gender = np.array([_SEX[v] for v in columns["sex"]], dtype=np.int64)
        income = np.array([_INCOME[v.rstrip(".")] for v in columns["income"]], dtype=np.int64)
    except KeyError as exc:
        raise DataError(f"{path}: unexpected label value {exc.args[0]!r}") from None
    return columns, {"gender": gender, "income": income}


def adult_arrays(
    data_dir: str | os.PathLike,
) -> tuple[np.ndarray, np.ndarray, dict, dict, tuple[str, ...]]:
    """(x_train, x_test, labels_train, labels_test, feature_names) for Adult, float64."""
    root = pathlib.Path(data_dir)
    train_cols, y_train = _adult_split(checksums.verified_file(root, "adult/adult.data"))
    test_cols, y_test = _adult_split(checksums.verified_file(root, "adult/adult.test"))

    blocks_train, blocks_test, names = [], [], []
    for name in ADULT_COLUMNS:
        if name in ADULT_DROPPED or name in ADULT_LABEL_COLUMNS:
            continue
        if name in ADULT_CONTINUOUS:
            try:
                tr = np.array(train_cols[name], dtype=np.float64)[:, None]
                te = np.array(test_cols[name], dtype=np.float64)[:, None]
            except ValueError as exc:
                raise DataError(f"{root}/adult: column {name!r} is not numeric ({exc})") from None
            tr, te = _standardise(tr, te)
            names.append(name)
        else:
            categories = sorted(set(train_cols[name]))
            tr = np.array(train_cols[name])[:, None] == np.array(categories)[None, :]
            te = np.array(test_cols[name])[:, None] == np.array(categories)[None, :]
            names.extend(f"{name}={c}" for c in categories)
        blocks_train.append(tr.astype(np.float64))
        blocks_test.append(te.astype(np.float64))
    return (
        np.concatenate(blocks_train, axis=1),
        np.concatenate(blocks_test, axis=1),
        y_train,
        y_test,
        tuple(names),
    )


def load_adult(data_dir: str | os.PathLike | None, *, seed: int = 0) -> Dataset:
    """UCI Adult: tabular features [N,F], labels {"gender": 0 F/1 M, "income": 1 if >50K}."""
    del seed  # fixed original split
    root = checksums.require_data_dir(data_dir, "adult")
    x_train, x_test, y_train, y_test, names = adult_arrays(root)
    return make_dataset(
        "adult",
        x_train,
        x_test,
        y_train,
        y_test,
        kind="tabular",
        likelihood="gaussian",
        feature_names=names,
        num_classes={"gender": 2, "income": 2},
    )


def abalone_table(data_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All 4177 records: (features [N,7] float64, sex [N] int64 M/F/I -> 0/1/2, rings [N])."""
    path = checksums.verified_file(data_dir, "abalone/abalone.data")
    records = _read_records(path, len(ABALONE_COLUMNS))
    try:
        sex = np.array([ABALONE_SEX[r[0]] for r in records], dtype=np.int64)
        features = np.array([r[1:8] for r in records], dtype=np.float64)
        rings = np.array([int(r[8]) for r in records], dtype=np.int64)
    except (KeyError, ValueError) as exc:
        raise DataError(f"{path}: malformed record ({exc})") from None
    return features, sex, rings


def abalone_split(sex: np.ndarray, rings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fixed train/test row indices, 80/20, stratified on (sex, rings > 10)."""
    from sklearn.model_selection import train_test_split

    strata = sex * 2 + (rings > 10)
    return train_test_split(
        np.arange(len(sex)),
        test_size=ABALONE_TEST_FRACTION,
        random_state=ABALONE_SPLIT_SEED,
        stratify=strata,
    )


def load_abalone(data_dir: str | os.PathLike | None, *, seed: int = 0) -> Dataset:
    """UCI Abalone: 7 standardised measurements, labels {"sex", "rings_gt_10", "rings"}."""
    del seed  # the split is fixed so test sets are comparable across runs
    root = checksums.require_data_dir(data_dir, "abalone")
    features, sex, rings = abalone_table(root)
    train, test = abalone_split(sex, rings)
    x_train, x_test = _standardise(features[train], features[test])

    def labels(idx: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "sex": sex[idx],
            "rings_gt_10": (rings[idx] > 10).astype(np.int64),
            "rings": rings[idx],
        }

    return make_dataset(
        "abalone",
        x_train,
        x_test,
        labels(train),
        labels(test),
        kind="tabular",
        likelihood="gaussian",
        feature_names=ABALONE_FEATURES,
        # Rings are counts 1..29; 30 classes lets the raw count index a one-hot directly.
        num_classes={"sex": 3, "rings_gt_10": 2, "rings": int(rings.max()) + 1},
    )
