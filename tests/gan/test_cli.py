import json
import os

import numpy as np
import pytest
from absl import flags

from tfpriv.cli.job import read_settings
from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.gan import cli
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp

FLAGS = flags.FLAGS


@pytest.fixture(autouse=True)
def _parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


@pytest.mark.parametrize("model,overrides,message", [
    ("dpwgan_gp", {"capacity": 0}, "--capacity: must be >= 1, got 0"),
    ("dpgan", {"generator_capacity": 0}, "--generator_capacity: must be >= 1, got 0"),
    ("dpwgan_gp", {"diversity_weight": -1.0}, "--diversity_weight: must be a finite number >= 0 (0: off), got -1.0"),
    ("dpwgan_gp", {"diversity_weight": 1.0, "batch_size": 1}, "--batch_size: must be >= 2 with --diversity_weight"),
    ("dpwgan_gp", {"critic_steps": 0}, "--critic_steps: must be >= 1, got 0"),
    ("dpwgan_gp", {"gp_weight": -1.0}, "--gp_weight: must be a finite number >= 0, got -1.0"),
    ("dpgan", {"weight_clip": -1.0}, "--weight_clip: must be a finite number >= 0 (0: off), got -1.0"),
    ("dpgan", {"weight_clip": 0.0}, "--weight_clip: the Wasserstein critic needs weight clipping (> 0)"),
    ("dpgan", {"gan_loss": "hinge"}, "--gan_loss: must be one of wasserstein, logistic, got 'hinge'"),
    ("dpwgan_gp", {"gan_loss": "logistic"}, "--gan_loss: 'logistic' applies to --model=dpgan only"),
    ("dpgan", {"gan_optimizer": "sgd"}, "--gan_optimizer: must be one of rmsprop, adam, got 'sgd'"),
    ("dpwgan_gp", {"lr_schedule": "step"}, "--lr_schedule: must be constant or cosine, got 'step'"),
    ("dpwgan_gp", {"clipping": "fast"}, "--clipping: fast (ghost-norm) clipping is not exact"),
    ("dpwgan_gp", {"aggregation": "termwise"}, "--aggregation: must be micro (per-example clipping of the critic)"),
    ("dpwgan_gp", {"clipping": "vmap"}, "--clipping: must be one of auto, fast, vectorized, per_example, got 'vmap'"),
    ("dpwgan_gp", {"num_samples": 0}, "--num_samples: must be >= 10, got 0"),
    ("dpwgan_gp", {"dataset": "adult"}, "--dataset: must be one of mnist, fashion_mnist"),
    ("dpgan", {"epsilon": 3.0, "noise_multiplier": 1.0}, "--noise_multiplier: cannot be combined with --epsilon"),
    ("dpgan", {"aggregation": "none", "epsilon": 3.0}, "--epsilon: only applies to private training"),
])
def test_bad_settings_raise_one_line_usage_error_before_output(tmp_path, model, overrides, message):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as err:
        cli.run(read_settings(cli.JOB, FLAGS, model=model, **overrides), str(out))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not out.exists()


def test_seed_from_os_unless_given():
    run = cli.GanRun(read_settings(cli.JOB, FLAGS), "unused")
    run.validate()
    assert run.seed_from_os and run.sampling_seed() is None and 0 <= run.seed < 2**31
    run = cli.GanRun(read_settings(cli.JOB, FLAGS, seed=3), "unused")
    run.validate()
    assert (run.seed, run.sampling_seed(), run.seed_from_os) == (3, 3, False)


def test_classifier_training_shows_progress(tmp_path, capsys, monkeypatch):
    from tfpriv.metrics import eval_classifier
    calls = []
    monkeypatch.setattr(eval_classifier, "get_classifier", lambda *a, **k: calls.append((a, k)) or "model")
    cli._classifier(read_settings(cli.JOB, FLAGS, classifier_cache_dir=str(tmp_path), verbose=2))
    assert capsys.readouterr().out == ""  # the shipped classifier: nothing to train
    monkeypatch.setattr(eval_classifier, "SHIPPED_DIR", tmp_path / "not_installed")
    s = read_settings(cli.JOB, FLAGS, classifier_cache_dir=str(tmp_path), verbose=2)
    assert cli._classifier(s) == "model" and calls[-1][1]["verbose"] == 2 and calls[-1][0][0] == "mnist"
    assert "training the mnist evaluation classifier (8 epochs" in capsys.readouterr().out
    cli._classifier(read_settings(cli.JOB, FLAGS, classifier_cache_dir=str(tmp_path), verbose=0))
    assert capsys.readouterr().out == ""


def test_sample_writes_labelled_samples_from_a_saved_generator(tmp_path):
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
    model.generator(model._generator_in(model._latent(2), np.array([0, 1], np.int32)))
    save_generator(model, str(tmp_path / "run"), {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4,
                                                  "num_classes": 10})
    # train.py --mode=sample --output_dir=<the run> --num_samples=30
    info = cli.sample(read_settings(cli.JOB, FLAGS, num_samples=30), str(tmp_path / "run"))
    data = np.load(info["samples"])
    assert data["images"].shape == (30, 28, 28, 1) and data["labels"].shape == (30,)
    assert np.bincount(data["labels"], minlength=10).tolist() == [3] * 10  # balanced classes
    assert 0.0 <= data["images"].min() and data["images"].max() <= 1.0
    assert info["grid"].endswith("samples_grid.png") and os.path.getsize(info["grid"]) > 1000
    assert info["num_samples"] == 30 and info["conditional"]


