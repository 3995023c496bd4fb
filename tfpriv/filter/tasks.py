"""Private/utility/non-target label tasks: dataset labels plus the MNIST tasks derived from the digit.

MNIST case 1: private = digit (10 classes), utility = circle ∈ {0, 6, 8, 9}.
MNIST case 2: private = digit ≥ 5, utility = odd/even (1 = odd), non-target = circle.
"""
from __future__ import annotations

import numpy as np

from tfpriv.errors import UsageError

CIRCLE_DIGITS = (0, 6, 8, 9)
DERIVED_MNIST = {
    "digit": lambda d: d,
    "digit_ge5": lambda d: (d >= 5).astype(np.int64),
    "parity": lambda d: (d % 2).astype(np.int64),
    "circle": lambda d: np.isin(d, CIRCLE_DIGITS).astype(np.int64),
}


def resolve_label(labels: dict, name: str, flag: str = "--private_label") -> np.ndarray:
    """A label array by name: a key of the dataset's labels, or an MNIST task derived from "label"."""
    if name in labels:
        return np.asarray(labels[name]).astype(np.int64)
    if name in DERIVED_MNIST and "label" in labels:
        return DERIVED_MNIST[name](np.asarray(labels["label"]).astype(np.int64))
    options = sorted(set(labels) | (set(DERIVED_MNIST) if "label" in labels else set()))
    raise UsageError(f"{flag}: unknown label {name!r}; choose one of {options}")


def num_classes_of(*arrays: np.ndarray) -> int:
    return int(max(int(np.max(a)) for a in arrays) + 1)
