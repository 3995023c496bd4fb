"""The SavedModel writer of every family (`OUTPUT_DIR/saved_model/`): its serving signatures, saved atomically.

The export is a plain `tf.Module` saved by `tf.saved_model.save`: loading it needs TensorFlow
only (`tf.saved_model.load(path).signatures[name](**inputs)`), not tfpriv. Every signature
returns a dict of tensors; `assets/privacy_statement.json` is the run's privacy statement
(`tfpriv.privacy.statement`, the same as results.json's `privacy_statement`).
Randomness is an explicit `seed` input (int64 scalar) drawn with
stateless ops (`seed_pair`): the same inputs and seed give the same outputs, and the same as the
in-process model (`tfpriv.load(run_dir)`), whose methods the signatures call.

A family declares its signatures as `Family.serving(trained) -> Serving` (the built-in ones are
listed in `tfpriv.export`); `export(run_dir, family)` loads the run's trained model with
`Family.load` and writes its export atomically (a temporary folder renamed into place), so no
half-written export is ever left.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from typing import NamedTuple

import tensorflow as tf
from absl import logging as absl_logging

from tfpriv.privacy.statement import write_statement
from tfpriv.run_folder import RESULTS_FILE, SAVED_MODEL_DIR

N = tf.TensorSpec([], tf.int32, name="n")
SEED = tf.TensorSpec([], tf.int64, name="seed")
LABELS = tf.TensorSpec([None], tf.int32, name="labels")
Y_PRIVATE = tf.TensorSpec([None], tf.int32, name="y_private")


__all__ = ["N", "SEED", "Serving", "function", "seed_pair"]  # what a family's serving needs


class Serving(NamedTuple):
    """A trained model's signatures (name -> `tf.function` with an input signature) and the variables they read.

    Example: `Serving({"sample": function(lambda n, seed: {"x": model.sample(n, seed)}, N, SEED)},
    [model.centre])` (the toy family's, docs/ARCHITECTURE.md)."""
    functions: dict
    variables: list


def seed_pair(seed, stream: int) -> tf.Tensor:
    """The stateless seed [seed, stream] (int64) of one draw.

    Example: `tf.random.stateless_normal([n, d], seed=seed_pair(seed, 0))`."""
    return tf.stack([tf.cast(seed, tf.int64), tf.constant(stream, tf.int64)])


def spec(shape, name: str) -> tf.TensorSpec:
    """A float32 batch input [None, *shape] named `name`."""
    return tf.TensorSpec([None, *shape], tf.float32, name=name)


def function(fn, *specs: tf.TensorSpec):
    """A serving function with a fixed input signature. No AutoGraph: the functions have no
    tensor-dependent Python control flow, and tracing the models' own code as written is exact.

    Example: `function(lambda n, seed: {"x": model.sample(n, seed)}, N, SEED)` (inputs `n`: int32, `seed`: int64)."""
    return tf.function(fn, input_signature=list(specs), autograph=False)


def describe(functions: dict) -> dict:
    """{signature: {"inputs": {name: "dtype[shape]"}, "outputs": [names]}} for results.json."""
    out = {}
    for name, fn in sorted(functions.items()):
        concrete = fn.get_concrete_function()
        inputs = {spec.name: f"{spec.dtype.name}{list(spec.shape)}" for spec in fn.input_signature}
        out[name] = {"inputs": inputs, "outputs": sorted(concrete.structured_outputs)}
    return out


@contextlib.contextmanager
def _quiet():
    """tf.saved_model.save logs every file it writes and every renamed input at INFO: keep a run's output clean."""
    logger, verbosity = tf.get_logger(), absl_logging.get_verbosity()
    level = logger.level
    logger.setLevel(logging.WARNING)
    absl_logging.set_verbosity(absl_logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        absl_logging.set_verbosity(verbosity)


def save_serving(serving: Serving, path: str, statement: dict | None = None) -> dict:
    """Writes the SavedModel of `serving` to `path` (replaced atomically), with the privacy `statement`
    (`tfpriv.privacy.statement`) in `assets/privacy_statement.json` if given; returns `describe` of it."""
    functions, variables = serving
    module = tf.Module()
    module.model_variables = list(variables)  # the only tracked state: the functions read these
    for name, fn in functions.items():
        setattr(module, name, fn)  # also callable as loaded.<name>(...)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    old = None
    try:
        with _quiet():
            tf.saved_model.save(module, tmp, signatures={name: fn.get_concrete_function()
                                                         for name, fn in functions.items()})
        if statement is not None:
            write_statement(tmp, statement)
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=parent)
            os.replace(path, os.path.join(old, "export"))
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return describe(functions)


def export(run_dir: str, family, path: str | None = None, statement: dict | None = None) -> dict:
    """Exports the trained model of `run_dir` (`family.load`, its signatures `family.serving`) to
    `path` (default `run_dir/saved_model`) with its privacy statement (`statement`, default the
    `privacy_statement` of the run's results.json, if it has one); returns {"path", "signatures"}."""
    path = path or os.path.join(run_dir, SAVED_MODEL_DIR)
    statement = statement if statement is not None else run_statement(run_dir)
    return {"path": path, "signatures": save_serving(family.serving(family.load(run_dir)), path, statement)}


def run_statement(run_dir: str) -> dict | None:
    """The privacy statement recorded in `run_dir/results.json`, or None (none recorded, no results.json)."""
    try:
        with open(os.path.join(run_dir, RESULTS_FILE)) as f:
            return json.load(f).get("privacy_statement")
    except (OSError, ValueError, AttributeError):
        return None
