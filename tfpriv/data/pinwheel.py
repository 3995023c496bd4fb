"""Pinwheel: synthetic 2-D clusters shaped like the arms of a pinwheel.

After Johnson et al. (2016), "Composing graphical models with neural networks for
structured representations and fast inference", code `make_pinwheel_data` in
github.com/mattjj/svae (experiments/gmm_svae_synth.py). Each point starts as
(1 + radial_std * e1, tangential_std * e2); its arm angle is the class's base angle
2*pi*k/K plus `rate * exp(radial coordinate)`, which bends the arms; the point is rotated
as in the original (row vector times [[cos, -sin], [sin, cos]]) and scaled by 10.
Unlike the original (global NumPy RNG, points only) this uses `default_rng(seed)` and
permutes points and labels together.

`scale` replaces the original's fixed factor 10. It is a constant of the generator, not a
statistic of the sampled points, so choosing it (e.g. `scale=1`: arms of radius ~1, the
data divided by the known factor 10) reveals nothing about the private data; standardising
with the sample's own mean/std would (it would need its own privacy budget).
"""
from __future__ import annotations

import os

import numpy as np

from tfpriv.data.dataset import Dataset, make_dataset
from tfpriv.errors import UsageError

SCALE = 10.0  # the original multiplies the rotated points by 10


def check_scale(scale) -> float:
    """`scale` as a float; UsageError naming `scale` unless finite and > 0."""
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise UsageError(f"scale: must be a number > 0, got {scale!r}") from None
    if not (np.isfinite(value) and value > 0):
        raise UsageError(f"scale: must be finite and > 0, got {scale!r}")
    return value


def make_pinwheel(
    num_per_class: int = 100,
    num_classes: int = 4,
    radial_std: float = 0.3,
    tangential_std: float = 0.05,
    rate: float = 0.25,
    seed: int = 0,
    scale: float = SCALE,
) -> tuple[np.ndarray, np.ndarray]:
    """(points float32 [K*n, 2], labels int64 [K*n]), deterministic in `seed`; the rotated
    points are multiplied by `scale` (10 in the original)."""
    if num_per_class < 1 or num_classes < 1:
        raise UsageError(
            f"make_pinwheel: num_per_class and num_classes must be >= 1, "
            f"got {num_per_class} and {num_classes}"
        )
    if int(seed) < 0:
        raise UsageError(f"seed: must be >= 0, got {seed}")
    scale = check_scale(scale)
    rng = np.random.default_rng(seed)
    rads = np.linspace(0.0, 2.0 * np.pi, num_classes, endpoint=False)
    n = num_classes * num_per_class
    features = rng.standard_normal((n, 2)) * np.array([radial_std, tangential_std])
    features[:, 0] += 1.0
    labels = np.repeat(np.arange(num_classes, dtype=np.int64), num_per_class)

    angles = rads[labels] + rate * np.exp(features[:, 0])
    cos, sin = np.cos(angles), np.sin(angles)
    rotations = np.stack([cos, -sin, sin, cos], axis=-1).reshape(-1, 2, 2)
    points = scale * np.einsum("ti,tij->tj", features, rotations)

    order = rng.permutation(n)
    return points[order].astype(np.float32), labels[order]


def derived_test_seed(seed: int) -> int:
    """Seed of the test points for a given train seed: derived, and distinct from it."""
    return int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])


def load_pinwheel(data_dir: str | os.PathLike | None = None, *, seed: int = 0, scale: float = SCALE) -> Dataset:
    """400 train points from `make_pinwheel(seed=seed, scale=scale)`, 400 test points from
    `make_pinwheel(seed=derived_test_seed(seed), scale=scale)`; labels {"cluster"}."""
    del data_dir  # synthetic
    x_train, y_train = make_pinwheel(seed=seed, scale=scale)
    x_test, y_test = make_pinwheel(seed=derived_test_seed(seed), scale=scale)
    return make_dataset(
        "pinwheel",
        x_train,
        x_test,
        {"cluster": y_train},
        {"cluster": y_test},
        kind="points",
        likelihood="gaussian",
        num_classes={"cluster": 4},
    )
