"""Tuning a user's own make_private model (issue 50.14): a random number of trials, the job's
epsilon by Papernot & Steinke for the space's least private configuration, the best trial alone
released, objectives that read private data refused."""
import json
import os

import numpy as np
import pytest

import tfpriv
from tests.privacy.reference import repeat_and_select_epsilon
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import training_event
from tfpriv.privacy.tuning import TrialCount
from tfpriv.tuning.private_tuner import PrivateTuner

N, Z, DELTA = 128, 1.2, 1e-3
SPACE = {"learning_rate": {"type": "float", "min": 1e-2, "max": 3e-1, "log": True},
         "batch_size": {"type": "choice", "values": [16, 32]}}


def data(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 6)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


def build_model(hp):
    model = keras.Sequential([keras.layers.Input([6]), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=Z)
    private = tfpriv.make_private(model, loss, config, num_examples=N, batch_size=hp.Choice("batch_size", [16, 32]),
                                  delta=DELTA)
    private.compile(keras.optimizers.SGD(hp.get("learning_rate")), metrics=["accuracy"])
    return private


def test_the_job_releases_the_best_trial_at_the_jobs_epsilon(tmp_path):
    count = TrialCount("geometric", 2.0)
    tuner = PrivateTuner(build_model, SPACE, objective="accuracy", score_data=data(1), trials=count, seed=5)
    released = tuner.search(*data(0), str(tmp_path), epochs=1, verbose=0)
    assert sorted(os.listdir(tmp_path)) == ["best", "private", "tuning.json"]
    assert sorted(os.listdir(tmp_path / "best")) == ["model.keras", "results.json"]
    private = json.loads((tmp_path / "private" / "tuning.json").read_text())
    assert private["trials_drawn"] == count.sample(np.random.default_rng(5)) == len(private["trials"]) == 2
    assert released["best"]["objective"] == max(t["objective"] for t in private["trials"])
    events = [training_event([(b / N, Z, round(N / b))]) for b in (16, 32)]  # one epoch of Poisson steps
    assert released["privacy"]["epsilon"] == pytest.approx(
        max(repeat_and_select_epsilon(e, count, DELTA) for e in events), rel=1e-6)
    assert "trials_run" not in released["privacy"]  # K stays private
    best = keras.models.load_model(tmp_path / "best" / "model.keras")
    x, y = data(1)
    accuracy = float(np.mean(np.argmax(best(x).numpy(), axis=1) == y))
    assert accuracy == pytest.approx(released["best"]["objective"], abs=1e-6)


@pytest.mark.parametrize("change,param", [
    (dict(objective="val_accuracy"), "objective: val_accuracy is measured on validation data"),
    (dict(reads="private"), "reads:"),
    (dict(space={**SPACE, "batch_size": {"type": "int", "min": 16, "max": 32}}), "space.batch_size"),
    (dict(space={"learning_rate": SPACE["learning_rate"]}), "space: build_model declares batch_size"),
], ids=["val_metric", "private_score_data", "range_that_changes_privacy", "undeclared_hyperparameter"])
def test_what_the_job_cannot_account_is_refused_before_any_trial(tmp_path, change, param):
    with pytest.raises(ConfigError, match="^" + param):
        PrivateTuner(**{"build_model": build_model, "space": SPACE, "objective": "accuracy",
                        "score_data": data(1), **change}).search(*data(0), str(tmp_path / "out"), verbose=0)
    assert not (tmp_path / "out").exists()


def test_a_range_that_changes_the_models_privacy_is_refused(tmp_path):
    """The learning rate may be a range because it never changes a trial's DpEvent; a build function
    that makes it change the noise is caught by planning both ends of the range."""
    def noisy_build(hp):
        model = keras.Sequential([keras.layers.Input([6]), keras.layers.Dense(2)])
        config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=10 * hp.get("learning_rate"))
        private = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), config,
                                      num_examples=N, batch_size=hp.Choice("batch_size", [16, 32]), delta=DELTA)
        private.compile("sgd")
        return private

    with pytest.raises(ConfigError, match="^space.learning_rate: changes a trial's privacy"):
        PrivateTuner(noisy_build, SPACE, objective="accuracy", score_data=data(1)).search(*data(0), str(tmp_path))
    with pytest.raises(ConfigError, match="^seed: each trial draws its own"):
        PrivateTuner(build_model, SPACE, objective="accuracy", score_data=data(1)).search(*data(0), str(tmp_path),
                                                                                          seed=0)
    assert not os.listdir(tmp_path)


def test_an_objective_the_model_does_not_return_stops_the_job_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="^objective: auc needs the metrics auc"):
        PrivateTuner(build_model, SPACE, objective="auc", score_data=data(1), trials=TrialCount("geometric", 1.0)
                     ).search(*data(0), str(tmp_path), verbose=0)
    assert not (tmp_path / "tuning.json").exists() and not (tmp_path / "best").exists()
