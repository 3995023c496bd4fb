"""Recording layer calls during a forward pass, so the engine can see per-layer inputs and outputs.

`TapRecorder` finds every leaf layer that owns trainable variables, assigns it a rule, and
while `recording()` is active replaces that layer instance's `call` so each call is logged
as a `Tap`. It refuses a model whose trainable variables are not all owned by a leaf layer:
an unrecorded variable would receive an unclipped gradient.

Recording is per thread: under `MirroredStrategy` the replicas trace the step in threads that
interleave at collectives (e.g. a random draw inside the loss), so each thread keeps its own
taps, and the layers stay patched while any thread records.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterable, Iterator, Sequence

import tensorflow as tf

from tfpriv.compat import keras, keras_classes
from tfpriv.errors import ConfigError
from tfpriv.privacy import rules

Layer = keras.layers.Layer  # or a Keras 3 layer: the checks below use `keras_classes` (both Kerases)


def units() -> tuple[type, ...]:
    """Layers tracked as one unit with all their sublayers' variables: an RNN calls its cell inside a
    while_loop, where a cell call cannot be tapped (its gradient is not a tensor of the step's graph)."""
    return keras_classes("layers.RNN") + keras_classes("layers.Bidirectional")


def leaf_layers(roots: Sequence[tf.Module]) -> list[Layer]:
    """Layers (below `roots`) that own trainable variables directly (a `units()` layer: through its
    sublayers, which are then not leaves), each once."""
    found: dict[int, Layer] = {}
    layer_types, unit_types = keras_classes("layers.Layer"), units()
    for root in roots:
        candidates = [root] if isinstance(root, layer_types) else []
        if isinstance(root, layer_types):
            candidates += list(root._flatten_layers(include_self=False, recursive=True))
        inside_units = {id(s) for layer in candidates if isinstance(layer, unit_types)
                        for s in layer._flatten_layers(include_self=False, recursive=True)}
        for layer in candidates:
            if id(layer) not in inside_units and _own_trainable(layer):
                found.setdefault(id(layer), layer)
    return list(found.values())


def _own_trainable(layer: Layer) -> list[tf.Variable]:
    """Trainable variables of `layer` not owned by one of its sublayers (all of a `units()` layer's)."""
    if isinstance(layer, units()):
        return list(layer.trainable_weights)
    sub = {id(v) for s in layer._flatten_layers(include_self=False, recursive=True) for v in s.trainable_weights}
    return [v for v in layer.trainable_weights if id(v) not in sub]


def require_layer_owned(roots: Sequence[tf.Module], variables: Iterable[tf.Variable]) -> None:
    """Refuses (ConfigError) trainable variables that no leaf Keras layer owns on its own.

    The fast path attributes gradients through layer calls, so such a variable would receive
    an unclipped gradient; the per_example path refuses them too, so both paths accept the
    same models.
    """
    owned: set[int] = set()
    for layer in leaf_layers(roots):
        own_vars = _own_trainable(layer)
        if len(own_vars) != len(layer.trainable_weights):
            raise ConfigError(
                f"DP engine: trainable variables not owned by a Keras layer cannot be clipped per example: "
                f"{[v.name for v in own_vars]} belong to {layer.name}, which also calls sublayers")
        owned.update(id(v) for v in own_vars)
    missing = [v.name for v in variables if id(v) not in owned]
    if missing:
        raise ConfigError(
            f"DP engine: trainable variables not owned by a Keras layer cannot be clipped per example: {missing}")


def layer_problem(layer: Layer) -> str | None:
    """Why `layer` cannot be trained with per-example clipping whatever the path, or None."""
    if isinstance(layer, keras_classes("layers.BatchNormalization")) and layer.trainable:
        return ("BatchNormalization mixes the examples of a batch (batch statistics) and updates its moving "
                "statistics from them: tfpriv.fix_model(model) replaces it by GroupNormalization (Sequential "
                "and functional models)")
    if not isinstance(layer, keras_classes("Model")) and getattr(layer, "stateful", False) is True:
        return "stateful=True carries one batch's examples into the next batches' gradients; use stateful=False"
    return None


def clipping_problems(roots: Sequence[tf.Module], variables: Iterable[tf.Variable]) -> list[str]:
    """The reasons the layers under `roots` cannot be clipped per example, one per problem, each
    naming its layer (empty: none found): cross-example layers (`layer_problem`) and trainable
    variables no leaf layer owns (`require_layer_owned`)."""
    layers: dict[int, Layer] = {}
    for root in roots:
        if isinstance(root, keras_classes("layers.Layer")):
            for layer in [root, *root._flatten_layers(include_self=False, recursive=True)]:
                layers.setdefault(id(layer), layer)
    problems = [f"{layer.name}: {why}" for layer in layers.values() if (why := layer_problem(layer)) is not None]
    try:
        require_layer_owned(roots, variables)
    except ConfigError as err:
        problems.append(str(err).removeprefix("DP engine: "))
    return problems


class TapRecorder:
    """Maps variables to (layer, rule) and records layer calls inside `recording()`."""

    def __init__(self, roots: Sequence[tf.Module], variables: Iterable[tf.Variable]):
        variables = list(variables)
        require_layer_owned(roots, variables)
        self.layers = leaf_layers(roots)
        self.rules = {id(layer): rules.rule_for(layer) for layer in self.layers}
        self.layer_vars: dict[int, list[tf.Variable]] = {}
        owner: dict[int, Layer] = {}
        for layer in self.layers:
            own_vars = _own_trainable(layer)
            rule = self.rules[id(layer)]
            rule_vars = rule.variables(layer)
            own = {id(v) for v in own_vars}
            if {id(v) for v in rule_vars} != own:
                raise ConfigError(
                    f"DP engine: rule {rule.name!r} declares the variables {[v.name for v in rule_vars]} of layer "
                    f"{layer.name}, which owns {[v.name for v in own_vars]}: a rule must declare exactly its layer's "
                    "trainable variables (its supports() should refuse this layer)")
            self.layer_vars[id(layer)] = rule_vars
            for v in rule_vars:
                owner[id(v)] = layer
        self.owner = owner
        self._local = threading.local()  # this thread's taps and whether it records
        self._patch = PatchedCalls(self.layers, self._tapped_call)

    @property
    def taps(self) -> list[rules.Tap]:
        """The layer calls of this thread's last recorded forward pass."""
        return getattr(self._local, "taps", [])

    def original_call(self, layer: Layer):
        return self._patch.wrapped.get(id(layer), layer.call)

    @contextlib.contextmanager
    def recording(self):
        """Records this thread's layer calls for the duration of one forward pass (the tracked
        layers' `call` is patched while any thread records)."""
        with self._patch.active():
            self._local.taps, self._local.on = [], True
            try:
                yield self
            finally:
                self._local.on = False

    def _tapped_call(self, layer: Layer, original):
        rule = self.rules[id(layer)]

        @tf.autograph.experimental.do_not_convert
        def call(inputs, *args, **kwargs):
            if not getattr(self._local, "on", False):  # another thread records; this one does not
                return original(inputs, *args, **kwargs)
            try:
                if args:
                    raise TypeError(f"{layer.name}: positional call arguments besides inputs are not supported by "
                                    "the DP engine")
                out, tapped, *saved = rule.forward(layer, original, inputs, kwargs)
            except TypeError as err:  # a refusal naming the layer stays one line (Keras 3 would add its arguments)
                err._keras_call_info_injected = True  # Keras 3's mark of an error annotated already
                raise
            self._local.taps.append(rules.Tap(layer, rule, inputs, tapped, kwargs, *saved))
            return out

        return call


class PatchedCalls:
    """The `call` of `layers` replaced by `wrap(layer, call)` while any thread is inside `active()`;
    each layer's own call restored when the last thread leaves. The wrappers decide per thread what
    to do (their owner's thread-local state): a strategy traces each replica in a thread of its own.
    Patches nest: a patch entered inside another's wraps that one's call and restores it."""

    def __init__(self, layers: Sequence[Layer], wrap: Callable[[Layer, Callable], Callable]):
        self.layers = list(layers)
        self._wrap = wrap
        self.wrapped: dict[int, Callable] = {}  # id(layer) -> the call the last patch wrapped
        self._saved: dict[int, Callable | None] = {}  # id(layer) -> its instance-level call before the patch
        self._lock = threading.Lock()
        self._threads = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self._lock:
            if self._threads == 0:
                for layer in self.layers:
                    self._saved[id(layer)] = layer.__dict__.get("call")
                    self.wrapped[id(layer)] = layer.call
                    object.__setattr__(layer, "call", self._wrap(layer, layer.call))
            self._threads += 1
        try:
            yield
        finally:
            with self._lock:
                self._threads -= 1
                if self._threads == 0:
                    for layer in self.layers:
                        saved = self._saved.pop(id(layer))
                        if saved is None:
                            object.__delattr__(layer, "call")
                        else:
                            object.__setattr__(layer, "call", saved)
