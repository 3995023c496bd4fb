"""`train.py --tune`: a hyperparameter-tuning job whose trials are normal runs of the chosen job.

Each trial is the job's `run(settings, OUTPUT_DIR/private/trials/<id>)` in this process with the
trial's values over the command line's settings (its own results.json, checkpoints, logs); the
tuner is keras-tuner's (`tfpriv.tuning.tuner`). A family declares its default search space and
its named objectives as data (`Job.tuning`, a `FamilyTuning`; each objective says which data it
reads, and one that reads private data cannot choose among private trials); `--search_space` (a
JSON file or an inline JSON object, also in a flag file) is merged over the default (`null`
removes a name). The job releases OUTPUT_DIR/best (the best trial's run) and OUTPUT_DIR/tuning.json
(its values and score, the privacy of the whole job: Papernot & Steinke's bound for random search
with a random number of trials K, or composition for the adaptive tuners); K and every trial stay
in OUTPUT_DIR/private. Every tuning flag is checked, and the privacy event of every privacy
configuration of the space is planned (the job's data loaded and model built, nothing trained),
before anything is written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import TYPE_CHECKING, Mapping

import dp_accounting
from absl import flags

from tfpriv.errors import ConfigError, UsageError
from tfpriv.cli.flags import (CONTROL_FLAGS, DEFINE_boolean, DEFINE_float, DEFINE_integer,  # tfpriv's flags
                              DEFINE_string, FLAGS, flag_message, settings_from_flags, user_set)
from tfpriv.jobs.job import Job
from tfpriv.jobs.pipeline import check_privacy_flags
from tfpriv.tuning.space import FamilyTuning, privacy_configurations
from tfpriv.privacy.accounting import training_event
from tfpriv.privacy.tuning import DISTRIBUTIONS, TrialCount
from tfpriv.run_folder import PRIVATE_DIR, TRIALS_DIR

if TYPE_CHECKING:
    from tfpriv.tuning.tuner import TuningJob

DEFINE_boolean("tune", False, "Tune hyperparameters: run trials (normal runs of this job, kept private in "
               "OUTPUT_DIR/private/trials/<id>) and release the best one (OUTPUT_DIR/best) and OUTPUT_DIR/tuning.json "
               "with its configuration and the epsilon of the whole job.")
DEFINE_string("tuner", "random", "--tune: random (epsilon by Papernot & Steinke's bound), bayesian or hyperband "
              "(adaptive: epsilon by composition over the trials).")
DEFINE_string("trial_count", "geometric", "--tune: distribution of the number of trials K, drawn once by the job: "
              "poisson, geometric, logarithmic or negative_binomial (truncated; shape --trial_count_shape).")
DEFINE_float("mean_trials", 5.0, "--tune: expected number of trials E[K] (>= 1).")
DEFINE_float("trial_count_shape", 1.0, "--tune --trial_count=negative_binomial: its shape eta > 0 (1 = geometric).")
DEFINE_integer("max_trials", None, "--tune: run min(K, max_trials) trials. Not one of the theorem's distributions: "
               "paid for in delta ((1 + e^eps) P(K > max_trials) of it); refused when that does not fit.")
DEFINE_string("objective", None, "--tune: what selects the best trial (named per model; default: the first). "
              "privae (test split): log_likelihood, reconstruction_error, mmd, hoyer_sparsity, cluster_purity; "
              "GANs (test split): inception_score, frechet_distance, label_agreement (evaluation classifier "
              "fitted on the test split), downstream_accuracy; filter (training codes: only with a non-private "
              "stage 1): utility_minus_private, utility_accuracy, private_accuracy.")
DEFINE_string("search_space", None, "--tune: a JSON file or an inline JSON object of hyperparameters "
              '({"batch_size": {"type": "choice", "values": [32, 64]}, "learning_rate": {"type": "float", '
              '"min": 1e-4, "max": 1e-2, "log": true}}) merged over the model\'s default space (null removes one).')

TUNING_FLAGS = ("tuner", "trial_count", "mean_trials", "trial_count_shape", "max_trials", "objective", "search_space")
# Settings that define the job rather than a trial.
NOT_TUNABLE = ("dataset", "data_dir", "seed", "verbose", "delta", "accountant", "feature_scaling")


def check_flags(flag_values: flags.FlagValues) -> None:
    """Tuning flags without --tune, or --tune with --mode=sample/--audit, are errors."""
    if not flag_values.tune:
        for name in TUNING_FLAGS:
            if user_set(flag_values, name):
                raise UsageError(f"--{name}: only applies with --tune")
        return
    if flag_values.mode != "train":
        raise UsageError(f"--tune: tunes training runs; not with --mode={flag_values.mode}")
    if flag_values.audit:
        raise UsageError("--tune: not with --audit")


def as_tuning_job(job: Job) -> Job:
    """The job as `--tune` runs it: its runs, with their checkpoints, are in OUTPUT_DIR/trials (where
    train.py's error and Ctrl-C handling look for work to keep)."""
    return dataclasses.replace(job, checkpoint_subdir=TRIALS_DIR)


def read_space(default: Mapping[str, Mapping], given: str | None) -> dict:
    """The default space with `--search_space` (a JSON file or an inline JSON object) merged over it."""
    space = {k: dict(v) for k, v in default.items()}
    if not given:
        return space
    text = given
    if not given.lstrip().startswith("{"):
        try:
            with open(given) as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"--search_space: cannot read {given}: {exc.strerror}") from None
    try:
        override = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--search_space: not valid JSON: {exc}") from None
    if not isinstance(override, dict):
        raise UsageError("--search_space: must be a JSON object of hyperparameters")
    for name, spec in override.items():
        if spec is None:
            space.pop(name, None)
        else:
            space[name] = spec
    return space


