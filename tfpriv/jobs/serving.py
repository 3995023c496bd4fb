"""SavedModel export of a trained model with serving signatures (`OUTPUT_DIR/saved_model/`).

The export is a plain `tf.Module` saved by `tf.saved_model.save`: loading it needs TensorFlow
only (`tf.saved_model.load(path).signatures[name](**inputs)`), not tfpriv. Every signature
returns a dict of tensors. Randomness is an explicit `seed` input (int64 scalar) drawn with
stateless ops: the same inputs and seed give the same outputs, and the same as the in-process
model (`tfpriv.load(run_dir)`), whose methods the signatures call.

| family | signature | inputs | outputs |
|---|---|---|---|
| VAE | `encode` | `x` float32 [N, *data] | `mean`, `logvar` [N, D] |
| | `decode` | `z` float32 [N, D] | `x`: the mean of p(x\\|z) |
| | `sample` | `n` int32 [], `seed` int64 [] | `x` [n, *data] (prior draw, decoded) |
| GAN | `sample` | `n`, `seed` (+ `labels` int32 [n] if conditional) | `x` [n, 28, 28, 1] |
| filter | `privatize_z` | `z` float32 [N, D], `y_private` int32 [N], `seed` | `z`: released codes |
| | `privatize_x` | `x` float32 [N, *data], `y_private`, `seed` | `z`: released codes of x's encoder mean |
| | `encode`, `decode` | as the VAE's (the frozen stage-1 VAE) | |

A multi-user filter run has `privatize_z_user<k>` / `privatize_x_user<k>` per user instead.
`export_run(run_dir)` writes the export of the run's trained model atomically (a temporary
folder renamed into place), so no half-written export is ever left.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile

import tensorflow as tf
from absl import logging as absl_logging

from tfpriv.models.vae import VAE
from tfpriv.trained import TrainedFilter, TrainedGenerator, load

SAVED_MODEL_DIR = "saved_model"
N = tf.TensorSpec([], tf.int32, name="n")
SEED = tf.TensorSpec([], tf.int64, name="seed")
LABELS = tf.TensorSpec([None], tf.int32, name="labels")
Y_PRIVATE = tf.TensorSpec([None], tf.int32, name="y_private")


def _spec(shape, name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None, *shape], tf.float32, name=name)


def _function(fn, *specs: tf.TensorSpec):
    """A serving function with a fixed input signature. No AutoGraph: the functions have no
    tensor-dependent Python control flow, and tracing the models' own code as written is exact."""
    return tf.function(fn, input_signature=list(specs), autograph=False)


def _vae_functions(vae: VAE, prefix: str = "", sample: bool = True) -> dict:
    data_shape = vae.encoder.inputs[0].shape[1:]

    def encode(x):
        mean, logvar = vae.encode(x)
        return {"mean": mean, "logvar": logvar}

    out = {f"{prefix}encode": _function(encode, _spec(data_shape, "x")),
           f"{prefix}decode": _function(lambda z: {"x": vae.decode(z)}, _spec([vae.latent_dim], "z"))}
    if sample:
        out[f"{prefix}sample"] = _function(lambda n, seed: {"x": vae.sample(n, seed)}, N, SEED)
    return out


def _generator_functions(model: TrainedGenerator) -> dict:
    if model.conditional:
        return {"sample": _function(lambda n, seed, labels: {"x": model.sample(n, seed, labels)}, N, SEED, LABELS)}
    return {"sample": _function(lambda n, seed: {"x": model.sample(n, seed)}, N, SEED)}


def _filter_functions(model: TrainedFilter) -> dict:
    out = _vae_functions(model.vae, sample=False)
    data_shape = model.vae.encoder.inputs[0].shape[1:]
    for user in model.filters:
        suffix = f"_{user}" if user else ""
        privatize_z, privatize_x = _privatize(model, user)
        out[f"privatize_z{suffix}"] = _function(privatize_z, _spec([model.vae.latent_dim], "z"), Y_PRIVATE, SEED)
        out[f"privatize_x{suffix}"] = _function(privatize_x, _spec(data_shape, "x"), Y_PRIVATE, SEED)
    return out


def _privatize(model: TrainedFilter, user: str):
    """User `user`'s privatize_z and privatize_x as functions of the signature's inputs."""
    def privatize_z(z, y_private, seed):
        return {"z": model.privatize_z(z, y_private, seed, user)}

    def privatize_x(x, y_private, seed):
        return {"z": model.privatize_x(x, y_private, seed, user)}

    return privatize_z, privatize_x


def serving_functions(model) -> tuple[dict, list[tf.Variable]]:
    """The signatures' `tf.function`s of a trained model (what `tfpriv.load` returns) and the
    variables they read."""
    if isinstance(model, VAE):
        return _vae_functions(model), list(model.encoder.variables) + list(model.decoder.variables)
    if isinstance(model, TrainedGenerator):
        return _generator_functions(model), list(model.generator.variables)
    if isinstance(model, TrainedFilter):
        variables = list(model.vae.encoder.variables) + list(model.vae.decoder.variables)
        for layer in model.filters.values():
            variables += list(layer.variables)
        return _filter_functions(model), variables
    raise TypeError(f"model: expected a VAE, TrainedGenerator or TrainedFilter, got {type(model).__name__}")


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


def save_serving(model, path: str) -> dict:
    """Writes the SavedModel of `model` to `path` (replaced atomically); returns `describe` of it."""
    functions, variables = serving_functions(model)
    module = tf.Module()
    module.model_variables = variables  # the only tracked state: the functions read these
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
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=parent)
            os.replace(path, os.path.join(old, "export"))
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return describe(functions)


def export_run(run_dir: str) -> dict:
    """Exports the trained model of `run_dir` (`tfpriv.load`) to `run_dir/saved_model`;
    returns {"path", "signatures"} for results.json."""
    path = os.path.join(run_dir, SAVED_MODEL_DIR)
    return {"path": path, "signatures": save_serving(load(run_dir), path)}
