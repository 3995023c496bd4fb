"""What a family declares for `--tune`: its default search space and its named objectives, as data."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from tfpriv.errors import UsageError
from tfpriv.tuning.tuner import NEUTRAL_KEYS, Objective


@dataclasses.dataclass(frozen=True)
class FamilyTuning:
    """A family's tuning defaults: its search space, its objectives (the first is the default; each
    declares the data it reads, `Objective.reads`), the hyperparameters that never change a trial's
    privacy event (may be ranges) and the settings every trial runs with (e.g. the metrics its
    objectives read)."""

    space: Mapping[str, Mapping]
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
