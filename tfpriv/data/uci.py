"""UCI Adult and Abalone from their original comma-separated files, md5-verified.

Adult: train = `adult.data`, test = `adult.test` (UCI's own split). Fields are stripped
of whitespace; `adult.test`'s first line (`|1x3 Cross validator`) and empty lines are
skipped; the test labels' trailing `.` is removed. Records with a `?` in any field are
dropped (32561 -> 30162 train, 16281 -> 15060 test). `fnlwgt` is dropped: it is the
census sampling weight of a record, not an attribute of the person. `sex` and `income`
are labels, not features.

Abalone: the 7 numeric measurements; labels are sex (M/F/I -> 0/1/2), rings > 10 and the
raw ring count. No official split exists, so a fixed 80/20 split (seed 0) stratified on
(sex, rings > 10) is used: 3341 train / 836 test.

Feature scaling (`scaling=`, `--feature_scaling`), the only place where feature values are
transformed:

- `"public"` (data-independent; required whenever a model is trained with DP). Every
  constant comes from the public schema shipped with the data or from census top-codes,
  none is computed from the records, so the transform of one record does not depend on
  any other record and releases nothing about the training split.
  Adult: categorical features are one-hot over the category lists of the public schema in
  `adult.names` (`ADULT_CATEGORIES`, sorted; 97 columns, e.g. `workclass=Never-worked`
  is present although no complete record has it). Continuous features are clipped to a
  fixed range and mapped to [0, 1] (`ADULT_PUBLIC_RANGES`):
  age: (x - 0) / 100 on [0, 100]; education-num: (x - 1) / 15 on [1, 16] (the schema has
  16 education levels); hours-per-week: x / 99 on [0, 99] (the census top-code);
  capital-gain and capital-loss: log1p(x) / log1p(99999) on [0, 99999] (99999 is the
  census top-code of both). 102 features, all in [0, 1].
  Abalone: (x - Mean) / SD with the Mean and SD of each measurement published in
  `abalone.names` ("Statistics for numeric domains", `ABALONE_PUBLISHED_MEAN`/`_SD`).
  These are public metadata shipped with the data set by its donors, not computed by us;
  they were computed by the donors over all 4177 records, so a DP guarantee for our
  training records holds relative to that already-published summary (as it does for the
  published record counts). Values are not clipped; the published Min/Max (rounded to
  3 decimals) bound every record to within that rounding. The ring count's number of
  classes is 30 from the published maximum of 29.
- `"train"` (the default of the loaders, NOT private): continuous features are
  standardised with the train split's mean and (population) std; Adult's categorical
  features are one-hot over the categories seen in train (sorted; a test category unseen
  in train gets an all-zero block; 101 features); Abalone's ring classes are max(rings)+1.
  These statistics of the private training split are released through anything trained
  on the features without being covered by any epsilon, so the CLIs refuse this mode
  together with private training (`resolve_feature_scaling`).

Not changed by `scaling`: the Abalone split is stratified on the labels of all records,
and Adult's `?`-records are dropped; both select records, neither transforms them.
"""
from __future__ import annotations

import os
import pathlib

import numpy as np

from tfpriv.data import checksums
from tfpriv.data.dataset import Dataset, make_dataset
from tfpriv.errors import DataError, UsageError

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

# The category lists of the public schema in adult.names (in its order); tested against the file.
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
                  "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
                   "Priv-house-serv", "Protective-serv", "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany", "Outlying-US(Guam-USVI-etc)",
        "India", "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland",
        "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador",
        "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
        "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),
}  # fmt: skip
# Public ranges of Adult's continuous features: (low, high, transform); values are clipped to
# [low, high] and mapped to [0, 1]. "linear": (x - low) / (high - low); "log": log1p(x) / log1p(high).
ADULT_PUBLIC_RANGES: dict[str, tuple[float, float, str]] = {
    "age": (0.0, 100.0, "linear"),
    "education-num": (1.0, 16.0, "linear"),  # 16 education levels in the schema
    "capital-gain": (0.0, 99999.0, "log"),  # census top-code
    "capital-loss": (0.0, 99999.0, "log"),  # census top-code
    "hours-per-week": (0.0, 99.0, "linear"),  # census top-code
}

ABALONE_COLUMNS = (
    "sex", "length", "diameter", "height", "whole_weight", "shucked_weight",
    "viscera_weight", "shell_weight", "rings",
)  # fmt: skip
ABALONE_FEATURES = ABALONE_COLUMNS[1:8]
ABALONE_SEX = {"M": 0, "F": 1, "I": 2}
ABALONE_TEST_FRACTION = 0.2
ABALONE_SPLIT_SEED = 0


