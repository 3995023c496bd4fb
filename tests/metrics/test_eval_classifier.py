import json
import pathlib
import re
import tomllib

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_ROOT
from tfpriv.compat import keras
from tfpriv.errors import DataError, UsageError
from tfpriv.metrics import eval_classifier as mc
from tfpriv.training.results import REQUIRED_KEYS

# Smoke thresholds only: 1 epoch on 6000 images, measured on the first SMOKE_TEST_IMAGES test images.
# The shipped classifiers' accuracies are recorded beside them (tfpriv/metrics/eval_classifiers/*.json)
# and checked below on all 10,000.
SMOKE_MIN_ACCURACY = 0.80
SMOKE_MIN_ACCURACY_FASHION = 0.65
SMOKE = dict(epochs=1, max_train_examples=6000)
SMOKE_TEST_IMAGES = 2000


def first_test_images(monkeypatch, n: int) -> None:
    """`mc.load_images` keeps the first n images of the split a classifier is measured on (measuring a
    smoke classifier on all 10,000 takes about a third of its training's time); the fitted split stays."""
    load = mc.load_images

    def load_first(*args, **kwargs):
        x_fit, y_fit, x_eval, y_eval = load(*args, **kwargs)
        return x_fit, y_fit, x_eval[:n], y_eval[:n]

    monkeypatch.setattr(mc, "load_images", load_first)


def test_load_mnist_shapes_and_range(data_dir):
    x_train, y_train, x_test, y_test = mc.load_images("mnist", data_dir)
    assert x_train.shape == (60000, 28, 28, 1) and x_test.shape == (10000, 28, 28, 1)
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    assert np.bincount(y_test).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# The shipped classifiers' test accuracy at least (experiments/dpwgan/README.md: 99.38 %, 91.95 %).
SHIPPED_MIN_ACCURACY = {"mnist": 0.993, "fashion_mnist": 0.915}


@pytest.fixture
def not_retrained(monkeypatch):
    monkeypatch.setattr(mc, "train_classifier", lambda *a, **k: pytest.fail("retrained"))


@pytest.mark.parametrize("dataset", mc.DATASETS)
def test_the_shipped_classifier_loads_without_training_and_has_its_recorded_accuracy(
        dataset, data_dir, tmp_path, not_retrained):
    # was: ~9 minutes of training on first use (a GAN smoke run), then a cache in ~/.cache
    info = mc.load_info(dataset, cache_dir=str(tmp_path))
    assert (info["dataset"], info["model_version"], info["epochs"], info["seed"], info["train_examples"]) == (
        dataset, mc.MODEL_VERSION, mc.DEFAULT_EPOCHS, 0, 60000)
    assert info["test_accuracy"] >= SHIPPED_MIN_ACCURACY[dataset]
    assert mc.is_available(dataset, cache_dir=str(tmp_path))
    model = mc.get_classifier(dataset, str(data_dir), cache_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())  # nothing cached: the package's copy
    _, _, x_test, y_test = mc.load_images(dataset, data_dir)
    probs, _ = mc.classifier_outputs(model, x_test)
    # the weights are the ones whose accuracy is recorded (to within a borderline image or two)
    assert np.mean(probs.argmax(1) == y_test) == pytest.approx(info["test_accuracy"], abs=2e-4)


def test_the_shipped_classifiers_are_package_data():
    shipped = {p.name for p in mc.SHIPPED_DIR.iterdir()}
    assert shipped == {f"{d}{suffix}" for d in mc.DATASETS for suffix in ("_weights.h5", ".json")}
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["tfpriv.metrics"]
    assert {p.name for pattern in patterns for p in (REPO_ROOT / "tfpriv" / "metrics").glob(pattern)} == shipped
    assert mc.SHIPPED_DIR == REPO_ROOT / "tfpriv" / "metrics" / "eval_classifiers"
    assert re.search(r'glob\(\["tfpriv/metrics/eval_classifiers/\*"\]\)', (REPO_ROOT / "BUILD").read_text())


