"""The one sequence every training job runs: validate -> load -> build -> plan -> fit -> evaluate -> record.

`TrainingRun.run()` is that sequence; a family fills in the steps (`validate`, `load`, `build`,
`evaluate`, `record`, optionally `planned` and `callbacks`). Planning reads the ledger of the
run folder (`read_ledger`), so a re-run resumes and its epsilon continues; `fit_private` writes
privacy_plan.json, checkpoints and TensorBoard logs. `results.json` has the same keys for every
family (`common_results`): `epochs` is the number of epochs completed, `planned_epochs` the
number asked for, and `segments` lists every training segment of the folder (a re-run appends
one: its steps, the epsilon after it, wall time and history) instead of overwriting the record.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import threading
from typing import Any

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.data.sampling import sampling_rate_and_steps
from tfpriv.errors import UsageError
from tfpriv.jobs.job import registered
from tfpriv.jobs.serving import export
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.statement import privacy_statement
from tfpriv.run_folder import CHECKPOINTS_DIR, RESULTS_FILE, SAMPLES_FILE, SAMPLES_GRID_FILE
from tfpriv.training.callbacks import StepProgressBar
from tfpriv.training.distribute import training_scope
from tfpriv.training.results import write_results
from tfpriv.training.runner import PrivacyPlan, fit_private, plan_privacy, read_ledger

# Flags that only mean something for private training.
PRIVATE_ONLY = ("epsilon", "max_epsilon", "noise_multiplier", "l2_norm_clip", "delta", "batch_clip", "max_batch_size",
                "accountant")


def check_privacy_flags(s) -> None:
    """--epsilon with --noise_multiplier, or a DP-only flag with --aggregation=none, is an error."""
    if "epsilon" in s.given and "noise_multiplier" in s.given:
        raise UsageError("--noise_multiplier: cannot be combined with --epsilon, which calibrates the noise "
                         "multiplier for the planned steps; give one of them")
    if s.aggregation == "none":
        for name in PRIVATE_ONLY:
            if name in s.given:
                raise UsageError(f"--{name}: only applies to private training, got --aggregation=none")


def learning_rate(s, num_examples: int, steps_per_update: int = 1):
    """The optimizer's learning rate from --learning_rate and --lr_schedule: the constant, or a
    cosine decay to 0 over the planned updates (`s.epochs` epochs of steps, one optimizer update
    every `steps_per_update` steps: a GAN's generator updates once per `critic_steps`).

    Data-independent, so it costs no privacy. The schedule reads the optimizer's step counter,
    which is checkpointed, so a resumed run continues the same curve.
    """
    if s.lr_schedule == "constant":
        return s.learning_rate
    steps = s.epochs * sampling_rate_and_steps(num_examples, s.batch_size, s.sampling)[1]
    return keras.optimizers.schedules.CosineDecay(s.learning_rate, decay_steps=max(1, steps // steps_per_update))


def progress(s, message: str) -> None:
    """A progress line for long work (evaluations), printed when --verbose > 0."""
    if s.verbose:
        print(message, flush=True)


__all__ = ["Built", "TrainingRun"]  # what a family's job fills in


@dataclasses.dataclass
class Built:
    """What a family hands to the shared fit: the model, its data and how it is privatized.

    Example: `Built(model, x_train, keras.optimizers.SGD(0.1), settings.dp_config(), settings.batch_size,
    settings.epochs, settings.sampling)` (a `TrainingRun.build`'s result)."""
    model: Any  # a tfpriv DPModel
    arrays: Any  # training data: an array or a tuple of arrays, one row per example
    optimizer: Any  # an optimizer, or a tuple (GAN: critic, generator)
    config: DPConfig
    batch_size: int
    epochs: int
    sampling: str
    # one-shot Gaussians made before the first step: name -> epsilon (`plan_privacy`'s `releases`), and the
    # function that makes them (`fit_private`'s `make_releases`)
    releases: dict = dataclasses.field(default_factory=dict)
    make_releases: Any = None


def checkpoint_position(train_dir: str) -> tuple[int, int]:
    """(train steps, epochs) saved in the latest checkpoint of `train_dir` ((0, 0) if none)."""
    latest = tf.train.latest_checkpoint(os.path.join(train_dir, CHECKPOINTS_DIR))
    if latest is None:
        return 0, 0
    reader = tf.train.load_checkpoint(latest)
    shapes = reader.get_variable_to_shape_map()

    def value(key):
        return int(reader.get_tensor(key)) if key in shapes else 0

    return value("step_count/.ATTRIBUTES/VARIABLE_VALUE"), value("run/epoch/.ATTRIBUTES/VARIABLE_VALUE")


def plan(s, built: Built, train_dir: str) -> PrivacyPlan:
    """The privacy plan of `built` under the shared privacy settings, continuing the folder's ledger."""
    private = built.config.private
    return plan_privacy(built.config, built.model.term_spec(), _num_examples(built.arrays), built.batch_size,
                        built.epochs, built.sampling, s.delta, s.epsilon if private else None,
                        s.max_epsilon if private else None, history=read_ledger(train_dir), accountant=s.accountant,
                        releases=built.releases)


# Set by the command line's SIGINT handler (`on_sigint`). Ctrl-C raises KeyboardInterrupt where the
# main thread happens to be; if that is inside the tf.data generator of the Poisson sampler, TensorFlow
# turns it into a data error or an end of the epoch, so the batch-end check below raises it again.
INTERRUPT = threading.Event()


def on_sigint(signum, frame) -> None:
    """SIGINT handler of the command line: remember the request, then interrupt as Python would."""
    INTERRUPT.set()
    raise KeyboardInterrupt


class StopOnInterrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the next batch end once Ctrl-C was pressed (`INTERRUPT`)."""

    def on_train_batch_end(self, batch, logs=None):
        if INTERRUPT.is_set():
            raise KeyboardInterrupt


def train(built: Built, plan_: PrivacyPlan, train_dir: str, seed: int | None, verbose: int,
          callbacks=()) -> dict:
    """`fit_private` plus the record of this training segment (`fit["segment"]`)."""
    start_step, start_epoch = checkpoint_position(train_dir)
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    fit = fit_private(built.model, built.arrays, plan_, built.optimizer, train_dir, seed=seed, verbose=verbose,
                      extra_callbacks=[*callbacks, StopOnInterrupt(), StepProgressBar()],
                      announce_budget_stop=False,  # `report` prints the stop in the flags' terms
                      make_releases=built.make_releases)
    fit["segment"] = {
        "started": started, "start_step": start_step, "steps": fit["train_steps"] - start_step,
        "start_epoch": start_epoch, "epochs_completed": fit["epochs_completed"], "epsilon": fit["epsilon"],
        "train_seconds": fit["train_seconds"], "resumed": fit["resumed"], "budget_reached": fit["budget_reached"],
        "history": fit["history"],
    }
    return fit


def common_results(s, plan_: PrivacyPlan, fit: dict, metrics: dict) -> dict:
    """The keys every family's results.json has (privacy plan, epsilon, steps, epochs, metrics)."""
    return {
        "model": s.model, "dataset": s.dataset, **plan_.summary(),
        "epsilon": fit["epsilon"], "steps": fit["steps"], "train_steps": fit["train_steps"],
        "epochs": fit["epochs_completed"], "planned_epochs": plan_.epochs, "planned_steps": plan_.planned_steps,
        "resumed": fit["resumed"], "budget_reached": fit["budget_reached"], "seed": s.seed,
        "batch_terms_reach": fit["batch_terms_reach"], "metrics": metrics,
        "ledger": fit["ledger"],  # every segment: its sampling scheme, rate, noise, steps, how it was accounted
        **({"epsilon_as_if_poisson": fit["epsilon_as_if_poisson"]} if "epsilon_as_if_poisson" in fit else {}),
    }


def previous_segments(output_dir: str) -> list[dict]:
    """The training segments recorded in `output_dir/results.json` by earlier runs."""
    path = os.path.join(output_dir, RESULTS_FILE)
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return []
    if isinstance(record.get("segments"), list):
        return record["segments"]
    if "steps" in record:  # a record written before segments existed: one segment
        return [{"steps": record.get("train_steps", record["steps"]), "epsilon": record.get("epsilon"),
                 "epochs_completed": record.get("epochs"), "history": record.get("history", {})}]
    return []


def write_run_results(output_dir: str, results: dict, fit: dict) -> dict:
    """Writes results.json with this run's segment appended to the folder's earlier segments
    (a fresh run, not resumed from a checkpoint, starts a new list); `history` concatenates them."""
    segment = fit["segment"]
    segments = previous_segments(output_dir) if fit["resumed"] else []
    if segment["steps"] > 0 or not segments:
        segments = segments + [segment]
    history: dict[str, list] = {}
    for seg in segments:
        for key, values in (seg.get("history") or {}).items():
            history.setdefault(key, []).extend(values)
    results = {**results, "segments": segments, "history": history}
    write_results(output_dir, results)
    return results


class TrainingRun:
    """The shared sequence of a training job; a family overrides the steps.

    `run()`: check the privacy flags -> `validate()` -> `load()` -> `build(data)` -> plan (with
    the ledger of `train_dir`) -> `planned(plan)` -> `fit_private` (writes privacy_plan.json,
    checkpoints, logs) -> `evaluate()` -> `export()` (saved_model/, with the privacy statement) -> results.json
    (`common_results` + `record()` + `privacy_statement`).
    After `build`, `self.data`, `self.built`, `self.plan` and `self.fit` hold what each step made.

    Example: the toy family's `ToyRun` fills in `load`, `build` and `save_model` (docs/ARCHITECTURE.md,
    "A model family"); `ToyRun(JOB.settings(epochs=2), "runs/toy").run()` trains, exports and records.
    """

    train_subdir = ""  # fit_private's folder relative to the run folder (the filter: `STAGE1_DIR`)

    def __init__(self, settings, output_dir: str):
        self.s = settings
        self.output_dir = output_dir
        self.data = self.built = self.plan = self.fit = None

    @property
    def train_dir(self) -> str:
        return os.path.join(self.output_dir, self.train_subdir) if self.train_subdir else self.output_dir

    # -- the family's steps ------------------------------------------------------------------------
    def validate(self) -> None:
        """Every check that needs no data (raise UsageError naming the flag)."""

    def load(self):
        raise NotImplementedError

    def build(self, data) -> Built:
        raise NotImplementedError

    def planned(self, plan_: PrivacyPlan) -> None:
        """After planning, before anything is trained."""

    def callbacks(self, plan_: PrivacyPlan) -> list:
        return []

    def sampling_seed(self) -> int | None:
        return self.s.seed

    def evaluate(self) -> dict:
        """Scores the trained model on held-out data and saves it (`save_model`); returns the metrics."""
        self.save_model()
        return {}

    def save_model(self) -> None:
        """Saves the trained model the run serves (what its family's `load` reads). A synthesizer
        (`tfpriv.synthesizer`) trains the job on arrays and calls only this, not `evaluate`."""
        raise NotImplementedError

    def record(self) -> dict:
        """Family-specific keys of results.json."""
        return {}

    # -- the sequence ------------------------------------------------------------------------------
    def setup(self) -> PrivacyPlan:
        """Everything before training (also what `--audit` needs): check the privacy flags ->
        `validate()` -> `load()` -> `build(data)` -> plan (with the ledger of `train_dir`)."""
        check_privacy_flags(self.s)
        self.validate()
        self.data = self.load()
        self.built = self.build(self.data)
        self.plan = plan(self.s, self.built, self.train_dir)
        return self.plan

    def run(self) -> dict:
        with training_scope():  # --strategy: the model is built, compiled and fitted in its scope
            self.setup()
            self.planned(self.plan)
            self.fit = train(self.built, self.plan, self.train_dir, self.sampling_seed(), self.s.verbose,
                             self.callbacks(self.plan))
            self.plan = self.fit["plan"]  # as trained: a re-run that took no step records the noise the run used
        metrics = self.evaluate()
        results = {**common_results(self.s, self.plan, self.fit, metrics), **self.record()}
        results["privacy_statement"] = run_privacy_statement(self.plan, self.built.model.ledger.raw_segments(), results)
        results["saved_model"] = self.export(results["privacy_statement"])
        return write_run_results(self.output_dir, results, self.fit)

    def export(self, statement: dict | None = None) -> dict:
        """OUTPUT_DIR/saved_model: the serving signatures of the trained model the run saved, as its
        registered family (`tfpriv.jobs.job.Family`) loads and serves it, with the privacy `statement`."""
        family = registered().get(self.s.model)
        if family is None:
            raise UsageError(f"model: {self.s.model!r} is not a registered family (tfpriv.families.register)")
        return export(self.output_dir, family, statement=statement)


def run_privacy_statement(plan_: PrivacyPlan, segments, results: dict) -> dict:
    """The privacy statement of a run's trained model (`tfpriv.privacy.statement`) from its ledger's
    segments; with the run's per-artefact `guarantees` and its `epsilon_caveat`, where it has them."""
    extras = {key: results[key] for key in ("guarantees", "epsilon_caveat") if results.get(key)}
    return privacy_statement(segments, plan_.config, plan_.delta, has_batch_terms=plan_.has_batch_terms,
                             extras=extras)


def _num_examples(arrays) -> int:
    first = arrays[0] if isinstance(arrays, (tuple, list)) else arrays
    return len(first)


def write_samples(output_dir: str, arrays: dict, images: np.ndarray | None, labels: np.ndarray | None = None,
                  grid=None) -> dict:
    """`--mode=sample` output of every family: samples.npz (`arrays`) and, for images, samples_grid.png."""
    os.makedirs(output_dir, exist_ok=True)
    npz = os.path.join(output_dir, SAMPLES_FILE)
    np.savez_compressed(npz, **arrays)
    out = {"samples": npz, "num_samples": int(len(next(iter(arrays.values()))))}
    if images is not None and np.ndim(images) == 4 and grid is not None:
        out["grid"] = grid(images, os.path.join(output_dir, SAMPLES_GRID_FILE), labels)
    return out