# "Statistics for numeric domains" published in abalone.names (Length .. Shell weight); tested
# against the file. Public metadata of the data set, not computed by tfpriv.
ABALONE_PUBLISHED_MIN = (0.075, 0.055, 0.000, 0.002, 0.001, 0.001, 0.002)
ABALONE_PUBLISHED_MAX = (0.815, 0.650, 1.130, 2.826, 1.488, 0.760, 1.005)
ABALONE_PUBLISHED_MEAN = (0.524, 0.408, 0.140, 0.829, 0.359, 0.181, 0.239)
ABALONE_PUBLISHED_SD = (0.120, 0.099, 0.042, 0.490, 0.222, 0.110, 0.139)
ABALONE_PUBLISHED_MAX_RINGS = 29

SCALINGS = ("public", "train")
FEATURE_SCALING_CHOICES = ("auto",) + SCALINGS
SCALED_DATASETS = ("adult", "abalone")


def check_scaling(scaling: str) -> str:
    if scaling not in SCALINGS:
        raise UsageError(f"scaling: must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    return scaling


def resolve_feature_scaling(requested: str, dataset: str, private: bool) -> str | None:
    """The loader's `scaling` for `--feature_scaling=requested`; None for datasets without one.

    `auto` is `public` when a model is trained privately and `train` otherwise (the committed
    non-private results). `train` together with private training is refused: the train
    split's statistics would be released outside the reported epsilon.
    """
    if requested not in FEATURE_SCALING_CHOICES:
        raise UsageError(f"feature_scaling: must be one of {', '.join(FEATURE_SCALING_CHOICES)}, "
                         f"got {requested!r}")
    if dataset not in SCALED_DATASETS:
        if requested != "auto":
            raise UsageError(f"feature_scaling: only applies to dataset={' or '.join(SCALED_DATASETS)}, "
                             f"got dataset={dataset}")
        return None
    if requested == "auto":
        return "public" if private else "train"
    if requested == "train" and private:
        raise UsageError(f"feature_scaling: train scales {dataset}'s features with statistics of the private "
                         "training split (mean/std, seen categories), a leak the reported epsilon does not cover; "
                         "use public (or auto) with private training")
    return requested


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
    if not records:
        raise DataError(f"{path}: no records")
    return records


def _finite(values: list[str], where: str) -> np.ndarray:
    """`values` as a float64 column [N,1]; DataError naming `where` for text or NaN/inf."""
    try:
        column = np.array(values, dtype=np.float64).reshape(-1, 1)
    except ValueError as exc:
        raise DataError(f"{where} is not numeric ({exc})") from None
    bad = ~np.isfinite(column[:, 0])
    if bad.any():
        raise DataError(f"{where} has a non-finite value {values[int(np.argmax(bad))]!r}")
    return column


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x - mean) / std with train statistics; constant columns are only centred."""
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std[std == 0] = 1.0
    return (train - mean) / std, (test - mean) / std


def _adult_split(path: pathlib.Path) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """Columns (as string lists) of the complete records, and the label vectors."""
    records = [r for r in _read_records(path, len(ADULT_COLUMNS)) if "?" not in r]
    if not records:
        raise DataError(f"{path}: no complete records (every record has a '?')")
    columns = {name: [r[i] for r in records] for i, name in enumerate(ADULT_COLUMNS)}
    try:
        gender = np.array([_SEX[v] for v in columns["sex"]], dtype=np.int64)
        income = np.array([_INCOME[v.rstrip(".")] for v in columns["income"]], dtype=np.int64)
    except KeyError as exc:
        raise DataError(f"{path}: unexpected label value {exc.args[0]!r}") from None
    return columns, {"gender": gender, "income": income}


def _public_continuous(name: str, values: np.ndarray) -> np.ndarray:
    """Adult's continuous feature `name` clipped to its public range and mapped to [0, 1]."""
    low, high, transform = ADULT_PUBLIC_RANGES[name]
    x = np.clip(values, low, high)
    if transform == "log":
        return np.log1p(x - low) / np.log1p(high - low)
    return (x - low) / (high - low)


def _one_hot(values: list[str], categories: list[str], where: str, strict: bool) -> np.ndarray:
    out = np.array(values)[:, None] == np.array(categories)[None, :]
    if strict and not out.any(axis=1).all():
        bad = values[int(np.argmin(out.any(axis=1)))]
        raise DataError(f"{where}: value {bad!r} is not in the public schema of adult.names")
    return out


