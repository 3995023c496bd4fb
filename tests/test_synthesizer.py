"""`tfpriv.synthesizer`: fit calibrates the noise to the budget and trains through the job's run;
samples are numpy and deterministic by seed; `save` writes a run folder that `tfpriv.load` and the
SavedModel serve; bad settings, data and call orders are one clear error."""
import json

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tests.test_release_list import release_table, written
from tests.conftest import saved_flags
from tfpriv.data import load_dataset
from tfpriv.errors import ConfigError, UsageError
from tfpriv.cli.flags import FLAGS
from tfpriv.cli import main as cli_main  # noqa: F401  (defines the flags the `privae` fixture sets)

EPSILON = 2.0


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits").x_train[:256]


@pytest.fixture(scope="module")
def privae(digits):
    # A process's parsed flags (an absl app's command line) do not reach the synthesizer's settings.
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with saved_flags(learning_rate=0.5, epochs=7):
        return tfpriv.synthesizer("privae", epsilon=EPSILON, epochs=1, batch_size=32, latent_dim=4, seed=0).fit(digits)


def test_fit_spends_the_budget_through_the_jobs_run(privae):
    assert EPSILON * 0.98 <= privae.epsilon <= EPSILON
    assert privae.delta == 1e-5  # the default for N = 256
    results = privae.results
    assert results["model"] == "privae" and results["dataset"] == "arrays"
    assert results["target_epsilon"] == EPSILON and results["epsilon"] == privae.epsilon
    assert results["aggregation"] == "termwise" and results["noise_multiplier"] > 1  # calibrated, not the default
    assert results["planned_epochs"] == 1 and results["learning_rate"] == 1e-3 and results["latent_dim"] == 4
    assert results["metrics"] == {}  # no evaluation: every array is private


def test_samples_are_numpy_and_deterministic_by_seed(privae):
    a, b, c = privae.sample(6, seed=3), privae.sample(6, seed=3), privae.sample(6, seed=4)
    assert isinstance(a, np.ndarray) and a.shape == (6, 8, 8, 1) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert privae.sample(2).shape == (2, 8, 8, 1)