def trial_count(flag_values: flags.FlagValues) -> TrialCount:
    if flag_values.trial_count not in DISTRIBUTIONS:
        raise UsageError(f"--trial_count: must be one of {', '.join(DISTRIBUTIONS)}, got {flag_values.trial_count!r}")
    try:
        return TrialCount(flag_values.trial_count, flag_values.mean_trials, flag_values.trial_count_shape)
    except ConfigError as exc:
        raise UsageError(_as_flag(exc)) from None


_PARAM_FLAGS = {"space": "search_space", "tuner": "tuner", "max_trials": "max_trials", "mean": "mean_trials",
                "shape": "trial_count_shape", "distribution": "trial_count", "direction": "objective",
                "objective": "objective"}
_PARAM_VALUE = re.compile(r"\b(" + "|".join(_PARAM_FLAGS) + r")=")


def _as_flag(exc: ConfigError) -> str:
    """A tuning library error as a flag error (`space.x: ...` -> `--search_space: space.x: ...`;
    `max_trials: ...; use max_trials=68 or mean=1.01` -> `--max_trials: ...; use --max_trials=68 or
    --mean_trials=1.01`)."""
    message = str(exc).strip().splitlines()[0]
    if message.startswith("space"):
        return f"--search_space: {message}"
    flag = _PARAM_FLAGS.get(exc.param or "")
    if not flag:
        return message
    rest = _PARAM_VALUE.sub(lambda m: f"--{_PARAM_FLAGS[m.group(1)]}=", message[len(exc.param):])
    return f"--{flag}{rest}"


class TrialPlanner:
    """Settings and privacy events of trials: the command line's settings with a trial's values."""

    def __init__(self, job: Job, model: str, flag_values: flags.FlagValues, base, output_dir: str):
        self.job, self.model, self.flags, self.base, self.output_dir = job, model, flag_values, base, output_dir
        self.events: dict[str, dp_accounting.DpEvent] = {}
        self.delta: float | None = None
        self.caveat: str | None = None  # the trials' epsilon caveat (shuffled batches), if any

    def settings(self, values: dict, trial_dir: str | None = None):
        extra = {}
        if self.base.seed is not None and trial_dir is not None:  # distinct, reproducible streams per trial
            extra["seed"] = (self.base.seed * 1_000_003 + int(os.path.basename(trial_dir)) + 1) % 2 ** 31
        return settings_from_flags(self.job, self.flags, model=self.model, **values,
                                   **self.job.tuning.trial_settings, **extra)

    def run_trial(self, values: dict, trial_dir: str) -> dict:
        return self.job.run(self.settings(values, trial_dir), trial_dir)

    def event(self, values: dict) -> dp_accounting.DpEvent:
        """One trial's DpEvent with these values: the job's plan (data loaded, model built, nothing
        trained or written), every planned step as its sampling scheme's events (`planned_segments`)."""
        key = json.dumps(values, sort_keys=True)
        if key not in self.events:
            run = self.job.training_run(self.settings(values), os.path.join(self.output_dir, TRIALS_DIR, "_planning"))
            plan = run.setup()
            self.delta = plan.delta
            self.caveat = plan.summary().get("epsilon_caveat", self.caveat)
            self.events[key] = (training_event(plan.planned_segments())
                                if plan.config.private else dp_accounting.NonPrivateDpEvent())
        return self.events[key]

    def check(self, values: dict) -> None:
        """The settings checks that need no data, for one point of the space (values of the flag's type)."""
        for name, value in values.items():
            try:
                self.flags[name].parser.parse(value)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"not a value of --{name} ({exc})") from None
        settings = self.settings(values)
        check_privacy_flags(settings)
        self.job.training_run(settings, self.output_dir).validate()


def extreme_points(space: Mapping[str, Mapping]) -> list[dict]:
    """Each value of every hyperparameter at least once (choices: each value; ranges: both ends)."""
    points = []
    for name, spec in space.items():
        for value in (spec["values"] if spec["type"] == "choice" else (spec["min"], spec["max"])):
            points.append({name: value})
    return points


