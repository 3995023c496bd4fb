"""A family's settings, declared once: a frozen dataclass whose fields are `setting(...)`s.

Each field carries its default (per `--model` value if the family has several), its bounds or
choices, its help text and its marks (read only by the evaluation; taken by `tfpriv.synthesizer`).
From that one declaration:
  * `make(cls, model, **values)` builds the typed settings (a value given wins, else the model's
    default, else a default derived from the other settings) and checks every value against its
    type and bounds (`check`), so a family's own check is left with its cross-field rules;
  * the command line defines one flag per setting (`tfpriv/cli/flags.py`, its help from the
    fields, `--help` grouped by family); nothing outside `tfpriv.cli` defines a flag;
  * a synthesizer takes the fields marked for it (`synthesizer_fields`);
  * `PrivateSettings.dp_config()` builds the family's `DPConfig` from the settings (one builder).

The settings several families read are declared here once (`epochs`, `batch_size`, ...); a family
lists the ones it reads in its dataclass, with its own default where it differs (`epochs(40)`).

Example (a family's settings; adding a setting is one field):
    >>> @dataclasses.dataclass(frozen=True, kw_only=True)
    ... class ToySettings(PrivateSettings):
    ...     epochs: int = epochs(1)
    ...     toy_init: float = setting(0.5, "The centre's initial value.", ge=0)
    >>> make(ToySettings, "toy", toy_init=0.25).epochs
    1
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import typing
from typing import Any, Callable, Mapping

import numpy as np

from tfpriv.errors import UsageError
from tfpriv.data.sampling import SAMPLINGS
from tfpriv.privacy.config import AGGREGATIONS, CLIPPED_SUM_METHODS, CLIPPING_METHODS, DPConfig

__all__ = ["Derived", "PrivateSettings", "Settings", "make", "setting", "synthesizer_fields"]

SPEC = "tfpriv.setting"  # the key of a field's `Spec` in its dataclass metadata
KINDS = (bool, int, float, str, list)  # the types a setting may have (optionally `| None`)
LR_SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class Derived:
    """A default computed from the other settings (e.g. DP-WGAN-GP's learning rate from its batch
    size); `text` says how, for `--help`.

    Example: `learning_rate: float = schema.learning_rate(Derived(lambda v: v["batch_size"] * 3.125e-6,
    "batch_size x 3.125e-6"))`."""
    compute: Callable[[Mapping[str, Any]], Any]
    text: str


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a setting is besides its type: help, default(s), bounds, marks."""
    help: str
    default: Any = None  # a value or a `Derived`
    per_model: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # --model value -> default
    choices: tuple = ()
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    note: str = ""  # said after the bound in an error, e.g. "0: off"
    evaluation: bool = False  # configures only the held-out evaluation
    synthesizer: bool = True  # a synthesizer takes it (not: the data source, the noise, --mode=sample)
    shared: bool = False  # declared here for several families (`--help` lists it with the shared flags)

    def default_for(self, model: str) -> Any:
        return self.per_model.get(model, self.default)


def setting(default: Any = None, help: str = "", *, per_model: Mapping[str, Any] | None = None,
            choices: tuple = (), ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, note: str = "", evaluation: bool = False, synthesizer: bool | None = None,
            shared: bool = False) -> Any:
    """A settings field: its default (or a `Derived` one, or one per --model value), help, bounds and
    marks. Evaluation-only settings are not a synthesizer's unless `synthesizer=True`.

    Example: `critic_steps: int = setting(None, "Critic steps per generator step.", ge=1,
    per_model={"dpwgan_gp": 1, "dpgan": 5})` (the flag `--critic_steps`, checked >= 1)."""
    spec = Spec(help=help, default=default, per_model=dict(per_model or {}), choices=tuple(choices), ge=ge, gt=gt,
                le=le, lt=lt, note=note, evaluation=evaluation,
                synthesizer=(not evaluation) if synthesizer is None else synthesizer, shared=shared)
    plain = None if isinstance(default, Derived) else default
    if isinstance(plain, list):
        return dataclasses.field(default_factory=lambda: list(plain), metadata={SPEC: spec})
    return dataclasses.field(default=plain, metadata={SPEC: spec})


