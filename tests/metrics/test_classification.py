import numpy as np
import pytest
from sklearn.feature_selection import mutual_info_classif

from tfpriv.errors import UsageError
from tfpriv.metrics.classification import accuracy, auroc, knn_mutual_information


def test_accuracy():
    assert accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    with pytest.raises(UsageError, match="^y_pred_labels: expected 4 entries"):
        accuracy([0, 1, 2, 2], [0, 1])


def test_binary_auroc_known_values():
    y = np.array([0, 0, 1, 1])
    assert auroc(y, [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)  # 3 of 4 pairs ordered
    assert auroc(y, np.array([[0.9, 0.1], [0.6, 0.4], [0.65, 0.35], [0.2, 0.8]])) == pytest.approx(0.75)
    assert auroc(y, [4, 3, 2, 1]) == 0.0


def test_multiclass_auroc_is_macro_one_vs_rest():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    logits = rng.normal(size=(200, 3)) + 1.5 * np.eye(3)[y]
    per_class = []
    for c in range(3):  # naive pair counting per class
        pos, neg = logits[y == c, c], logits[y != c, c]
        per_class.append(np.mean(pos[:, None] > neg[None, :]))
    assert auroc(y, logits) == pytest.approx(np.mean(per_class))  # logits accepted as-is
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    from sklearn.metrics import roc_auc_score
    assert auroc(y, probs) == pytest.approx(roc_auc_score(y, probs, multi_class="ovr", average="macro"))


def test_auroc_rejects_bad_labels():
    with pytest.raises(UsageError, match="^y_true: "):
        auroc([0, 1, 5], np.full((3, 3), 1 / 3))


def test_mi_equals_sklearn_for_a_single_feature():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 500)
    z = rng.normal(size=500) + y
    want = mutual_info_classif(z[:, None], y, discrete_features=False, n_neighbors=3, random_state=0)[0]
    assert knn_mutual_information(z[:, None], y) == pytest.approx(want, rel=1e-6)


def test_mi_of_independent_vector_is_near_zero():
    rng = np.random.default_rng(2)
    z = rng.normal(size=(1000, 4))
    y = rng.integers(0, 4, 1000)
    assert knn_mutual_information(z, y) < 0.03


def test_mi_of_separated_clusters_is_entropy_of_label():
    rng = np.random.default_rng(3)
    k = 5
    y = rng.integers(0, k, 1000)
    centres = 20.0 * rng.normal(size=(k, 3))
    z = centres[y] + rng.normal(size=(1000, 3))
    assert knn_mutual_information(z, y) == pytest.approx(np.log(k), abs=0.03)


def test_mi_sees_information_no_single_feature_carries():
    # y = XOR of the signs of two coordinates: each coordinate alone is independent of y
    rng = np.random.default_rng(4)
    z = rng.normal(size=(2000, 2))
    y = ((z[:, 0] > 0) ^ (z[:, 1] > 0)).astype(int)
    per_feature = mutual_info_classif(z, y, n_neighbors=3, random_state=0)
    assert per_feature.max() < 0.03
    assert knn_mutual_information(z, y) > 0.5  # true value log 2 ~ 0.69