def test_sample_without_generator_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"^--generator_path: no generator at"):
        cli.sample(read_settings(cli.JOB, FLAGS, generator_path=str(tmp_path / "nothing")), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_results_have_the_common_keys(tmp_path, data_dir):
    """A tiny non-scored DPGAN run: results.json with the keys every family writes."""
    out = tmp_path / "run"
    s = read_settings(cli.JOB, FLAGS, model="dpgan", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      latent_size=4, batch_size=500, epochs=2, max_steps=3, eval_every=0, num_samples=20, seed=0,
                      verbose=0)
    res = cli.run(s, str(out))
    stored = json.load(open(out / "results.json"))
    assert stored["epochs"] == res["epochs"] == 1 and stored["planned_epochs"] == 2  # stopped by --max_steps
    assert stored["limit_reached"] and stored["steps"] == stored["training"]["critic_steps"] == 3
    assert len(stored["segments"]) == 1 and stored["segments"][0]["steps"] == 3
    assert stored["gan"]["seed"] == 0 and stored["privacy"]["aggregation"] == "micro"
    assert (out / "privacy_plan.json").is_file() and (out / "logs").is_dir() and (out / "generator.keras").is_file()


def test_cosine_schedule_decays_each_optimizer_over_its_own_updates(data_dir):
    """The critic updates every step, the generator every critic_steps-th: both reach 0 at the planned end."""
    s = read_settings(cli.JOB, FLAGS, model="dpwgan_gp", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      latent_size=4, batch_size=600, epochs=3, critic_steps=2, lr_schedule="cosine",
                      learning_rate=1e-3, generator_ema=0.9, seed=0)
    run = cli.GanRun(s, "unused")
    run.validate()
    d_opt, g_opt = run.build(run.load()).optimizer
    for optimizer, updates in ((d_opt, 3 * 100), (g_opt, 3 * 100 // 2)):  # 3 epochs of 60,000 / 600 critic steps
        schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
        assert float(schedule(0)) == pytest.approx(1e-3)
        assert float(schedule(updates // 2)) == pytest.approx(5e-4, rel=1e-4)
        assert float(schedule(updates)) == pytest.approx(0.0, abs=1e-12)
    assert g_opt.use_ema and not d_opt.use_ema


def test_generator_capacity_and_diversity_weight_reach_the_run_and_are_recorded(tmp_path, data_dir):
    out = tmp_path / "run"
    s = read_settings(cli.JOB, FLAGS, model="dpwgan_gp", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      generator_capacity=3, diversity_weight=0.5, latent_size=4, batch_size=500, epochs=1, max_steps=2, eval_every=0,
                      num_samples=20, seed=0, verbose=0)
    cli.run(s, str(out))
    stored = json.load(open(out / "results.json"))
    assert stored["gan"]["capacity"] == 2 and stored["gan"]["generator_capacity"] == 3
    assert stored["gan"]["diversity_weight"] == 0.5 and stored["history"]["g_diversity"][-1] > 0
    assert json.load(open(out / "gan.json"))["generator_capacity"] == 3
    generator = keras.models.load_model(out / "generator.keras", compile=False)
    assert generator.get_layer("deconv2").filters == 3


def test_optimizer_defaults_per_model():
    assert read_settings(cli.JOB, FLAGS, model="dpwgan_gp").gan_optimizer == "adam"
    assert read_settings(cli.JOB, FLAGS, model="dpgan").gan_optimizer == "rmsprop"


def test_public_scores_come_from_the_classifier_fitted_on_the_test_split(tmp_path, data_dir, monkeypatch):
    """--public_scores (every --tune trial): IS, FD and label agreement again, by the evaluation
    network fitted on the test split (the default one is fitted on the GAN's private training images)."""
    from tfpriv.metrics import eval_classifier
    fitted = {}

    def get_classifier(dataset, data_dir, cache_dir=None, verbose=0, split="train"):
        keras.utils.set_random_seed(len(fitted))
        fitted[split] = eval_classifier.build_classifier()  # untrained stand-ins: two different networks
        return fitted[split]

    monkeypatch.setattr(eval_classifier, "get_classifier", get_classifier)
    out = tmp_path / "run"
    s = read_settings(cli.JOB, FLAGS, model="dpgan", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      latent_size=4, batch_size=500, epochs=1, max_steps=1, eval_every=0, num_samples=20, seed=0,
                      verbose=0, public_scores=True, classifier_cache_dir=str(tmp_path / "cache"))
    cli.run(s, str(out))
    metrics = json.load(open(out / "results.json"))["metrics"]
    assert sorted(fitted) == ["test", "train"]
    assert {"inception_score_public", "frechet_distance_public"} <= set(metrics)
    assert metrics["inception_score_public"] != metrics["inception_score"]