@dataclasses.dataclass(frozen=True)
class Field:
    """A setting of a settings class: its name, type (one of KINDS), whether None is allowed, spec."""
    name: str
    kind: type
    optional: bool
    spec: Spec


@functools.lru_cache(maxsize=None)
def schema(cls: type) -> dict[str, Field]:
    """The settings of `cls` by name, in declaration order (`model` and `given` are not settings)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if SPEC not in f.metadata:
            continue
        kinds = [t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None)]
        kind = typing.get_origin(kinds[0]) or kinds[0] if len(kinds) == 1 else None
        if kind not in KINDS:
            raise TypeError(f"{cls.__name__}.{f.name}: a setting is one of {', '.join(k.__name__ for k in KINDS)} "
                            f"(or that | None), got {hints[f.name]}")
        out[f.name] = Field(f.name, kind, type(None) in typing.get_args(hints[f.name]), f.metadata[SPEC])
    return out


def need(name: str, ok: bool, rule: str, value) -> None:
    """A settings check: `--name: must be <rule>, got <value>` (a library caller sees it without `--`)."""
    if not ok:
        raise UsageError(f"--{name}: must be {rule}, got {value}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def bound_text(f: Field) -> str:
    """The rule of `f`'s bounds as an error says it, e.g. `a finite number >= 0 (0: off)`, `>= 1`, `in [0, 1)`."""
    s = f.spec
    low = ("[", s.ge) if s.ge is not None else ("(", s.gt) if s.gt is not None else None
    high = ("]", s.le) if s.le is not None else (")", s.lt) if s.lt is not None else None
    if low and high:
        rule = f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
    elif f.kind is float and s.gt == 0:
        rule = "a positive finite number"
    else:
        parts = [f"{op} {_number(v)}" for op, v in ((">=", s.ge), (">", s.gt), ("<=", s.le), ("<", s.lt)) if v is not None]
        rule = ("a finite number " if f.kind is float else "") + " and ".join(parts)
    return f"{rule} ({s.note})" if s.note else rule


def bounded(f: Field) -> bool:
    return any(v is not None for v in (f.spec.ge, f.spec.gt, f.spec.le, f.spec.lt))


def within(f: Field, value) -> bool:
    """`value` is within `f`'s bounds (a float with bounds must also be finite)."""
    s = f.spec
    if f.kind is float and not math.isfinite(value):
        return False
    return ((s.ge is None or value >= s.ge) and (s.gt is None or value > s.gt)
            and (s.le is None or value <= s.le) and (s.lt is None or value < s.lt))


def coerce(f: Field, value):
    """`value` as setting `f` holds it (an int stays an int, a number becomes a float, a comma-separated
    string a list), or a UsageError naming the setting."""
    wanted = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}[f.kind]
    if value is None:
        if f.optional:
            return None
        raise UsageError(f"--{f.name}: must be {wanted}, got None")
    kind = f.kind
    if kind is bool and isinstance(value, (bool, np.bool_)):
        return bool(value)
    if kind is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if kind is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is list and isinstance(value, (list, tuple)):
        return list(value)
    if kind is list and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    raise UsageError(f"--{f.name}: must be {wanted}, got {value!r}")


def check(settings) -> None:
    """Every setting of `settings` against its choices and bounds (a UsageError naming the first
    that is outside them)."""
    for f in schema(type(settings)).values():
        value = getattr(settings, f.name)
        if value is None:
            continue
        if f.spec.choices:
            need(f.name, value in f.spec.choices, "one of " + ", ".join(map(str, f.spec.choices)), repr(value))
        if f.kind in (int, float) and bounded(f) and not within(f, value):
            need(f.name, False, bound_text(f), value)