def test_other_settings_or_a_stale_shipped_copy_are_trained_and_cached(monkeypatch, tmp_path):
    assert mc.shipped_info("mnist") is not None
    assert mc.shipped_info("mnist", epochs=2) is None and mc.shipped_info("mnist", seed=1) is None
    assert mc.shipped_info("mnist", max_train_examples=6000) is None
    monkeypatch.setattr(mc, "MODEL_VERSION", "changed")
    assert mc.shipped_info("mnist") is None and not mc.is_available("mnist", cache_dir=str(tmp_path))
    monkeypatch.setattr(mc, "SHIPPED_DIR", tmp_path / "not_installed")
    assert mc.shipped_classifier("mnist") is None


def test_ship_writes_weights_that_load_by_layer_order_and_the_record(monkeypatch, tmp_path, data_dir):
    calls = []
    monkeypatch.setattr(tf.config.experimental, "enable_op_determinism", lambda: calls.append("deterministic"))
    small = mc.train_classifier
    monkeypatch.setattr(mc, "train_classifier", lambda dataset, data_dir, verbose: small(
        dataset, data_dir, epochs=1, max_train_examples=128))  # one training step
    first_test_images(monkeypatch, 100)  # its accuracy is recorded, not checked
    info = mc.ship("mnist", str(data_dir), tmp_path)
    assert calls == ["deterministic"]
    weights, record = mc.shipped_paths("mnist", tmp_path)
    assert json.loads(record.read_text()) == info and "--ship" in info["command"]
    first = mc.build_classifier()
    first.load_weights(weights)
    keras.layers.Conv2D(1, 1)  # another layer first: the next model's layers get other names
    second = mc.build_classifier()
    second.load_weights(weights)
    assert first.layers[0].name != second.layers[0].name
    fresh = mc.build_classifier().get_weights()
    for a, b, c in zip(first.get_weights(), second.get_weights(), fresh):
        np.testing.assert_array_equal(a, b)
        assert a.shape == c.shape
    assert not np.array_equal(first.get_weights()[0], fresh[0])
    assert weights.stat().st_size < 4_000_000  # the layers' weights only, no optimizer state


@pytest.fixture(scope="module")
def smoke_cache(tmp_path_factory, data_dir):
    cache = tmp_path_factory.mktemp("eval_classifier")
    with pytest.MonkeyPatch.context() as monkeypatch:
        first_test_images(monkeypatch, SMOKE_TEST_IMAGES)
        model = mc.get_classifier("mnist", str(data_dir), cache_dir=str(cache), **SMOKE)
    return cache, model


def test_training_writes_cache_and_records(smoke_cache):
    cache, _ = smoke_cache
    directory = cache / mc.cache_key("mnist", 1, 0, 6000)
    assert (directory / "model.keras").is_file()
    info = mc.load_info("mnist", str(cache), **SMOKE)
    assert info["model_version"] == mc.MODEL_VERSION and info["train_examples"] == 6000
    assert info["dataset"] == "mnist"
    assert info["test_accuracy"] >= SMOKE_MIN_ACCURACY
    record = json.loads((directory / "results.json").read_text())
    assert set(REQUIRED_KEYS) <= set(record)
    assert record["metrics"]["test_accuracy"] == info["test_accuracy"] and record["dataset"] == "mnist"


