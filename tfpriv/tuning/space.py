"""What a tuning job searches and how it scores a trial, as data: the rules of a search space, the
`Objective`, and a family's `--tune` defaults (`FamilyTuning`). Nothing here imports keras-tuner (and
Keras 3 with it): the families' jobs and the command line import this module on every run,
`tfpriv.tuning.tuner` only when they tune."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping

from tfpriv.errors import ConfigError, UsageError

# Hyperparameters that never change a trial's privacy event (noise std scales with the clip norm).
NEUTRAL_KEYS = ("learning_rate", "l2_norm_clip")

Space = Mapping[str, Mapping]

# Where an objective's metrics are computed from: the test split, or data declared public (outside
# the training set) may choose among private trials; "private" (fitted or measured on the training
# data, or undeclared) only among non-private ones.
READS = ("test", "public", "private")


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the tuner optimises: a weighted sum of metrics of the run's results.json, and the data
    those metrics read (`reads`, one of `READS`; undeclared is "private")."""

    name: str
    direction: str = "max"
    weights: Mapping[str, float] | None = None  # metric -> weight; default {name: 1}
    reads: str = "private"

    def __post_init__(self):
        if self.direction not in ("min", "max"):
            raise ConfigError(f"direction: must be min or max, got {self.direction!r}")
        if self.reads not in READS:
            raise ConfigError(f"objective: {self.name}: reads must be one of {', '.join(READS)}, got {self.reads!r}")

    @property
    def terms(self) -> Mapping[str, float]:
        return self.weights or {self.name: 1.0}

    def score(self, results: dict) -> float:
        metrics = results.get("metrics", {})
        missing = sorted(k for k in self.terms if k not in metrics)
        if missing:
            raise ConfigError(f"objective: {self.name} needs the metrics {', '.join(missing)}, which the run's "
                              "results.json does not have")
        return float(sum(w * float(metrics[k]) for k, w in self.terms.items()))


def check_space(space: Space, neutral: tuple[str, ...] = NEUTRAL_KEYS) -> None:
    """A space maps names to {"type": "float"|"int", "min", "max"[, "log"]} or {"type": "choice", "values"}."""
    if not space:
        raise ConfigError("space: is empty; give at least one hyperparameter")
    for name, spec in space.items():
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind == "choice":
            if not isinstance(spec.get("values"), (list, tuple)) or not spec["values"]:
                raise ConfigError(f"space.{name}: a choice needs a non-empty 'values' list")
            if len({type(v) for v in spec["values"]}) > 1 or type(spec["values"][0]) not in (bool, int, float, str):
                raise ConfigError(f"space.{name}: a choice's values must be numbers, strings or booleans, all of one "
                                  f"type (keras-tuner's rule), got {list(spec['values'])}")
        elif kind in ("float", "int"):
            number = int if kind == "int" else (int, float)
            bounds = [spec.get("min"), spec.get("max")]
            if not all(isinstance(v, number) and not isinstance(v, bool) for v in bounds) or bounds[0] > bounds[1]:
                raise ConfigError(f"space.{name}: a {kind} range needs {kind} min <= max, got {dict(spec)}")
            if spec.get("log") and not spec["min"] > 0:
                raise ConfigError(f"space.{name}: a log range needs min > 0, got {spec['min']}")
            if name not in neutral:
                raise ConfigError(f"space.{name}: may change a trial's privacy, so it must be a choice (the job's "
                                  f"epsilon is the worst case over the choices); ranges only for {', '.join(neutral)}")
        else:
            raise ConfigError(f"space.{name}: type must be float, int or choice, got {kind!r}")


def privacy_configurations(space: Space, neutral: tuple[str, ...] = NEUTRAL_KEYS) -> list[dict]:
    """Every combination of the space's choices that may change a trial's privacy event."""
    keys = sorted(k for k, spec in space.items() if spec["type"] == "choice" and k not in neutral)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(space[k]["values"] for k in keys))]


@dataclasses.dataclass(frozen=True)
class FamilyTuning:
    """A family's tuning defaults: its search space, its objectives (the first is the default; each
    declares the data it reads, `Objective.reads`), the hyperparameters that never change a trial's
    privacy event (may be ranges) and the settings every trial runs with (e.g. the metrics its
    objectives read)."""

    space: Space
    objectives: tuple[Objective, ...]
    neutral: tuple[str, ...] = NEUTRAL_KEYS
    scope: str | None = None  # what a trial's epsilon covers, when the family's record says more than "the run"
    trial_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def objective(self, name: str | None) -> Objective:
        if name is None:
            return self.objectives[0]
        for objective in self.objectives:
            if objective.name == name:
                return objective
        raise UsageError(f"--objective: must be one of {', '.join(o.name for o in self.objectives)}, got {name!r}")