def make(cls: type, model: str, **values):
    """Settings of class `cls` for `--model=model`: each of `values` (checked against its type),
    else the model's default, else the default derived from the others; all checked (`check`).
    `given` records the names of `values`.

    Example: `make(PriVAESettings, "privae", epochs=3).epochs == 3`; a family calls it as
    `JOB.settings(epochs=3)`."""
    fields = schema(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UsageError(f"{unknown[0]}: not a setting of --model={model}")
    out, derived = {}, {}
    for name, f in fields.items():
        if name in values:
            out[name] = coerce(f, values[name])
            continue
        default = f.spec.default_for(model)
        if isinstance(default, Derived):
            derived[name] = default
        else:
            out[name] = list(default) if isinstance(default, list) else default
    for name, default in derived.items():
        out[name] = default.compute(out)
    settings = cls(model=model, given=frozenset(values), **out)
    check(settings)
    return settings


def synthesizer_fields(cls: type) -> tuple[str, ...]:
    """The settings a synthesizer of this family takes (by name): not the data source, the noise or
    the evaluation's.

    Example: `"epochs" in synthesizer_fields(PriVAESettings)` and `"dataset" not in` it."""
    return tuple(name for name, f in schema(cls).items() if f.spec.synthesizer)


def _shared(default: Any, help: str, **spec) -> Callable[..., Any]:
    """The declaration of a setting several families read: `name(default, **changes)` in a family's
    dataclass gives it that family's default (or per-model defaults, or other bounds)."""
    def declare(family_default: Any = default, **changes) -> Any:
        return setting(family_default, help, shared=True, **{**spec, **changes})
    return declare


# The settings several families read, declared once.
dataset = _shared("digits", "digits (bundled, no download), mnist, fashion_mnist, adult, abalone, pinwheel, or "
                  "tfds:<name>.", synthesizer=False)
data_dir = _shared(None, "Folder with the original-format data files (mnist/, fashion_mnist/, adult/, abalone/; or "
                   "the dataset's own folder). Without it mnist is read from the copy bundled with tfpriv; with it "
                   "the files must be there.", synthesizer=False)
seed = _shared(None, "Seed for initialisation, sampling and noise. Default: drawn from the OS (needed for a real "
               "release).", ge=0, le=2**32 - 1)  # what NumPy and TensorFlow accept
verbose = _shared(2, "0 silent, 1 progress bar, 2 one line per epoch (and one every 30 s of a long epoch); > 0 also "
                  "prints progress of long evaluations.", ge=0)
feature_scaling = _shared("auto", "adult/abalone preprocessing: public (fixed public constants and schema; see "
                          "tfpriv/data/uci.py), train (train-split mean/std and categories: not private, refused "
                          "with private training) or auto (public when a model is trained privately, train "
                          "otherwise).", choices=("auto", "public", "train"), synthesizer=False)
epochs = _shared(20, "Training epochs (an epoch is N/B steps).", ge=1)
batch_size = _shared(64, "Expected batch size B = qN (Poisson) or fixed batch size (shuffle).", ge=1)
learning_rate = _shared(1e-3, "Learning rate.", gt=0)
lr_schedule = _shared("constant", "constant, or cosine: the learning rate decays to 0 over the planned epochs "
                      "(Loshchilov & Hutter 2017). Data-independent, so it costs no privacy.", choices=LR_SCHEDULES)
aggregation = _shared("termwise", "none, micro, batch or termwise (see docs/privacy.md).", choices=AGGREGATIONS)
sampling = _shared("poisson", "poisson (each example in a batch with probability B/N: amplification by sampling) or "
                   "shuffle (fixed-size batches of a fresh permutation each epoch, accounted as one Gaussian at half "
                   "the noise multiplier per epoch: a much larger epsilon; docs/privacy.md).", choices=SAMPLINGS)
l2_norm_clip = _shared(1.0, "C: per-example clip norm (C1 of the sample-wise terms in termwise mode).")
batch_clip = _shared(0.5, "C2: per-partition clip norm of batch-wise terms (termwise); 0 drops them from the "
                     "gradient.")
num_partitions = _shared(4, "b: partitions of each batch for batch-wise terms (termwise); 0 = one per example.")
noise_multiplier = _shared(3.5, "z: noise std over clip norm for each clipped block. Not with --epsilon, which "
                           "calibrates it.", synthesizer=False)
epsilon = _shared(None, "Target epsilon: calibrates the noise multiplier for the planned steps (not with "
                  "--noise_multiplier or --aggregation=none).", synthesizer=False)
delta = _shared(None, "delta; must be < 1/N. Default: the power of ten below min(1/N, 1e-5).", synthesizer=False)
accountant = _shared("rdp", "How epsilon is computed from the same events: rdp (dp_accounting's RDP accountant) or "
                     "pld (its privacy-loss-distribution accountant: a tighter epsilon, slower to calibrate). "
                     "Calibration, --max_epsilon and results.json use it.")
max_epsilon = _shared(None, "Hard budget: training stops before a step would exceed it.", synthesizer=False)
max_batch_size = _shared(None, "micro with batch-wise terms: batches above this are skipped (bounds the "
                         "sensitivity).")
clipping = _shared("fast", "fast (ghost norms, per-layer rules), per_example (vectorized_map over examples; exact "
                   "for second-order losses), vectorized (per-example Jacobians) or auto (fast where the first-batch "
                   "check finds it exact, else per_example; one line names each layer's path).", choices=CLIPPING_METHODS)
per_example_chunk = _shared(None, "--clipping=per_example with sample-wise terms only: examples whose gradients are "
                            "computed, clipped and summed at once (fewer: less memory, slower). Default: the whole batch, "
                            "or chunks of equal size holding at most 64 MiB of per-example gradients if it would hold "
                            "more.", ge=1)
clipped_sum = _shared("bookkeeping", "bookkeeping (from the first pass) or reweight (second backward pass).",
                      choices=CLIPPED_SUM_METHODS)
latent_dim = _shared(None, "Latent dimension of the VAE (default per dataset).", ge=1)
beta = _shared(1.0, "Weight of the per-example KL term of the VAE.", ge=0)
num_samples = _shared(None, "--mode=sample: samples to draw (a GAN: also the samples of its final scores).", ge=1,
                      synthesizer=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What every job reads. `model`: the --model value; `given`: the settings the user set
    (flag or explicit value).

    Example: a family without privacy would subclass it; every built-in one subclasses `PrivateSettings`."""
    model: str
    given: frozenset = dataclasses.field(default=frozenset(), compare=False, repr=False)
    dataset: str = dataset()
    data_dir: str | None = data_dir()
    seed: int | None = seed()
    verbose: int = verbose()

    def record(self, exclude: tuple[str, ...] = ("data_dir",)) -> dict:
        """The settings as a JSON-able dict (for results.json)."""
        return {name: getattr(self, name) for name in ("model", *schema(type(self))) if name not in exclude}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivateSettings(Settings):
    """The privacy settings every family reads (every family can train privately).

    Example:
        >>> @dataclasses.dataclass(frozen=True, kw_only=True)
        ... class Mine(PrivateSettings):
        ...     epochs: int = epochs(5)
        >>> make(Mine, "mine", aggregation="micro", noise_multiplier=1.0).dp_config().aggregation
        'micro'
    """
    aggregation: str = aggregation()
    sampling: str = sampling()
    l2_norm_clip: float = l2_norm_clip()
    noise_multiplier: float = noise_multiplier()
    epsilon: float | None = epsilon()
    delta: float | None = delta()
    max_epsilon: float | None = max_epsilon()
    accountant: str = accountant()
    clipping: str = clipping()
    per_example_chunk: int | None = per_example_chunk()

    def dp_config(self, **overrides) -> DPConfig:
        """The `DPConfig` of these settings: each of its fields that is a setting here, the seed, then
        `overrides` (e.g. a GAN's `num_partitions=1`)."""
        names = {f.name for f in dataclasses.fields(DPConfig)}
        values = {name: getattr(self, name) for name in schema(type(self)) if name in names}
        return DPConfig(**{**values, **overrides})
