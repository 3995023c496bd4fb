"""pfor for per-example gradients: a rule TensorFlow lacks, and `map_examples` where pfor fails.

`tf.vectorized_map` (pfor) converts each op of the per-example function into one batched op. For
`Conv2DBackpropFilter` whose layer input differs per example (every per-example gradient of a
convolution, and the second-order terms of a gradient penalty), TF 2.15's converter falls back to
a `while_loop` that runs the op once per example ("Conv2DBackpropFilter uses a while_loop. Fix
that!" in `tensorflow/python/ops/parallel_for/pfor.py`). `vectorized_conv_filter_gradients()`
installs, for the duration of a trace, a rule that computes those gradients for all examples at
once: the layer input's patches (the same windows as the convolution, `rules.conv.patches`)
times the output gradient, one batched matmul. Each example's result is computed from its own
rows only, so a NaN/inf in one example cannot reach another's.

The rule replaces the entry of pfor's converter registry (a private table of the pinned
TensorFlow version) only while the context is open; cases it does not cover (loop-invariant
input, NCHW, explicit padding, unknown filter shape) go to TensorFlow's own converter.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from typing import Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops.parallel_for import pfor as _pfor

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.conv import patches

_OP = "Conv2DBackpropFilter"
_local = threading.local()  # this thread's `paths_taken` record, if one is open
# owner -> {per-example input specs: output signature} where pfor failed: later traces go straight to
# tf.map_fn. A stale entry (an owner's id reused) could only cost speed: map_fn's values are pfor's.
_NOT_VECTORIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ANY_SHAPE = None  # the key of an owner pfor is known to fail on, whatever the shapes: {None: reason}


def _filter_gradients(pfor_input, original):
    """pfor converter: [n, b, H, W, C] inputs and [n, b, H', W', C'] gradients -> [n, kh, kw, C, C']."""
    _, inputs_stacked, _ = pfor_input.input(0)
    padding = pfor_input.get_attr("padding")
    shape = pfor_input.outputs[0].shape
    if (not inputs_stacked or pfor_input.get_attr("data_format") != b"NHWC" or padding not in (b"SAME", b"VALID")
            or not shape.is_fully_defined()):
        return original(pfor_input)
    pfor_input.stack_inputs(stack_indices=[2])
    inputs, grads = pfor_input.stacked_input(0), pfor_input.stacked_input(2)
    kh, kw, cin, cout = shape.as_list()
    n = tf.shape(inputs)[0]
    x = tf.reshape(inputs, tf.concat([[-1], tf.shape(inputs)[2:]], 0))
    x.set_shape([None, None, None, cin])
    strides, dilations = pfor_input.get_attr("strides"), pfor_input.get_attr("dilations")
    rows = patches(x, (kh, kw), strides[1:3], dilations[1:3], padding.decode())
    rows = tf.reshape(rows, [n, -1, kh * kw * cin])
    out = tf.einsum("nti,ntj->nij", rows, tf.reshape(grads, [n, -1, cout]))
    return _pfor.wrap(tf.reshape(out, [n, kh, kw, cin, cout]), True)


@contextlib.contextmanager
def vectorized_conv_filter_gradients() -> Iterator[None]:
    """Within the context, pfor vectorizes per-example `Conv2DBackpropFilter` (no while_loop)."""
    registry = _pfor._pfor_converter_registry
    original = registry[_OP]
    registry[_OP] = lambda pfor_input: _filter_gradients(pfor_input, original)
    try:
        yield
    finally:
        registry[_OP] = original


@contextlib.contextmanager
def _quiet_tensorflow_logger() -> Iterator[None]:
    """Silences pfor's error log of a conversion that `map_examples` handles by not vectorizing."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def paths_taken() -> Iterator[dict[str, str]]:
    """Records, instead of logging, how each `map_examples` call traced within the context ran:
    {what: "vectorized" or "map"} (`clipping="auto"` reports them in its one line)."""
    previous = getattr(_local, "taken", None)
    _local.taken = taken = {}
    try:
        yield taken
    finally:
        _local.taken = previous


def remember_known_failures(owner: object, layers) -> None:
    """Records that pfor cannot vectorize `owner`'s per-example functions if `layers` (or their sublayers)
    hold a Keras LSTM or GRU: pfor cannot convert the backward pass of their `while_loop` (TypeError on
    TF 2.15 and 2.21, with or without Embedding or Bidirectional; SimpleRNN converts unless it follows
    an Embedding). `map_examples` then goes straight to `tf.map_fn` instead of paying a failed try."""
    recurrent = keras_classes("layers.LSTM") + keras_classes("layers.GRU")
    for layer in layers:
        for sub in (layer, *layer._flatten_layers(include_self=False, recursive=True)):
            if isinstance(sub, recurrent):
                reason = f"{sub.name} is a {type(sub).__name__}, whose while_loop pfor cannot convert"
                _NOT_VECTORIZED.setdefault(owner, {})[_ANY_SHAPE] = reason
                return


def map_examples(fn: Callable, inputs, what: str = "the model", owner: object = None):
    """`fn` of each example of `inputs`, stacked: vectorized by pfor where TensorFlow can convert
    `fn`, else one example after another (`tf.map_fn`; same values, slower). `what` (whose
    per-example gradients `fn` computes: a layer's name, or the model) is named in the warning,
    or the `paths_taken` record, that says which.

    TF 2.15's pfor cannot convert the backward pass of the `while_loop` of Keras' LSTM and GRU
    (also inside Bidirectional), nor of a SimpleRNN after an Embedding (`TypeError: dtype
    <variant> ...` while tracing). Whether it converts is tried in a separate trace, so a
    failed conversion leaves no ops in the caller's graph. A failed try costs as much as a trace
    (~10 s for a small LSTM model), so it is remembered for `owner` (the engine or layer whose
    per-example function `fn` is, if given): the next trace of the same per-example shapes
    (the training step after the engine's check) goes straight to `tf.map_fn`, as does every trace
    of an owner `remember_known_failures` marked (an LSTM or GRU: no try at all).
    """
    taken = getattr(_local, "taken", None)
    example_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape[1:], t.dtype), inputs)
    key = tuple(tf.nest.flatten(example_spec))
    failed = _NOT_VECTORIZED.get(owner, {}) if owner is not None else {}
    signature = failed.get(key)
    reason = "tried before" if signature is not None else failed.get(_ANY_SHAPE)
    if signature is None:
        if reason is None:
            spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), inputs)
            try:
                with vectorized_conv_filter_gradients(), _quiet_tensorflow_logger():
                    stacked = tf.function(lambda x: tf.vectorized_map(fn, x, fallback_to_while_loop=True),
                                          autograph=False).get_concrete_function(spec)
            except Exception as err:  # noqa: BLE001 -- any conversion failure; an error of fn itself recurs below
                reason = type(err).__name__
            else:
                if taken is not None:
                    taken[what] = "vectorized"
                return stacked(inputs)
        outputs = tf.function(fn, autograph=False).get_concrete_function(example_spec).structured_outputs
        signature = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), outputs)
        if owner is not None:
            _NOT_VECTORIZED.setdefault(owner, {})[key] = signature
    if taken is None:
        tf.get_logger().warning("DP engine: per-example gradients of %s run one example after another (pfor cannot "
                                "vectorize them: %s)", what, reason)
    else:
        taken[what] = "map"
    return tf.map_fn(fn, inputs, fn_output_signature=signature)
