"""`DPState`: what a private model holds beside its Keras state, in one object Keras does not track.

A model keeps it in one attribute, `model.dp_state`, set by a plain assignment in `__init__`.
Neither Keras tracks it: Keras 2 (tf-keras) tracks an assigned value that is a `tf.Module` or
`Trackable` (a `tf.Variable`, a `tf.random.Generator`, the ledger), a metric, a list, tuple or dict
(wrapped), or anything with weights; Keras 3 tracks its variables, layers, metrics and seed
generators and wraps lists, tuples, dicts and sets (and its TensorFlow backend then tracks
`Trackable`s as Keras 2 does). A plain dataclass is none of these, and neither Keras looks inside
it, so the variables it holds (the step counter, the ledger's, the loss stream's state) are in no
model weights, `model.metrics` or checkpoint of the model: `fit_private` checkpoints them under
their own names (ledger, loss_rng, step_count). It must stay a plain object (no `tf.Module` base,
no `trainable_weights`). The model reads its fields through read-only properties (`model.ledger`,
`model.rng`, ...) and writes them here; an audit stands a field in for a while with `swapped`.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import tensorflow as tf

from tfpriv.privacy.accounting import Accountant, PrivacyLedger
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine


@dataclasses.dataclass(eq=False)
class DPState:
    """A private model's DP state. `compile` sets the settings and a new loss stream, keeps the
    ledger and step counter (a resumed run or `load_private` continues them) and drops the engine
    and trackers (`prepare` rebuilds them)."""

    rng: tf.random.Generator  # the loss's random stream (`StreamGenerator`; an audit's stand-in while it runs)
    dp_config: DPConfig | None = None  # None until compile
    num_examples: int | None = None  # N, the accountant's training set size
    delta: float | None = None
    max_epsilon: float | None = None  # the budget `fit` stops before exceeding
    accountant: Accountant | None = None
    engine: DPGradientEngine | None = None  # built by `prepare` on the first batch's shapes
    ledger: PrivacyLedger | None = None  # the steps accounted so far
    step_count: tf.Variable | None = None  # train steps taken (private or not): the sampler's position
    trackers: dict = dataclasses.field(default_factory=dict)  # the logged metrics' trackers, by name
    said_validation: bool = False  # the line that val_* metrics are not private was printed

    @contextlib.contextmanager
    def swapped(self, **fields) -> Iterator[DPState]:
        """Sets `fields` for the block and restores their values after it, e.g. an audit's coupled
        loss stream: `with model.dp_state.swapped(rng=coupled): ...`."""
        unknown = set(fields) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"swapped: {type(self).__name__} has no field {', '.join(sorted(unknown))}")
        saved = {name: getattr(self, name) for name in fields}
        for name, value in fields.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)