def test_save_is_a_run_folder_that_load_and_the_saved_model_serve(privae, tmp_path):
    out = str(tmp_path / "run")
    assert privae.save(out) == out
    results = json.load(open(f"{out}/results.json"))
    assert results["model"] == "privae" and results["epsilon"] == privae.epsilon
    assert results["saved_model"]["path"] == f"{out}/saved_model"
    assert (tmp_path / "run" / "privacy_plan.json").is_file() and (tmp_path / "run" / "checkpoints").is_dir()
    expected = privae.sample(5, seed=11)
    np.testing.assert_array_equal(tfpriv.load(out).sample(5, 11).numpy(), expected)
    served = tf.saved_model.load(f"{out}/saved_model").signatures["sample"](n=tf.constant(5),
                                                                            seed=tf.constant(11, tf.int64))["x"]
    np.testing.assert_allclose(served.numpy(), expected, atol=1e-6)
    with pytest.raises(UsageError, match="^directory: .* exists and is not an empty folder$"):
        privae.save(out)
    (tmp_path / "empty").mkdir()
    privae.save(str(tmp_path / "empty"))  # an empty folder is filled
    assert json.load(open(tmp_path / "empty" / "results.json"))["epsilon"] == privae.epsilon
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"^directory: cannot write .*file/run \(File exists\)$"):
        privae.save(str(tmp_path / "file" / "run"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left
    assert_released(tmp_path / "run", "privae")


def assert_released(run_dir, family: str) -> None:
    """Everything the saved run folder holds is in docs/privacy.md's release list of its family."""
    missing = sorted(written(run_dir) - set(release_table()[family]))
    assert not missing, f"the {family} synthesizer writes outputs the release list does not name: {missing}"


def test_fit_twice_and_labels_for_the_vae_are_refused(privae, digits):
    with pytest.raises(UsageError, match="^fit: the synthesizer is already trained"):
        privae.fit(digits)
    with pytest.raises(UsageError, match="^labels: the privae synthesizer is unconditional"):
        privae.sample(3, seed=0, labels=[0, 1, 2])
    with pytest.raises(UsageError, match="^n: must be an integer >= 1, got 0$"):
        privae.sample(0, seed=0)


def test_a_conditional_gan_in_a_few_steps(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 28, 28, 1), dtype=np.float32), np.arange(32) % 4
    # q = 1 (two epochs of one step): calibrating a subsampled Gaussian takes seconds (the privae fixture does)
    s = tfpriv.synthesizer("dpwgan_gp", epsilon=EPSILON, epochs=2, batch_size=32, capacity=2, latent_size=4,
                           num_classes=4, seed=0).fit(x, y)
    assert EPSILON * 0.98 <= s.epsilon <= EPSILON and s.results["train_steps"] == 2
    labels = np.array([0, 1, 2, 3, 3])
    a = s.sample(5, seed=1, labels=labels)
    assert a.shape == (5, 28, 28, 1) and a.dtype == np.float32
    np.testing.assert_array_equal(a, s.sample(5, seed=1, labels=labels))
    with pytest.raises(UsageError, match="^labels: this generator is conditional"):
        s.sample(5, seed=1)
    out = str(tmp_path / "gan")
    s.save(out)
    np.testing.assert_array_equal(tfpriv.load(out).sample(5, 1, labels).numpy(), a)
    served = tf.saved_model.load(f"{out}/saved_model").signatures["sample"](
        n=tf.constant(5), seed=tf.constant(1, tf.int64), labels=tf.constant(labels, tf.int32))["x"]
    np.testing.assert_allclose(served.numpy(), a, atol=1e-6)
    assert_released(tmp_path / "gan", "dpwgan_gp")


@pytest.mark.parametrize("name,kwargs,message", [
    ("filter", {}, "name: must be one of privae, vae, dpwgan_gp, dpgan, got 'filter'"),
    ("privae", {"epsilon": 0.0}, "epsilon: must be a positive finite number, got 0.0"),
    ("privae", {"epsilon": float("inf")}, "epsilon: must be a positive finite number, got inf"),
    ("privae", {"epochz": 1}, "epochz: not a setting of the privae synthesizer; its settings are "),
    ("privae", {"noise_multiplier": 1.0}, "noise_multiplier: fit calibrates it from epsilon=1.0 (at delta, for the "
                                          "planned epochs and batch_size); give epsilon only"),
    ("dpgan", {"noise_multiplier": 1.0}, "noise_multiplier: fit calibrates it from epsilon=1.0"),
    ("privae", {"dataset": "mnist"}, "dataset: not a setting of the privae synthesizer"),
    ("privae", {"num_classes": 3}, "num_classes: not a setting of the privae synthesizer"),
    ("dpgan", {"eval_samples": 10}, "eval_samples: not a setting of the dpgan synthesizer"),
    ("privae", {"aggregation": "none"}, "aggregation: a synthesizer trains privately"),
    ("dpgan", {"num_classes": 1}, "num_classes: must be an integer >= 2, got 1"),
    ("privae", {"epochs": 1.5}, "epochs: must be an integer, got 1.5"),
    ("privae", {"seed": -1}, "seed: must be in [0, 4294967295], got -1"),
    ("privae", {"learning_rate": "fast"}, "learning_rate: must be a number, got 'fast'"),
    ("privae", {"architecture": 3}, "architecture: must be a string, got 3"),
    ("dpgan", {"capacity": None}, "capacity: must be an integer, got None"),
    ("privae", {"learning_rate": -1.0}, "learning_rate: must be a positive finite number, got -1.0"),  # the schema's
])
def test_bad_settings_are_one_config_error(name, kwargs, message):
    kwargs = {"epsilon": 1.0, **kwargs}
    with pytest.raises(ConfigError) as err:
        tfpriv.synthesizer(name, **kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("name,settings,x,y,message", [
    ("privae", {}, np.zeros((10, 8, 8)), None, r"^x: a privae synthesizer takes \[N, features\] or images"),
    ("privae", {}, np.zeros((10, 4)), np.zeros(10, int), "^y: the privae synthesizer is unconditional"),
    ("dpgan", {}, np.zeros((10, 8, 8)), None, r"^x: a dpgan synthesizer takes images \[N, height, width, channels\] "
                                              r"\(any size, e.g. 28x28x1, 8x8x1 or 32x32x3\), got shape \[10, 8, 8\]$"),
    ("dpgan", {}, np.zeros((10, 28, 28, 1)), np.zeros(9, int), "^y: must be 10 integer labels"),
    # the job's own checks, in the synthesizer's terms (no command-line `--`)
    ("privae", {"batch_size": 64}, np.zeros((10, 4)), None, "^batch_size: must be between 1 and the dataset size 10"),
    ("dpwgan_gp", {"clipping": "fast"}, np.zeros((10, 28, 28, 1)), None, "^clipping: fast .* use per_example$"),
])
def test_bad_data_and_job_settings_are_one_error_at_fit(name, settings, x, y, message):
    s = tfpriv.synthesizer(name, epsilon=1.0, **settings)
    with pytest.raises(UsageError, match=message):
        s.fit(x, y)
    assert s.run_dir is None and s.results is None
    with pytest.raises(UsageError, match=r"^sample: the synthesizer is not trained yet; call fit\(x\) first$"):
        s.sample(1, seed=0)
    with pytest.raises(UsageError, match="^epsilon: the synthesizer is not trained yet"):
        s.epsilon  # noqa: B018


@pytest.mark.parametrize("name,x,y,bad", [
    ("privae", np.full((16, 4), 0.5, np.float32), None, "nan"),                             # tabular, gaussian
    ("privae", np.full((16, 8, 8, 1), 0.5, np.float32), None, "outside"),                   # images, bernoulli
    ("dpgan", np.full((16, 8, 8, 1), 0.5, np.float32), np.arange(16) % 4, "label"),        # conditional GAN
], ids=["tabular-nan", "images-outside", "gan-label"])
def test_one_record_outside_the_domain_is_dropped_not_a_refusal(name, x, y, bad):
    """Issue 46 item 4: one NaN, one value outside [0, 1] or one label out of range refused the whole
    data set (a refusal that depends on one record). It is dropped as make_private drops it."""
    x, y = x.copy(), None if y is None else y.copy()
    if bad == "nan":
        x[3].flat[0] = np.nan
    elif bad == "outside":
        x[3].flat[0] = 2.0
    else:
        y[3] = 4                                                                # = num_classes
    settings = {"capacity": 2, "latent_size": 4, "num_classes": 4} if y is not None else {"latent_dim": 2}
    s = tfpriv.synthesizer(name, epsilon=EPSILON, epochs=1, batch_size=16, seed=0, **settings).fit(x, y)  # q = 1
    # One step on all 16 records; PriVAE's termwise mode also drops the record's partition.
    assert [float(d) for d in _dropped(s.results)] == [2.0 if name == "privae" else 1.0] and s.epsilon <= EPSILON
    assert np.all(np.isfinite(s.sample(2, seed=0, **({"labels": [0, 1]} if y is not None else {}))))


def _dropped(results: dict) -> list:
    history = results["history"]
    return history["dropped"] if "dropped" in history else [h["dropped"] for h in history]


@pytest.mark.parametrize("name,shape", [("dpwgan_gp", (8, 8, 1)), ("dpwgan_gp", (32, 32, 3)), ("dpgan", (10, 6, 2))])
def test_the_gans_take_any_image_size(name, shape):
    """Issue 50 item 11: only 28x28x1 was accepted."""
    x = np.random.default_rng(0).random((8, *shape), dtype=np.float32)
    s = tfpriv.synthesizer(name, epsilon=EPSILON, epochs=1, batch_size=8, capacity=2, latent_size=4,
                           seed=0).fit(x)  # q = 1: one step, no subsampled Gaussian to calibrate
    samples = s.sample(3, seed=0)
    assert samples.shape == (3, *shape) and np.all((samples >= 0) & (samples <= 1))
