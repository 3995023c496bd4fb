import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.filter.tasks import num_classes_of, resolve_label


def test_mnist_derived_tasks():
    labels = {"label": np.arange(10)}
    assert resolve_label(labels, "digit_ge5").tolist() == [0] * 5 + [1] * 5
    assert resolve_label(labels, "parity").tolist() == [0, 1] * 5
    assert resolve_label(labels, "circle").tolist() == [1, 0, 0, 0, 0, 0, 1, 0, 1, 1]
    assert resolve_label(labels, "digit").tolist() == list(range(10))
    assert num_classes_of(np.array([0, 2]), np.array([1])) == 3


def test_dataset_labels_pass_through_and_unknown_is_usage_error():
    assert resolve_label({"sex": np.array([2, 0])}, "sex").tolist() == [2, 0]
    with pytest.raises(UsageError, match=r"^--utility_label: unknown label 'circle'"):
        resolve_label({"sex": np.array([0])}, "circle", "--utility_label")