def test_second_call_loads_from_cache_without_training(smoke_cache, data_dir, monkeypatch):
    cache, model = smoke_cache
    monkeypatch.setattr(mc, "train_classifier", lambda *a, **k: pytest.fail("retrained"))
    loaded = mc.get_classifier("mnist", str(data_dir), cache_dir=str(cache), **SMOKE)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_outputs_are_probabilities_and_penultimate_features(smoke_cache, data_dir):
    _, model = smoke_cache
    _, _, x_test, y_test = mc.load_images("mnist", data_dir)
    probs, features = mc.classifier_outputs(model, x_test[:300], batch_size=128)
    assert probs.shape == (300, 10) and features.shape == (300, mc.FEATURE_DIM)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    assert features.min() >= 0.0  # ReLU feature layer
    # the features are exactly what the softmax layer sees
    w, b = model.get_layer("probs").get_weights()
    logits = features @ w + b
    np.testing.assert_allclose(probs, tf.nn.softmax(logits).numpy(), atol=1e-5)
    np.testing.assert_allclose(probs, model.predict(x_test[:300], verbose=0), atol=1e-6)
    assert np.mean(probs.argmax(1) == y_test[:300]) >= SMOKE_MIN_ACCURACY
    # [n, 28, 28] is accepted as single-channel
    probs2, _ = mc.classifier_outputs(model, x_test[:5, ..., 0])
    np.testing.assert_allclose(probs2, probs[:5], atol=1e-6)


def test_outputs_reject_wrong_range_and_shape(smoke_cache):
    _, model = smoke_cache
    with pytest.raises(UsageError, match=r"^images: expected values in \[0, 1\]"):
        mc.classifier_outputs(model, -np.ones((2, 28, 28, 1)))
    with pytest.raises(UsageError, match="^images: expected shape"):
        mc.classifier_outputs(model, np.zeros((2, 32, 32, 1)))


def test_fashion_mnist_gets_its_own_classifier_and_cache(smoke_cache, data_dir, monkeypatch):
    cache, mnist_model = smoke_cache
    with monkeypatch.context() as patched:
        first_test_images(patched, SMOKE_TEST_IMAGES)
        model = mc.get_classifier("fashion_mnist", str(data_dir), cache_dir=str(cache), **SMOKE)
    assert (cache / mc.cache_key("fashion_mnist", 1, 0, 6000) / "model.keras").is_file()
    info = mc.load_info("fashion_mnist", str(cache), **SMOKE)
    assert info["dataset"] == "fashion_mnist" and info["test_accuracy"] >= SMOKE_MIN_ACCURACY_FASHION
    _, _, x_test, y_test = mc.load_images("fashion_mnist", data_dir)
    probs, _ = mc.classifier_outputs(model, x_test[:500])
    assert np.mean(probs.argmax(1) == y_test[:500]) >= SMOKE_MIN_ACCURACY_FASHION
    # the MNIST classifier is not it: it reads Fashion-MNIST far worse
    mnist_probs, _ = mc.classifier_outputs(mnist_model, x_test[:500])
    assert np.mean(mnist_probs.argmax(1) == y_test[:500]) < 0.5


def test_unknown_dataset_is_refused_naming_the_parameter(tmp_path, data_dir):
    with pytest.raises(UsageError, match=r"^dataset: must be one of mnist, fashion_mnist, got 'cifar10'"):
        mc.get_classifier("cifar10", str(data_dir), cache_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())


def test_a_classifier_fitted_on_the_test_split_never_reads_the_training_split(monkeypatch):
    """split="test" (the scores --tune chooses GAN trials by): fitted on the test split but its last
    TEST_HOLDOUT images, measured on those; a training split of NaNs would poison it if read."""
    import types

    import tfpriv.data
    rng = np.random.default_rng(0)
    n_test = mc.TEST_HOLDOUT + 200
    data = types.SimpleNamespace(
        x_train=np.full((300, 28, 28, 1), np.nan, np.float32), labels_train={"label": np.zeros(300, np.int64)},
        x_test=rng.uniform(size=(n_test, 28, 28, 1)).astype(np.float32),
        labels_test={"label": rng.integers(0, 10, n_test)})
    monkeypatch.setattr(tfpriv.data, "load_dataset", lambda *a, **k: data)
    model, info = mc.train_classifier("mnist", "unused", epochs=1, split="test")
    assert info["split"] == "test" and info["train_examples"] == 200 and np.isfinite(info["test_accuracy"])
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    with pytest.raises(UsageError, match="split"):
        mc.cached_model_path("mnist", split="validation")
