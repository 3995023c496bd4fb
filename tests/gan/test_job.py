import contextlib
import io
import json
import os

import numpy as np
import pytest

from tests.gan.helpers import small_test_split
from tests.test_release_list import tiny_classifier
from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.gan import job as gan_job
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp




@pytest.mark.parametrize("model,overrides,message", [
    ("dpwgan_gp", {"capacity": 0}, "--capacity: must be >= 1, got 0"),
    ("dpgan", {"generator_capacity": 0}, "--generator_capacity: must be >= 1, got 0"),
    ("dpwgan_gp", {"diversity_weight": -1.0}, "--diversity_weight: must be a finite number >= 0 (0: off), got -1.0"),
    ("dpwgan_gp", {"diversity_weight": 1.0, "batch_size": 1}, "--batch_size: must be >= 2 with --diversity_weight"),
    ("dpgan", {"saturation_bound": -1.0}, "--saturation_bound: must be a finite number >= 0 (0: off), got -1.0"),
    ("dpwgan_gp", {"noise_multiplicity": 0}, "--noise_multiplicity: must be >= 1 (1: one fake per example), got 0"),
    ("dpgan", {"noise_multiplicity": 2}, "--noise_multiplicity: an example's loss spans its K fakes"),
    ("dpwgan_gp", {"critic_steps": 0}, "--critic_steps: must be >= 1, got 0"),
    ("dpwgan_gp", {"gp_weight": -1.0}, "--gp_weight: must be a finite number >= 0, got -1.0"),
    ("dpgan", {"weight_clip": -1.0}, "--weight_clip: must be a finite number >= 0 (0: off), got -1.0"),
    ("dpgan", {"weight_clip": 0.0}, "--weight_clip: the Wasserstein critic needs weight clipping (> 0)"),
    ("dpgan", {"gan_loss": "hinge"}, "--gan_loss: must be one of wasserstein, logistic, got 'hinge'"),
    ("dpwgan_gp", {"gan_loss": "logistic"}, "--gan_loss: 'logistic' applies to --model=dpgan only"),
    ("dpgan", {"gan_optimizer": "sgd"}, "--gan_optimizer: must be one of rmsprop, adam, got 'sgd'"),
    ("dpwgan_gp", {"lr_schedule": "step"}, "--lr_schedule: must be one of constant, cosine, got 'step'"),
    ("dpwgan_gp", {"clipping": "fast"}, "--clipping: fast (ghost-norm) clipping is not exact"),
    ("dpwgan_gp", {"aggregation": "termwise"}, "--aggregation: must be micro (per-example clipping of the critic)"),
    ("dpwgan_gp", {"clipping": "vmap"}, "--clipping: must be one of auto, fast, vectorized, per_example, got 'vmap'"),
    ("dpwgan_gp", {"num_samples": 0}, "--num_samples: must be >= 1, got 0"),
    ("dpwgan_gp", {"num_samples": 5}, "--num_samples: must be >= 10 (the final scores), got 5"),
    ("dpwgan_gp", {"dataset": "adult"}, "--dataset: must be one of mnist, fashion_mnist"),
    ("dpgan", {"epsilon": 3.0, "noise_multiplier": 1.0}, "--noise_multiplier: cannot be combined with --epsilon"),
    ("dpgan", {"aggregation": "none", "epsilon": 3.0}, "--epsilon: only applies to private training"),
    ("dpgan", {"eval_protocol": "fid"}, "--eval_protocol: must be one of tfpriv, dpimagebench, got 'fid'"),
    ("dpgan", {"eval_protocol": "dpimagebench"}, "--eval_protocol: dpimagebench trains classifiers on labelled samples "
                                                 "and needs --conditional"),
    ("dpgan", {"selection_epsilon": 1.0}, "--selection_epsilon: only applies to --eval_protocol=dpimagebench"),
    ("dpgan", {"classifier_depth": 20}, "--classifier_depth: only applies to --eval_protocol=dpimagebench"),
    ("dpgan", {"eval_protocol": "dpimagebench", "conditional": True, "selection_epsilon": 0.0},
     "--selection_epsilon: must be a positive finite number, got 0.0"),
    ("dpgan", {"eval_protocol": "dpimagebench", "conditional": True, "downstream_samples": 11},
     "--downstream_samples: must be >= 12 with --eval_protocol=dpimagebench, got 11"),
    ("dpwgan_gp", {"warm_start_epsilon": -0.1}, "--warm_start_epsilon: must be a finite number >= 0 (0: off)"),
    ("dpwgan_gp", {"warm_start_epsilon": 0.1, "aggregation": "none"},
     "--warm_start_epsilon: must be 0 without privacy (--aggregation=none), got 0.1"),
    ("dpwgan_gp", {"warm_start_epsilon": 1.0, "epsilon": 1.0},
     "--warm_start_epsilon: must be below --epsilon=1 (it is part of it), got 1.0"),
    ("dpwgan_gp", {"warm_start_steps": 0}, "--warm_start_steps: must be >= 1, got 0"),
])
def test_bad_settings_raise_one_line_usage_error_before_output(tmp_path, model, overrides, message):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as err:
        gan_job.run(gan_job.JOB.settings(model=model, **overrides), str(out))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not out.exists()