def build(job: Job, settings, output_dir: str, flag_values: flags.FlagValues = FLAGS) -> TuningJob:
    """The tuning job of the command line, every flag checked and every trial planned."""
    # keras-tuner (and Keras 3 with it) loads only for --tune, not on every start of the command line.
    from tfpriv.tuning.tuner import TUNERS, TuningJob, is_worker
    family: FamilyTuning | None = getattr(job, "tuning", None)
    if family is None or job.training_run is None:
        raise UsageError(f"--tune: not available for --model={settings.model}")
    if flag_values.tuner not in TUNERS:
        raise UsageError(f"--tuner: must be one of {', '.join(TUNERS)}, got {flag_values.tuner!r}")
    for name in ("trial_count", "mean_trials", "trial_count_shape"):
        if flag_values.tuner == "hyperband" and user_set(flag_values, name):
            raise UsageError(f"--{name}: hyperband's schedule fixes its trials; not with --tuner=hyperband")
    if user_set(flag_values, "trial_count_shape") and flag_values.trial_count != "negative_binomial":
        raise UsageError(f"--trial_count_shape: only applies to --trial_count=negative_binomial, "
                         f"got --trial_count={flag_values.trial_count}")
    for name, value in family.trial_settings.items():  # fixed for every trial: a different user value is refused
        flag = job.flag_for(name)
        if user_set(flag_values, flag) and getattr(flag_values, flag) != value:
            raise UsageError(f"--{flag}: --tune's trials of --model={settings.model} run with --{flag}={value}; "
                             f"not with --{flag}={getattr(flag_values, flag)}")
    count = trial_count(flag_values)
    objective = family.objective(flag_values.objective)
    space = read_space(family.space, flag_values.search_space)
    fields = set(job.fields())
    for name in space:
        if name not in fields or name in NOT_TUNABLE or name in CONTROL_FLAGS or name in family.trial_settings:
            why = "defines the job, not a trial" if name in fields else f"is not a flag of --model={settings.model}"
            raise UsageError(f"--search_space: {name} {why}")
    planner = TrialPlanner(job, settings.model, flag_values, settings, output_dir)
    try:
        tuning = TuningJob(planner.run_trial, planner.event, space, objective, tuner=flag_values.tuner, trials=count,
                           seed=settings.seed, max_trials=flag_values.max_trials, neutral=family.neutral,
                           budget_key=job.flag_for("epochs"), privacy_note=family.scope)
    except ConfigError as exc:
        raise UsageError(_as_flag(exc)) from None
    for point in extreme_points(space):
        try:
            planner.check(point)
        except UsageError as exc:
            (name, value), = point.items()
            raise UsageError(f"--search_space: {name}={value}: {str(exc).splitlines()[0]}") from None
    if is_worker():  # the chief plans and accounts the job; a worker runs the trials it is given
        return tuning
    for config in privacy_configurations(space, family.neutral):  # errors surface here, before any output
        try:
            planner.event(config)
        except UsageError as exc:
            where = f"with {json.dumps(config)}: " if config else ""
            raise UsageError(f"--search_space: {where}{flag_message(exc, job)}") from None
    tuning.delta, tuning.epsilon_caveat = planner.delta, planner.caveat
    try:
        tuning.check_objective()
    except ConfigError as exc:
        usable = [o.name for o in family.objectives if o.reads != "private"]
        raise UsageError(_as_flag(exc) + (f" (--objective={' or '.join(usable)})" if usable else
                                          f" (--model={settings.model} has none: tune non-private trials)")) from None
    try:
        tuning.privacy(1)  # a cap that does not fit in delta is refused now
    except ConfigError as exc:
        raise UsageError(_as_flag(exc)) from None
    return tuning


def tune(job: Job, settings, output_dir: str, flag_values: flags.FlagValues = FLAGS) -> dict:
    """Runs the tuning job of the command line (or this worker's part of it)."""
    return build(job, settings, output_dir, flag_values).run(output_dir)


def report(output_dir: str, result: dict) -> str:
    """The lines `train.py --tune` prints: what the job releases (random search: not the number of
    trials, which the job's epsilon does not cover; a worker names none of its trials)."""
    if result.get("role") == "worker":
        return (f"tuning worker {result['tuner_id']} finished (its trials: {output_dir}/{PRIVATE_DIR}); "
                f"the chief writes {output_dir}/tuning.json")
    privacy, best = result["privacy"], result["best"]
    eps = privacy["epsilon"]
    if "trials_run" in privacy:
        lines = [f"tuning ({result['tuner']}): {privacy['trials_run']} trials"]
    else:
        count = privacy["trial_count"]
        lines = [f"tuning ({result['tuner']}): the best of a random number of trials (K ~ {count['distribution']} "
                 f"with mean {count['mean']:g})"]
    if best is not None:
        lines.append(f"best: {result['objective']['name']} = {best['objective']:.4g} with "
                     f"{json.dumps(best['values'])}, its run in {os.path.join(output_dir, best['run'])}")
    if math.isinf(eps):
        lines.append("non-private trials: no privacy guarantee (epsilon = inf)")
    else:
        caveat = f" [{privacy['epsilon_caveat']}]" if privacy.get("epsilon_caveat") else ""
        lines.append(f"epsilon of the whole job = {eps:.4g} at delta = {privacy['delta']:.3g}{caveat} "
                     f"({privacy['analysis']}); one trial {privacy['epsilon_one_trial']:.4g}")
    lines.append(f"Results: {output_dir}/tuning.json; {result['private']}")
    return "\n".join(lines)