def adult_features(
    train_cols: dict[str, list[str]], test_cols: dict[str, list[str]], scaling: str, where: str = "adult"
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(x_train, x_test, feature_names), float64, from Adult's string columns.

    `scaling="public"` uses the public schema and constants only, so each record's row is a
    function of that record alone; `"train"` uses train statistics (not private).
    """
    check_scaling(scaling)
    blocks_train, blocks_test, names = [], [], []
    for name in ADULT_COLUMNS:
        if name in ADULT_DROPPED or name in ADULT_LABEL_COLUMNS:
            continue
        if name in ADULT_CONTINUOUS:
            tr = _finite(train_cols[name], f"{where}: train column {name!r}")
            te = _finite(test_cols[name], f"{where}: test column {name!r}")
            if scaling == "public":
                tr, te = _public_continuous(name, tr), _public_continuous(name, te)
            else:
                tr, te = _standardise(tr, te)
            names.append(name)
        else:
            if scaling == "public":
                categories = sorted(ADULT_CATEGORIES[name])
            else:
                categories = sorted(set(train_cols[name]))
            strict = scaling == "public"
            tr = _one_hot(train_cols[name], categories, f"{where}: column {name!r}", strict)
            te = _one_hot(test_cols[name], categories, f"{where}: column {name!r}", strict)
            names.extend(f"{name}={c}" for c in categories)
        blocks_train.append(tr.astype(np.float64))
        blocks_test.append(te.astype(np.float64))
    return np.concatenate(blocks_train, axis=1), np.concatenate(blocks_test, axis=1), tuple(names)


def adult_columns(data_dir: str | os.PathLike) -> tuple[dict, dict, dict, dict]:
    """(train columns, test columns, labels_train, labels_test) of Adult's complete records."""
    root = pathlib.Path(data_dir)
    train_cols, y_train = _adult_split(checksums.verified_file(root, "adult/adult.data"))
    test_cols, y_test = _adult_split(checksums.verified_file(root, "adult/adult.test"))
    return train_cols, test_cols, y_train, y_test


def adult_arrays(
    data_dir: str | os.PathLike, scaling: str = "train"
) -> tuple[np.ndarray, np.ndarray, dict, dict, tuple[str, ...]]:
    """(x_train, x_test, labels_train, labels_test, feature_names) for Adult, float64."""
    check_scaling(scaling)
    train_cols, test_cols, y_train, y_test = adult_columns(data_dir)
    x_train, x_test, names = adult_features(train_cols, test_cols, scaling, where=f"{pathlib.Path(data_dir)}/adult")
    return x_train, x_test, y_train, y_test, names


def load_adult(data_dir: str | os.PathLike | None, *, seed: int = 0, scaling: str = "train") -> Dataset:
    """UCI Adult: tabular features [N,F], labels {"gender": 0 F/1 M, "income": 1 if >50K}.

    `scaling`: "public" (data-independent, see the module docstring) or "train" (train
    statistics; not private).
    """
    del seed  # fixed original split
    check_scaling(scaling)
    root = checksums.require_data_dir(data_dir, "adult")
    x_train, x_test, y_train, y_test, names = adult_arrays(root, scaling)
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
    bad_sex = [r[0] for r in records if r[0] not in ABALONE_SEX]
    if bad_sex:
        raise DataError(f"{path}: sex {bad_sex[0]!r} is not one of {', '.join(ABALONE_SEX)}")
    sex = np.array([ABALONE_SEX[r[0]] for r in records], dtype=np.int64)
    features = np.concatenate([_finite([r[j] for r in records], f"{path}: column {ABALONE_COLUMNS[j]!r}")
                               for j in range(1, 8)], axis=1)
    try:
        rings = np.array([int(r[8]) for r in records], dtype=np.int64)
    except ValueError as exc:
        raise DataError(f"{path}: column 'rings' is not an integer ({exc})") from None
    if rings.min() < 1:
        raise DataError(f"{path}: column 'rings' must be >= 1 (a ring count), got {rings.min()}")
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


def abalone_features(train: np.ndarray, test: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray]:
    """Scaled Abalone measurements [N,7]: "public" = published Mean/SD of abalone.names, "train" = train statistics."""
    check_scaling(scaling)
    if scaling == "public":
        mean, sd = np.array(ABALONE_PUBLISHED_MEAN), np.array(ABALONE_PUBLISHED_SD)
        return (train - mean) / sd, (test - mean) / sd
    return _standardise(train, test)


def load_abalone(data_dir: str | os.PathLike | None, *, seed: int = 0, scaling: str = "train") -> Dataset:
    """UCI Abalone: 7 standardised measurements, labels {"sex", "rings_gt_10", "rings"}.

    `scaling`: "public" (the Mean/SD published in abalone.names) or "train" (train
    statistics; not private).
    """
    del seed  # the split is fixed so test sets are comparable across runs
    check_scaling(scaling)
    root = checksums.require_data_dir(data_dir, "abalone")
    features, sex, rings = abalone_table(root)
    train, test = abalone_split(sex, rings)
    x_train, x_test = abalone_features(features[train], features[test], scaling)
    if scaling == "public" and rings.max() > ABALONE_PUBLISHED_MAX_RINGS:
        raise DataError(f"{root / 'abalone/abalone.data'}: rings {rings.max()} above the published maximum "
                        f"{ABALONE_PUBLISHED_MAX_RINGS} that public scaling sizes the ring classes by")
    num_rings = ABALONE_PUBLISHED_MAX_RINGS + 1 if scaling == "public" else int(rings.max()) + 1

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
        num_classes={"sex": 3, "rings_gt_10": 2, "rings": num_rings},
    )