def test_seed_from_os_unless_given():
    run = gan_job.GanRun(gan_job.JOB.settings(), "unused")
    run.validate()
    assert run.seed_from_os and run.sampling_seed() is None and 0 <= run.seed < 2**31
    run = gan_job.GanRun(gan_job.JOB.settings(seed=3), "unused")
    run.validate()
    assert (run.seed, run.sampling_seed(), run.seed_from_os) == (3, 3, False)


def test_classifier_training_shows_progress(tmp_path, capsys, monkeypatch):
    from tfpriv.metrics import eval_classifier
    calls = []
    monkeypatch.setattr(eval_classifier, "get_classifier", lambda *a, **k: calls.append((a, k)) or "model")
    gan_job._classifier(gan_job.JOB.settings(classifier_cache_dir=str(tmp_path), verbose=2))
    assert capsys.readouterr().out == ""  # the shipped classifier: nothing to train
    monkeypatch.setattr(eval_classifier, "SHIPPED_DIR", tmp_path / "not_installed")
    s = gan_job.JOB.settings(classifier_cache_dir=str(tmp_path), verbose=2)
    assert gan_job._classifier(s) == "model" and calls[-1][1]["verbose"] == 2 and calls[-1][0][0] == "mnist"
    assert "training the mnist evaluation classifier (8 epochs" in capsys.readouterr().out
    gan_job._classifier(gan_job.JOB.settings(classifier_cache_dir=str(tmp_path), verbose=0))
    assert capsys.readouterr().out == ""


def test_sample_writes_labelled_samples_from_a_saved_generator(tmp_path):
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
    model.generator(model._generator_in(model._latent(2), np.array([0, 1], np.int32)))
    save_generator(model, str(tmp_path / "run"), {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4,
                                                  "num_classes": 10})
    # train.py --mode=sample --output_dir=<the run> --num_samples=30
    info = gan_job.sample(gan_job.JOB.settings(num_samples=30), str(tmp_path / "run"))
    data = np.load(info["samples"])
    assert data["images"].shape == (30, 28, 28, 1) and data["labels"].shape == (30,)
    assert np.bincount(data["labels"], minlength=10).tolist() == [3] * 10  # balanced classes
    assert 0.0 <= data["images"].min() and data["images"].max() <= 1.0
    assert info["grid"].endswith("samples_grid.png") and os.path.getsize(info["grid"]) > 1000
    assert info["num_samples"] == 30 and info["conditional"]


def test_sample_without_generator_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"^--generator_path: no generator at"):
        gan_job.sample(gan_job.JOB.settings(generator_path=str(tmp_path / "nothing")), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory, data_dir):
    """A tiny seeded DPGAN run stopped by --max_steps, with --public_scores and a warm start, read by the
    tests of its keys, its public scores and its release: (run folder, run's return, what it printed, the splits evaluation
    classifiers were fitted on). The classifiers are untrained stand-ins (two different networks:
    their scores differ), and they score the first 500 test images (reference features, real IS)."""
    from tfpriv.metrics import eval_classifier
    fitted = {}

    def get_classifier(dataset, data_dir, cache_dir=None, verbose=0, split="train"):
        keras.utils.set_random_seed(len(fitted))
        fitted[split] = eval_classifier.build_classifier()
        return fitted[split]

    out = tmp_path_factory.mktemp("scored") / "run"
    s = gan_job.JOB.settings(model="dpgan", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                             latent_size=4, batch_size=500, epochs=2, max_steps=3, eval_every=0, num_samples=20,
                             seed=0, verbose=0, public_scores=True, classifier_cache_dir=str(out.parent / "cache"),
                             warm_start_epsilon=0.3, warm_start_steps=3)
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
        patch.setattr(eval_classifier, "get_classifier", get_classifier)
        small_test_split(patch)
        res = gan_job.run(s, str(out))
    return out, res, printed.getvalue(), sorted(fitted)


