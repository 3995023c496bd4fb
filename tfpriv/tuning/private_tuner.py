"""Tuning your own `make_private` model with keras-tuner, with the guarantees of `train.py --tune`.

`PrivateTuner(build_model, space, objective, score_data)` is keras-tuner's random search over
`build_model(hp) -> compiled make_private model`, run as a `tfpriv.tuning.tuner.TuningJob`: the
number of trials K is drawn (a `TrialCount`; a fixed count is not covered), each trial's DpEvent is
planned from the model `build_model` returns (its sampling rate, noise multiplier and the steps
`fit` takes), the job's ε is Papernot & Steinke's bound over the space's least private
configuration, and only the best trial is released (`best/`: its model and record; `tuning.json`);
K, every trial and what they print stay in `private/`.

The score that chooses is a compiled metric of the trained model on `score_data`, data outside the
private training set that may be published (`reads="test"` or `"public"`). A `val_*` metric is
refused: validation data held out of the private training set is private data that ε does not
cover, so choosing by it would release it.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

import dp_accounting
import keras_tuner as kt

from tfpriv.data.sampling import sampling_rate_and_steps
from tfpriv.errors import ConfigError
from tfpriv.files import write_json
from tfpriv.privacy.accounting import training_event
from tfpriv.privacy.tuning import TrialCount
from tfpriv.run_folder import RESULTS_FILE
from tfpriv.training.dp_model import DPTraining
from tfpriv.tuning.space import NEUTRAL_KEYS, Objective, privacy_configurations
from tfpriv.tuning.tuner import TuningJob, define

MODEL_FILE = "model.keras"  # the trained Keras model of a trial (`keras.models.load_model`)


@dataclasses.dataclass
class PrivateTuner:
    """Random search over `space` for the model `build_model(hp)` returns, accounted as one job.

    `build_model(hp)` returns a compiled `make_private` model; `hp` holds the trial's values of
    `space` (the format of `--search_space`: only `NEUTRAL_KEYS`, which never change a trial's
    privacy, may be ranges; declaring a name outside `space` is refused). `objective` names a
    metric `evaluate` returns on `score_data` = (x, y), declared `reads="test"` or `"public"`.

    Example:
        >>> tuner = PrivateTuner(build_model, space, objective="accuracy", score_data=(x_test, y_test),
        ...                      trials=TrialCount("geometric", 3))                # doctest: +SKIP
        >>> result = tuner.search(x_train, y_train, "runs/tune_own", epochs=2)    # doctest: +SKIP
        >>> result["privacy"]["epsilon"], result["best"]["values"]               # doctest: +SKIP
    """

    build_model: Callable[[kt.HyperParameters], Any]
    space: Mapping[str, Mapping]
    objective: str
    score_data: tuple
    direction: str = "max"
    reads: str = "test"
    trials: TrialCount = dataclasses.field(default_factory=lambda: TrialCount("geometric", 5))
    max_trials: int | None = None
    seed: int | None = None  # K and the trials' values; each trial's batches and noise: OS entropy

    def __post_init__(self):
        if self.objective.startswith("val_"):
            raise ConfigError(f"objective: {self.objective} is measured on validation data, which is held out of "
                              "the private training set and is private (epsilon does not cover it); choose by a "
                              "metric on data you may publish: score_data=(x, y) and objective='<metric>'")
        if self.reads not in ("test", "public"):
            raise ConfigError(f"reads: score_data must be data outside the private training set that may be "
                              f"published ('test' or 'public'), got {self.reads!r}")
        if not (isinstance(self.score_data, tuple) and len(self.score_data) == 2):
            raise ConfigError("score_data: give (x, y), held out of the private training set")

    def search(self, x, y, output_dir: str, epochs: int = 1, **fit_kwargs) -> dict:
        """Runs the job on the private (x, y): each trial fits the model for `epochs` (`fit_kwargs`
        go to `fit`), scores it on `score_data`, saves it to `private/trials/<id>/model.keras`.
        Returns the released record (`OUTPUT_DIR/tuning.json`); the best model is
        `OUTPUT_DIR/best/model.keras`."""
        events: dict[str, dp_accounting.DpEvent] = {}
        deltas: set[float] = set()
        steps_per_epoch = fit_kwargs.get("steps_per_epoch")

        def event(values: dict) -> dp_accounting.DpEvent:
            key = repr(sorted(values.items()))
            if key not in events:
                model = self._build(values)
                if not model.dp_config.private:
                    events[key] = dp_accounting.NonPrivateDpEvent()
                else:
                    deltas.add(model.delta)
                    per_epoch = steps_per_epoch or sampling_rate_and_steps(
                        model.num_examples, int(round(model.dp_config.expected_batch_size)), "poisson")[1]
                    events[key] = training_event([(model.sampling_rate, model.effective_noise_multiplier,
                                                   epochs * per_epoch)])
            return events[key]

        def trial(values: dict, trial_dir: str) -> dict:
            model = self._build(values)
            model.fit(x, y, epochs=epochs, **fit_kwargs)
            # An objective `evaluate` does not return stops the job at the first trial (ConfigError, `objective`).
            scores = model.evaluate(*self.score_data, verbose=0, return_dict=True)
            os.makedirs(trial_dir, exist_ok=True)
            model.save(os.path.join(trial_dir, MODEL_FILE))
            results = {"values": values, "epsilon": model.epsilon(), "delta": model.delta,
                       "sampling_rate": model.sampling_rate, "noise_multiplier": model.effective_noise_multiplier,
                       "steps": int(model.ledger.total_steps), "epochs": epochs, "score_data": self.reads,
                       "metrics": {k: float(v) for k, v in scores.items()}}
            write_json(os.path.join(trial_dir, RESULTS_FILE), results)
            return results

        if "seed" in fit_kwargs:
            raise ConfigError("seed: each trial draws its own batches and noise (independent trials, as the bound "
                              "requires); give PrivateTuner(seed=...) for the trial count and values instead")
        job = TuningJob(trial, event, self.space, Objective(self.objective, self.direction, reads=self.reads),
                        trials=self.trials, seed=self.seed, max_trials=self.max_trials)  # checks the space
        self._check_neutral(event)
        for config in privacy_configurations(self.space, NEUTRAL_KEYS):
            event(config)
        if len(deltas) > 1:
            raise ConfigError(f"build_model: every trial must have the same delta, got {sorted(deltas)}")
        job.delta = deltas.pop() if deltas else job.delta
        job.privacy(1)  # a cap that does not fit in delta is refused before any trial
        return job.run(output_dir)

    def _build(self, values: dict) -> DPTraining:
        """`build_model` on a HyperParameters holding `values` (and only the space's names)."""
        hp = kt.HyperParameters()
        define(hp, self.space)
        hp.values.update(values)
        model = self.build_model(hp)
        extra = sorted(set(hp.values) - set(self.space))
        if extra:
            raise ConfigError(f"space: build_model declares {', '.join(extra)}, which the space does not; declare "
                              "every hyperparameter in space (the job's epsilon is planned from it)")
        if not (isinstance(model, DPTraining) and model.dp_config is not None):
            raise ConfigError(f"build_model: must return a compiled make_private model, got {type(model).__name__}")
        return model

    def _check_neutral(self, event: Callable[[dict], dp_accounting.DpEvent]) -> None:
        """Refuses a range that changes a trial's DpEvent (a name of `NEUTRAL_KEYS` the model uses otherwise)."""
        for config in privacy_configurations(self.space, NEUTRAL_KEYS):
            for name, spec in self.space.items():
                if spec.get("type") in ("float", "int"):
                    low, high = ({**config, name: spec[end]} for end in ("min", "max"))
                    if event(low) != event(high):
                        raise ConfigError(f"space.{name}: changes a trial's privacy (its DpEvent) in this model; "
                                          "make it a choice")
