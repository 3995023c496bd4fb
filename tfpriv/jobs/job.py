"""The job contract of `train.py`: a `Job` per model family, the `Family` registry, one shared settings reader.

A family provides
  * its flags (defined once, in its own module: tfpriv/privae/job.py, tfpriv/gan/job.py,
    tfpriv/filter/job.py; the shared ones are in tfpriv/jobs/flags.py), on tfpriv's own `FLAGS`
    (`tfpriv.jobs.flags.DEFINE_*`), never absl's global one,
  * a typed settings dataclass whose fields are the flags it reads (`Settings` subclasses),
  * its defaults for shared flags as data (`Job.defaults`, per --model value `Job.model_defaults`),
  * the library parameters whose flag has another name (`Job.flag_names`, e.g. the filter's
    `batch_size` is `--vae_batch_size`),
  * `run(settings, output_dir) -> results` and optionally `sample(settings, output_dir)`.
  * its `Family`: the job with the loader of its trained model and that model's serving
    signatures, registered in one line, `register(Family(JOB, load, serving))`; train.py,
    `tfpriv.load`, the export and `tfpriv.synthesizer` find it by `--model` name (`tfpriv.families`).

`read_settings(job, FLAGS)` builds the settings: a flag the user set wins, else the family's
default, else the flag's default. A tfpriv flag the user set that the job does not read is
refused (one line, exit 2) instead of being ignored.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from absl import flags

from tfpriv.errors import UsageError
from tfpriv.jobs.flags import FLAGS
from tfpriv.run_folder import CHECKPOINTS_DIR

# Flags that choose what train.py does rather than configure a job.
CONTROL_FLAGS = ("model", "mode", "output_dir", "audit", "audit_batch_size", "strategy", "num_cpu_devices",
                 "tune", "tuner", "trial_count", "mean_trials", "trial_count_shape", "max_trials", "objective",
                 "search_space")
# Library parameters whose flag has another name in every job (a job's `flag_names` come first).
COMMON_FLAG_NAMES = {"target_epsilon": "epsilon", "expected_batch_size": "batch_size", "sampling_rate": "batch_size",
                     "scaling": "feature_scaling", "replicas": "strategy"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What every job reads. `given`: the fields the user set (flag or explicit value)."""
    model: str
    dataset: str
    data_dir: str | None
    seed: int | None
    verbose: int
    given: frozenset = dataclasses.field(default=frozenset(), compare=False, repr=False)

    def record(self, exclude: tuple[str, ...] = ("data_dir",)) -> dict:
        """The settings as a JSON-able dict (for results.json)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "given" and f.name not in exclude}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivateSettings(Settings):
    """The shared privacy flags (every family can train privately)."""
    aggregation: str
    sampling: str
    l2_norm_clip: float
    noise_multiplier: float
    epsilon: float | None
    delta: float | None
    max_epsilon: float | None
    accountant: str
    clipping: str


@dataclasses.dataclass(frozen=True)
class Job:
    names: tuple[str, ...]  # --model values; the first is the family's name
    settings_type: type
    run: Callable[[Any, str], dict]
    sample: Callable[[Any, str], dict] | None = None
    # The job's `tfpriv.jobs.pipeline.TrainingRun` class (`--audit` builds its model without training it).
    training_run: type | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Per --model value (e.g. dpgan vs dpwgan_gp); a callable default is computed from the other settings.
    model_defaults: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    flag_names: Mapping[str, str] = dataclasses.field(default_factory=dict)  # library parameter -> flag
    checkpoint_subdir: str = CHECKPOINTS_DIR  # where a run's checkpoints are, relative to --output_dir
    summary: str = ""
    tuning: Any = None  # `--tune`'s defaults: a `tfpriv.cli.tuning.FamilyTuning` (space, objectives)

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def module(self) -> str:
        """The module of its `run`, where the job's own flags are defined (`--help` lists them under it)."""
        return self.run.__module__

    def fields(self) -> tuple[str, ...]:
        """The flags this job reads (its settings' fields)."""
        return tuple(f.name for f in dataclasses.fields(self.settings_type) if f.name not in ("model", "given"))

    def flag_for(self, param: str) -> str:
        """The flag of a library parameter (`batch_size` -> `vae_batch_size` for the filter)."""
        return self.flag_names.get(param) or COMMON_FLAG_NAMES.get(param, param)


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family as train.py, `tfpriv.load`, the SavedModel export and `tfpriv.synthesizer` see it:
    its job (`--model` names, flags, settings, `TrainingRun`, `--tune` space), how to load the trained
    model a run folder holds, and that model's serving signatures (`tfpriv.jobs.serving.Serving`).
    A family package registers it with one line, `register(Family(JOB, load, serving))`."""
    job: Job
    load: Callable[[str], Any]  # run folder -> the trained model (`tfpriv.load`)
    serving: Callable[[Any], Any]  # trained model -> its `Serving` (the SavedModel's signatures)

    @property
    def names(self) -> tuple[str, ...]:
        return self.job.names


# --model name -> family: the one registry (results.json's `model` is one of these names).
_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Makes `family` a model of train.py (`--model`), `tfpriv.load` and the export, under each of
    its names; returns it. A name another family's job already has is refused."""
    for name in family.names:
        other = _FAMILIES.get(name)
        if other is not None and other.job.module != family.job.module:
            raise ValueError(f"family: --model={name} is already the family of {other.job.module}")
    for name in family.names:
        _FAMILIES[name] = family
    return family


