import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.metrics.clustering import cluster_purity

MEANS = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])  # pinwheel prior corners


def clustered(rng, n_per=50, noise=0.03):
    labels = np.repeat(np.arange(4), n_per)
    codes = MEANS[labels] + noise * rng.normal(size=(len(labels), 2))
    return codes, labels


def test_perfect_clusters_score_one():
    codes, labels = clustered(np.random.default_rng(0))
    assert cluster_purity(codes, labels, MEANS) == 1.0


def test_component_numbering_does_not_matter():
    codes, labels = clustered(np.random.default_rng(1))
    relabelled = np.array([7, 3, 9, 5])[labels]  # arbitrary label values
    assert cluster_purity(codes, relabelled, MEANS[[2, 0, 3, 1]]) == 1.0


def test_known_partial_purity():
    codes, labels = clustered(np.random.default_rng(2), n_per=25)
    labels = labels.copy()
    labels[:10] = 1  # 10 of label 0's 25 codes now carry label 1
    # best matching keeps component 0 -> label 0 (15 right); all others right: (100 - 10) / 100
    assert cluster_purity(codes, labels, MEANS) == pytest.approx(0.90)


def test_random_assignment_is_about_one_over_k():
    rng = np.random.default_rng(3)
    codes = rng.uniform(-0.5, 1.5, size=(4000, 2))
    labels = rng.integers(0, 4, size=4000)
    assert cluster_purity(codes, labels, MEANS) == pytest.approx(0.25, abs=0.03)


def test_shape_errors():
    with pytest.raises(UsageError, match="^component_means: "):
        cluster_purity(np.zeros((3, 2)), np.zeros(3), np.zeros((4, 3)))
