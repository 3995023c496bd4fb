"""The command line's flags: the control flags (`--model`, `--mode`, `--output_dir`, `--strategy`) and
one flag per setting of every registered family, made from the families' settings schemas
(`tfpriv/jobs/schema.py`). Only `tfpriv.cli` defines flags, and only on tfpriv's own `FlagValues`
(`FLAGS`), never on absl's global one: a user's absl program with its own `--epochs` can call
`tfpriv.load` or `tfpriv.synthesizer`. `tfpriv.cli.main` adds these flags to absl's to parse argv.

`settings_from_flags(job, FLAGS)` builds a job's settings: the flags the user set (command line,
flag file), the rest from the job's schema; a tfpriv flag the user set that the job does not read
is refused (one line, exit 2) instead of being ignored.
"""
from __future__ import annotations

import functools
from typing import Any, Iterable

from absl import flags

from tfpriv.errors import UsageError
from tfpriv.jobs import schema
from tfpriv.jobs.job import COMMON_FLAG_NAMES, Job

FLAGS = flags.FlagValues()
# DEFINE_* bound to FLAGS. `partial`, not a wrapper: absl records the caller's module as the flag's
# module (--help groups flags by it), and a wrapper function here would be recorded instead.
DEFINE_string = functools.partial(flags.DEFINE_string, flag_values=FLAGS)
DEFINE_integer = functools.partial(flags.DEFINE_integer, flag_values=FLAGS)
DEFINE_float = functools.partial(flags.DEFINE_float, flag_values=FLAGS)
DEFINE_boolean = functools.partial(flags.DEFINE_boolean, flag_values=FLAGS)

SHARED = __name__  # `--help` lists the control flags and the settings several families read under this module
MODES = ("train", "sample")
# Flags that choose what train.py does rather than configure a job.
CONTROL_FLAGS = ("model", "mode", "output_dir", "audit", "audit_batch_size", "strategy", "num_cpu_devices",
                 "tune", "tuner", "trial_count", "mean_trials", "trial_count_shape", "max_trials", "objective",
                 "search_space")

DEFINE_string("model", "privae", "Model to train: privae (= vae), dpwgan_gp, dpgan, filter, or a family "
              "registered with tfpriv.families.register.")
DEFINE_string("mode", "train", f"{', '.join(MODES)}: train a model, or draw samples from a trained run in --output_dir.")
DEFINE_string("output_dir", None, "Run folder (results.json, checkpoints, logs). Default: runs/<model>-<dataset>-<time>. "
              "An existing run resumes; its earlier segments stay in results.json.")
DEFINE_string("strategy", "default", "default (one device), mirrored (every local device: the GPUs, else the "
              "--num_cpu_devices logical CPUs) or multi_worker (the cluster in TF_CONFIG; the chief writes "
              "--output_dir). Results match one device's; see README, More than one device or machine.")
DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many logical devices (for --strategy=mirrored "
               "without GPUs, e.g. to test it). Default: TensorFlow's one CPU device.")

_DEFINE = {bool: flags.DEFINE_boolean, int: flags.DEFINE_integer, float: flags.DEFINE_float,
           str: flags.DEFINE_string, list: flags.DEFINE_list}


def _shown(value: Any) -> str:
    if isinstance(value, schema.Derived):
        return value.text
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _models(job: Job, field: schema.Field) -> list[str]:
    """The --model values whose defaults `--help` names: those with a default of their own, else all of the job's."""
    return [m for m in job.names if m in field.spec.per_model] or list(job.names)


def define_settings_flags(jobs: Iterable[Job]) -> None:
    """One flag on FLAGS per setting of `jobs` not yet defined: its type and help from the schema, its
    default the families' common one, or none and a `Default per model: ...` sentence in its help.
    A setting several families declare with different types is refused (ValueError)."""
    declared: dict[str, list[tuple[Job, schema.Field]]] = {}
    for job in jobs:
        for name, field in schema.schema(job.settings_type).items():
            declared.setdefault(name, []).append((job, field))
    for name, entries in declared.items():
        kinds = {field.kind for _, field in entries}
        if len(kinds) > 1:
            owners = ", ".join(f"{job.name}: {field.kind.__name__}" for job, field in entries)
            raise ValueError(f"setting {name}: declared with different types ({owners})")
        if name in FLAGS:
            continue
        field = entries[0][1]
        defaults: dict[str, list[str]] = {}
        for job, f in entries:
            for model in _models(job, f):
                defaults.setdefault(_shown(f.spec.default_for(model)), []).append(model)
        help_text = field.spec.help
        default = field.spec.default if not isinstance(field.spec.default, schema.Derived) else None
        if len(defaults) > 1 or field.spec.per_model or isinstance(field.spec.default, schema.Derived):
            help_text += " Default per model: " + "; ".join(f"{value} ({', '.join(models)})"
                                                            for value, models in defaults.items()) + "."
            default = None
        shared = field.spec.shared or len({job.name for job, _ in entries}) > 1
        _DEFINE[field.kind](name, default, help_text, flag_values=FLAGS,
                            module_name=SHARED if shared else entries[0][0].module)


def user_set(flag_values: flags.FlagValues, name: str) -> bool:
    """Whether the user gave `--name` (command line, flag file or code), not its default."""
    if name not in flag_values:
        return False
    flag = flag_values[name]
    return bool(flag.present) or not flag.using_default_value


def tfpriv_flag_modules(flag_values: flags.FlagValues, jobs: Iterable[Job] = ()) -> list[str]:
    """Modules under which tfpriv's flags are listed (the shared ones first), tfpriv's and the jobs'."""
    owners = {job.module for job in jobs}
    modules = [m for m in flag_values.flags_by_module_dict() if m.startswith("tfpriv.") or m in owners]
    return sorted(modules, key=lambda m: (m != SHARED, not m.startswith("tfpriv."), m))


def settings_from_flags(job: Job, flag_values: flags.FlagValues = FLAGS, model: str | None = None, **values):
    """The job's typed settings: `values` (explicit), else a flag the user set, else the job's schema
    default. Raises UsageError for a tfpriv flag the user set that this job does not read."""
    model = model or job.name
    names = job.fields()
    for name in FLAGS:  # tfpriv's flags only (`flag_values` may be absl's, which also holds absl's own)
        if name not in names and name not in CONTROL_FLAGS and user_set(flag_values, name):
            own = job.flag_names.get(name)  # e.g. the filter's --vae_epochs for --epochs
            hint = f"; use --{own}" if own else ""
            raise UsageError(f"--{name}: does not apply to --model={model}{hint}")
    given = {name: flag_values[name].value for name in names if name not in values and user_set(flag_values, name)}
    return job.settings(model, **given, **values)


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
