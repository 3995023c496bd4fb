"""load_dataset dispatch, name and data_dir errors, and the Dataset container."""
import dataclasses
import re

import numpy as np
import pytest

from tfpriv.data import DATASETS, Dataset, load_dataset
from tfpriv.errors import DataError, UsageError


def test_names():
    assert DATASETS == ("digits", "mnist", "fashion_mnist", "adult", "abalone", "pinwheel")


def test_unknown_name_lists_valid_ones():
    with pytest.raises(UsageError) as err:
        load_dataset("cifar10")
    msg = str(err.value)
    assert msg.startswith("dataset: must be one of ") and msg.endswith(", got 'cifar10'") and "\n" not in msg
    assert all(name in msg for name in DATASETS) and "tfds:<name>" in msg
    assert not isinstance(err.value, DataError)


@pytest.mark.parametrize("name", ["", None, ["mnist"]])
def test_a_name_that_is_no_dataset_name_gets_the_same_error(name):
    with pytest.raises(UsageError) as err:
        load_dataset(name)
    assert re.fullmatch(r"dataset: must be one of digits, .*, tfds:<name>, got (.*)", str(err.value))[1] == repr(name)


# mnist is bundled with the package: without a data_dir it reads that copy (test_bundled.py).
@pytest.mark.parametrize("name", ["fashion_mnist", "adult", "abalone"])
def test_file_datasets_need_data_dir(name):
    with pytest.raises(UsageError, match=f"^data_dir: required for dataset '{name}'"):
        load_dataset(name)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "adult", "abalone"])
def test_empty_data_dir(name, tmp_path):
    with pytest.raises(DataError, match=f"^data_dir: {tmp_path} has no {name}[/ ]"):
        load_dataset(name, tmp_path)


def test_dataset_is_frozen_and_readonly():
    ds = load_dataset("pinwheel")
    assert isinstance(ds, Dataset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.name = "x"  # type: ignore[misc]
    with pytest.raises(ValueError):
        ds.x_test[0, 0] = np.float32(1)
    assert ds.feature_names == ()