def test_results_have_the_common_keys(scored_run):
    """A tiny DPGAN run (`scored_run`): results.json with the keys every family writes."""
    out, res, printed, _ = scored_run
    stop_lines = [line for line in printed.splitlines() if line.startswith("stopped at")]
    assert stop_lines == ["stopped at --max_steps=3: 3 of 240 planned critic steps; epsilon covers the steps taken"]
    stored = json.load(open(out / "results.json"))
    assert stored["epochs"] == res["epochs"] == 1 and stored["planned_epochs"] == 2  # stopped by --max_steps
    assert stored["limit_reached"] and stored["steps"] == stored["training"]["critic_steps"] == 3
    assert len(stored["segments"]) == 1 and stored["segments"][0]["steps"] == 3
    assert stored["gan"]["seed"] == 0 and stored["privacy"]["aggregation"] == "micro"
    assert (out / "privacy_plan.json").is_file() and (out / "logs").is_dir() and (out / "generator.keras").is_file()


def test_cosine_schedule_decays_each_optimizer_over_its_own_updates(data_dir):
    """The critic updates every step, the generator every critic_steps-th: both reach 0 at the planned end."""
    s = gan_job.JOB.settings(model="dpwgan_gp", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      latent_size=4, batch_size=600, epochs=3, critic_steps=2, lr_schedule="cosine",
                      learning_rate=1e-3, generator_ema=0.9, seed=0)
    run = gan_job.GanRun(s, "unused")
    run.validate()
    d_opt, g_opt = run.build(run.load()).optimizer
    for optimizer, updates in ((d_opt, 3 * 100), (g_opt, 3 * 100 // 2)):  # 3 epochs of 60,000 / 600 critic steps
        schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
        assert float(schedule(0)) == pytest.approx(1e-3)
        assert float(schedule(updates // 2)) == pytest.approx(5e-4, rel=1e-4)
        assert float(schedule(updates)) == pytest.approx(0.0, abs=1e-12)
    assert g_opt.use_ema and not d_opt.use_ema


def test_generator_and_critic_loss_settings_reach_the_run_and_are_recorded(tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(gan_job, "_classifier", lambda s: tiny_classifier())  # scores not checked: a stand-in
    out = tmp_path / "run"
    s = gan_job.JOB.settings(model="dpwgan_gp", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                      generator_capacity=3, diversity_weight=0.5, saturation_bound=0.05, noise_multiplicity=2,
                      latent_size=4, batch_size=500, per_example_chunk=200,
                      epochs=1, max_steps=2, eval_every=0,
                      num_samples=20, seed=0, verbose=0)
    gan_job.run(s, str(out))
    stored = json.load(open(out / "results.json"))
    assert stored["gan"]["capacity"] == 2 and stored["gan"]["generator_capacity"] == 3
    assert stored["gan"]["diversity_weight"] == 0.5 and stored["history"]["g_diversity"][-1] > 0
    assert stored["gan"]["saturation_bound"] == 0.05 and stored["history"]["g_saturation"][-1] > 0
    assert stored["gan"]["noise_multiplicity"] == 2 and stored["steps"] == 2
    assert stored["gan"]["per_example_chunk"] == 200 and s.dp_config().per_example_chunk == 200
    assert json.load(open(out / "gan.json"))["generator_capacity"] == 3
    generator = keras.models.load_model(out / "generator.keras", compile=False)
    assert generator.get_layer("deconv2").filters == 3


def test_optimizer_defaults_per_model():
    assert gan_job.JOB.settings(model="dpwgan_gp").gan_optimizer == "adam"
    assert gan_job.JOB.settings(model="dpgan").gan_optimizer == "rmsprop"


def test_public_scores_come_from_the_classifier_fitted_on_the_test_split(scored_run):
    """--public_scores (every --tune trial; `scored_run`): IS, FD and label agreement again, by the
    evaluation network fitted on the test split (the default one is fitted on the GAN's private
    training images)."""
    out, _, _, fitted = scored_run
    metrics = json.load(open(out / "results.json"))["metrics"]
    assert fitted == ["test", "train"]
    assert {"inception_score_public", "frechet_distance_public"} <= set(metrics)
    assert metrics["inception_score_public"] != metrics["inception_score"]


def test_dpimagebench_protocol_holds_the_validation_split_out_of_the_gans_data(data_dir):
    """The GAN trains on the 55,000 examples outside the private validation split, and its plan
    (what the accountant composes) has N = 55,000; the default protocol keeps all 60,000."""
    from tfpriv.data import load_dataset
    from tfpriv.metrics import dpimagebench
    full = load_dataset("fashion_mnist", str(data_dir))
    train, val = dpimagebench.validation_split(60000)
    common = dict(model="dpgan", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2, latent_size=4,
                  batch_size=500, conditional=True, seed=0)
    run = gan_job.GanRun(gan_job.JOB.settings(eval_protocol="dpimagebench", **common), "unused")
    plan = run.setup()
    images, labels = run.built.arrays
    assert plan.num_examples == len(images) == 55000 and plan.sampling_rate == pytest.approx(500 / 55000)
    assert np.array_equal(images, full.x_train[train]) and np.array_equal(labels, full.labels_train["label"][train])
    assert np.array_equal(run.validation[0], full.x_train[val]) and not set(train) & set(val)
    default = gan_job.GanRun(gan_job.JOB.settings(**common), "unused")
    assert default.setup().num_examples == 60000 and default.validation is None


def test_downstream_epochs_default_follows_the_protocol():
    assert gan_job.JOB.settings(model="dpgan").downstream_epochs == 3
    s = gan_job.JOB.settings(model="dpgan", eval_protocol="dpimagebench", conditional=True)
    assert s.downstream_epochs == 50 and s.classifier_depth == 110 and s.selection_epsilon is None


def test_a_dpimagebench_run_records_the_protocol_and_adds_the_selections_epsilon(tmp_path, data_dir, capsys,
                                                                                 monkeypatch):
    """A tiny seeded run under --eval_protocol=dpimagebench: N = 55,000 in the accounted epsilon, the
    evaluation record with the selection's noise (from the OS, not the seed) and epsilon added, every
    output in the release list; the same command again selects again and its epsilon adds up in the
    run's checkpoint; resuming the folder under the other protocol is refused (exit 2) before training."""
    from tests.cli.helpers import assert_one_line_error, train_py
    from tests.test_release_list import release_table, tiny_classifier, written
    from tfpriv.metrics import dpimagebench
    from tfpriv.privacy.accounting import RDP
    from tfpriv.training.runner import read_selection_epsilon
    monkeypatch.setattr(gan_job, "_classifier", lambda s: tiny_classifier())
    states = []

    class Recording(dpimagebench.NoisySelection):
        def __init__(self, selection_epsilon, rng):
            super().__init__(selection_epsilon, rng)
            states.append(rng.bit_generator.state)

    monkeypatch.setattr(dpimagebench, "NoisySelection", Recording)
    small_test_split(monkeypatch)  # the first 500 test images are scored (the validation split stays whole)
    out = tmp_path / "run"
    common = ["--model=dpgan", "--dataset=fashion_mnist", f"--data_dir={data_dir}", "--capacity=2", "--latent_size=4",
              "--batch_size=500", "--epochs=1", "--eval_every=0", "--num_samples=20", "--conditional",
              "--downstream_samples=48", "--downstream_epochs=1", f"--output_dir={out}", "--verbose=0", "--seed=5"]
    protocol = ["--max_steps=2", "--eval_protocol=dpimagebench", "--classifier_depth=8", "--selection_epsilon=0.3"]
    proc = train_py(*common, *protocol, capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stored = json.load(open(out / "results.json"))
    assert stored["num_examples"] == 55000 and stored["sampling_rate"] == pytest.approx(500 / 55000)
    accounted = RDP.epsilon([(stored["sampling_rate"], stored["effective_noise_multiplier"], stored["steps"])],
                            stored["delta"])
    assert stored["epsilon"] == pytest.approx(accounted)
    ev = stored["evaluation"]
    assert ev["protocol"] == "dpimagebench" and ev["validation_split"] == {"examples": 5000, "seed": 0,
                                                                          "held_out": True}
    assert ev["selection"]["mode"] == "private_validation" and ev["selection"]["validation_examples"] == 5000
    assert ev["selection"]["noise_std"] == pytest.approx(np.sqrt(2) / 0.3)
    assert ev["epsilon_training"] == stored["epsilon"] and ev["epsilon_selection"] == pytest.approx(0.3)
    assert ev["epsilon_total"] == pytest.approx(stored["epsilon"] + 0.3) and ev["delta"] == stored["delta"]
    assert states and states[0] != np.random.default_rng(5 + 4).bit_generator.state  # before: seeded by --seed + 4
    assert ev["selection"]["noise_source"] == "OS entropy, never recorded"
    assert read_selection_epsilon(str(out)) == pytest.approx(0.3)
    assert list(ev["classifiers"]) == ["resnet"] and ev["classifiers"]["resnet"]["train_examples"] == 44
    assert stored["metrics"]["dpimagebench_accuracy"] == ev["accuracy"]
    assert "downstream_accuracy" not in stored["metrics"] and "Inception-V3" in ev["fidelity"]
    assert f"= {stored['epsilon'] + 0.3:.4g} at delta" in proc.stdout
    missing = sorted(o for o in written(out) if o not in release_table()["dpgan"])
    assert not missing, missing
    again = train_py(*common, *protocol, capsys=capsys)  # trains no further step, selects again on the split
    assert again.returncode == 0, again.stderr[-3000:]
    ev = json.load(open(out / "results.json"))["evaluation"]
    assert ev["epsilon_selection"] == pytest.approx(0.6) == read_selection_epsilon(str(out))  # before: 0.3 again
    assert ev["epsilon_total"] == pytest.approx(stored["epsilon"] + 0.6)
    before = (out / "results.json").read_text()
    proc = train_py(*common, "--max_steps=4", capsys=capsys)
    assert_one_line_error(proc, "--eval_protocol")
    assert "trained on 55000 examples, this one would train on 60000" in proc.stderr
    assert (out / "results.json").read_text() == before


def test_a_warm_started_run_accounts_its_release_and_a_resume_cannot_change_it(scored_run, data_dir):
    """#47.8 through the job (`scored_run`): the class means' release is the ledger's first row, at the
    noise of --warm_start_epsilon alone, and the run's epsilon composes it with the critic's steps;
    resuming the folder with another --warm_start_epsilon is refused naming the flag, before anything runs."""
    from tfpriv.errors import ConfigError
    from tfpriv.privacy.accounting import RDP
    out, res, _, _ = scored_run
    release, steps = res["ledger"]
    assert release["scheme"] == "release" and release["name"] == "class_means" and release["steps"] == 0
    assert RDP.epsilon([tuple(release["accounted_as"])], res["delta"]) == pytest.approx(0.3, rel=1e-3)
    composed = [tuple(release["accounted_as"]), tuple(steps["accounted_as"])]
    assert res["epsilon"] == pytest.approx(RDP.epsilon(composed, res["delta"]))
    assert res["steps"] == steps["steps"] == 3 and res["releases"][0]["made"]
    before = sorted(p.name for p in out.iterdir())
    settings = json.load(open(out / "results.json"))["gan"]
    with pytest.raises(ConfigError, match="^releases: the ledger holds 'class_means' at noise multiplier") as err:
        gan_job.run(gan_job.JOB.settings(model="dpgan", dataset="fashion_mnist", data_dir=str(data_dir), capacity=2,
                                         latent_size=4, batch_size=500, epochs=2, seed=0, verbose=0,
                                         warm_start_epsilon=0.2), str(out))
    assert gan_job.JOB.flag_for(err.value.param) == "warm_start_epsilon"
    assert sorted(p.name for p in out.iterdir()) == before and settings["warm_start_epsilon"] == 0.3
