"""The job contract of `train.py`: a `Job` per model family and the `Family` registry.

A family provides
  * its settings: a frozen dataclass of `tfpriv.jobs.schema.setting` fields (defaults, bounds, help,
    marks; the shared ones declared once in `schema.py`), from which the command line makes its flags
    (`tfpriv/cli/flags.py`) and `Job.settings(**values)` builds and checks the typed settings,
  * the library parameters whose flag has another name (`Job.flag_names`, e.g. the filter's
    `batch_size` is `--vae_batch_size`),
  * `run(settings, output_dir) -> results` and optionally `sample(settings, output_dir)`,
  * its `Family`: the job with the loader of its trained model and that model's serving
    signatures (and, to be a synthesizer, its `Synthesis`), registered in one line,
    `register(Family(JOB, load, serving))`; train.py, `tfpriv.load`, the export and
    `tfpriv.synthesizer` find it by `--model` name (`tfpriv.families`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from tfpriv.errors import UsageError
from tfpriv.jobs import schema
from tfpriv.registry import Registry
from tfpriv.run_folder import CHECKPOINTS_DIR

__all__ = ["FAMILIES", "Family", "Job", "Synthesis", "register", "registered"]

# Library parameters whose flag has another name in every job (a job's `flag_names` come first).
COMMON_FLAG_NAMES = {"target_epsilon": "epsilon", "expected_batch_size": "batch_size", "sampling_rate": "batch_size",
                     "scaling": "feature_scaling", "replicas": "strategy"}


@dataclasses.dataclass(frozen=True)
class Job:
    """A family's command-line job: its `--model` names, settings class, `run` (and `sample`), its
    `TrainingRun` class and `--tune` defaults.

    Example: `Job(names=("toy",), settings_type=ToySettings, run=run, training_run=ToyRun)` (the whole
    toy family is in docs/ARCHITECTURE.md, "A model family")."""
    names: tuple[str, ...]  # --model values; the first is the family's name
    settings_type: type
    run: Callable[[Any, str], dict]
    sample: Callable[[Any, str], dict] | None = None
    # The job's `tfpriv.jobs.pipeline.TrainingRun` class (`--audit` builds its model without training it).
    training_run: type | None = None
    flag_names: Mapping[str, str] = dataclasses.field(default_factory=dict)  # library parameter -> flag
    checkpoint_subdir: str = CHECKPOINTS_DIR  # where a run's checkpoints are, relative to --output_dir
    summary: str = ""
    tuning: Any = None  # `--tune`'s defaults: a `tfpriv.tuning.space.FamilyTuning` (space, objectives)

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def module(self) -> str:
        """The module of its `run` (`--help` lists the job's own flags under it)."""
        return self.run.__module__

    def fields(self) -> tuple[str, ...]:
        """The settings this job reads (each a flag of the command line)."""
        return tuple(schema.schema(self.settings_type))

    def settings(self, model: str | None = None, **values):
        """The job's typed settings for `--model=model` (default: the family's name): `values`, else
        the defaults of its schema; every value checked (UsageError naming the setting)."""
        model = model or self.name
        if model not in self.names:
            raise UsageError(f"--model: {self.name} jobs are {', '.join(self.names)}, got {model!r}")
        return schema.make(self.settings_type, model, **values)

    def flag_for(self, param: str) -> str:
        """The flag of a library parameter (`batch_size` -> `vae_batch_size` for the filter)."""
        return self.flag_names.get(param) or COMMON_FLAG_NAMES.get(param, param)


def _unbounded(settings: Mapping[str, Any], kind: str) -> bool:
    """x need not lie in [0, 1]: the default of `Synthesis.unit_interval`."""
    return False


@dataclasses.dataclass(frozen=True)
class Synthesis:
    """What makes a family a synthesizer (`tfpriv.synthesizer(name, epsilon)` trains its job on arrays):
    the shapes of x it takes, whether it takes integer labels y, and when x must lie in [0, 1].

    Example: a GAN's, `Synthesis(ndims=(4,), labels="conditional", unit_interval=lambda s, kind: True)`."""
    ndims: tuple[int, ...] = (2, 4)  # x.ndim: 2 = [N, features], 4 = images [N, height, width, channels]
    labels: str | None = None  # the bool setting that says labels were given (then `num_classes` is taken)
    # Whether x must lie in [0, 1], from the synthesizer's settings and x's kind ("image" or "tabular").
    unit_interval: Callable[[Mapping[str, Any], str], bool] = _unbounded


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family as train.py, `tfpriv.load`, the SavedModel export and `tfpriv.synthesizer` see it:
    its job (`--model` names, flags, settings, `TrainingRun`, `--tune` space), how to load the trained
    model a run folder holds, and that model's serving signatures (`tfpriv.jobs.serving.Serving`).
    A family package registers it with one line, `register(Family(JOB, load, serving))`.

    Example: `FAMILY = register(Family(JOB, load=load_toy, serving=toy_serving, synthesis=Synthesis(ndims=(2,))))`."""
    job: Job
    load: Callable[[str], Any]  # run folder -> the trained model (`tfpriv.load`)
    serving: Callable[[Any], Any]  # trained model -> its `Serving` (the SavedModel's signatures)
    synthesis: Synthesis | None = None  # how it trains on arrays: then it is a `tfpriv.synthesizer`

    @property
    def names(self) -> tuple[str, ...]:
        return self.job.names


# --model name -> family: the one registry (results.json's `model` is one of these names).
FAMILIES: Registry[Family] = Registry("family", parameter="model", error=UsageError)


def register(family: Family) -> Family:
    """Makes `family` a model of train.py (`--model`), `tfpriv.load` and the export, under each of
    its names; returns it. A name another family's job already has is refused; the same job's module
    registering again (a re-import) replaces its family.

    Example: `register(Family(JOB, load, serving))`; then `python train.py --model=toy` runs it."""
    for name in family.names:
        if name in FAMILIES and FAMILIES.get(name).job.module != family.job.module:
            raise ValueError(f"family: --model={name} is already the family of {FAMILIES.get(name).job.module}")
    for name in family.names:
        if name in FAMILIES:
            FAMILIES.remove(name)
        FAMILIES.register(name, family)
    return family


def registered() -> dict[str, Family]:
    """The registered families by `--model` name, in the order they were registered.

    Example: `list(registered())[:2] == ["privae", "vae"]` once the built-ins are loaded."""
    return dict(zip(FAMILIES.names(), FAMILIES.values()))
