import numpy as np

from tfpriv.filter import evaluation
from tfpriv.metrics import classification


def test_stage3_uses_the_projects_metrics():
    assert evaluation.accuracy is classification.accuracy and evaluation.auroc is classification.auroc
    assert evaluation.knn_mutual_information is classification.knn_mutual_information
    assert "knn_mutual_information" in evaluation.METRICS_SOURCE and "Ross (2014)" in evaluation.__doc__
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    # positives (1, 2) score 0.8, 0.4; negatives (0, 3) score 0.1, 0.7 -> 3 of 4 pairs ordered
    assert evaluation.auroc(np.array([0, 1, 1, 0]), probs) == 0.75


def test_knn_mi_zero_for_independent_and_log2_for_separated_labels():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 2000)
    noise = rng.normal(size=(2000, 2))
    separated = noise + 50.0 * y[:, None]
    assert evaluation.mutual_information(noise, y) < 0.03
    np.testing.assert_allclose(evaluation.mutual_information(separated, y), np.log(2), atol=0.03)


def test_evaluate_release_on_separable_and_on_random_labels():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(1500, 2)).astype(np.float32)
    y_sep = (z[:, 0] > 0).astype(int)
    y_rand = rng.integers(0, 2, 1500)
    out = evaluation.evaluate_release(z[:1000], z[1000:], {"a": y_sep[:1000], "b": y_rand[:1000]},
                                      {"a": y_sep[1000:], "b": y_rand[1000:]}, {"a": 2, "b": 2}, "linear", epochs=5)
    assert out["a"]["accuracy"] > 0.95 and out["a"]["auroc"] > 0.99
    assert abs(out["b"]["auroc"] - 0.5) < 0.1