def registered() -> dict[str, Family]:
    """The registered families by `--model` name, in the order they were registered."""
    return dict(_FAMILIES)


def user_set(flag_values: flags.FlagValues, name: str) -> bool:
    """Whether the user gave `--name` (command line, flag file or code), not its default."""
    if name not in flag_values:
        return False
    flag = flag_values[name]
    return bool(flag.present) or not flag.using_default_value


def tfpriv_flag_modules(flag_values: flags.FlagValues) -> list[str]:
    """Modules of tfpriv and of the registered families' jobs that define flags, shared flags first."""
    jobs = {family.job.module for family in _FAMILIES.values()}
    modules = [m for m in flag_values.flags_by_module_dict() if m.startswith("tfpriv.") or m in jobs]
    return sorted(modules, key=lambda m: (m != "tfpriv.jobs.flags", not m.startswith("tfpriv."), m))


def tfpriv_flags(flag_values: flags.FlagValues) -> list[str]:
    names = []
    for module in tfpriv_flag_modules(flag_values):
        names.extend(f.name for f in flag_values.flags_by_module_dict()[module])
    return names


def read_settings(job: Job, flag_values: flags.FlagValues = FLAGS, model: str | None = None, **values):
    """The job's typed settings: `values` (explicit), else a flag the user set, else the job's
    default for this --model, else the flag's default. Raises UsageError for a tfpriv flag the
    user set that this job does not read."""
    model = model or job.name
    if model not in job.names:
        raise UsageError(f"--model: {job.name} jobs are {', '.join(job.names)}, got {model!r}")
    names = job.fields()
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TypeError(f"{job.settings_type.__name__} has no fields {unknown}")
    for name in tfpriv_flags(flag_values):
        if name not in names and name not in CONTROL_FLAGS and user_set(flag_values, name):
            own = job.flag_names.get(name)  # e.g. the filter's --vae_epochs for --epochs
            hint = f"; use --{own}" if own else ""
            raise UsageError(f"--{name}: does not apply to --model={model}{hint}")
    defaults = {**job.defaults, **job.model_defaults.get(model, {})}
    given = set(values) | {n for n in names if user_set(flag_values, n)}
    out, derived = {}, {}
    for name in names:
        if name in values:
            out[name] = values[name]
        elif name in given:
            out[name] = flag_values[name].value
        elif name in defaults and callable(defaults[name]):
            derived[name] = defaults[name]
        elif name in defaults:
            out[name] = defaults[name]
        else:
            out[name] = flag_values[name].value
    for name, default in derived.items():
        out[name] = default(out)
    return job.settings_type(model=model, given=frozenset(given), **out)


def flag_message(exc: UsageError, job: Job | None = None, flag_values: flags.FlagValues = FLAGS) -> str:
    """The one-line message of `exc` for the command line: the library parameter it names
    becomes the job's flag (`batch_size: ...` -> `--vae_batch_size: ...` for the filter)."""
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else "invalid input"
    param = getattr(exc, "param", None)
    if message.startswith("--") or not param:
        return message
    flag = job.flag_for(param) if job is not None else COMMON_FLAG_NAMES.get(param, param)
    if flag not in flag_values:
        return message
    if message.startswith(param):
        return f"--{flag}{message[len(param):]}"
    return f"--{flag}: {message}"
