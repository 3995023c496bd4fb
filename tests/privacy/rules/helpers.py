"""Checks one rule on a one-layer model: its per-example norms and clipped sums equal the naive loop."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tests.privacy import reference as ref
from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

SPEC = TermSpec(sample=("phi",))
WITH_BATCH = TermSpec(sample=("phi",), batch=("psi",))


def check_rule(layer: keras.layers.Layer, x: np.ndarray, rule_name: str, clip: float = 0.5,
               batch_terms: bool = False) -> None:
    """Asserts `layer` gets `rule_name` and that the engine's clipped sum equals the naive loop.

    Integer `x` (token ids) is passed as int32. `batch_terms`: also a batch-wise term, checked
    term-wise (per-partition norms and sums) and in micro mode (each example with the batch's term).
    """
    keras.utils.set_random_seed(0)
    dtype = tf.int32 if np.issubdtype(np.asarray(x).dtype, np.integer) else tf.float32
    model = keras.Sequential([keras.Input(x.shape[1:], dtype=dtype), layer])
    check_model(model, x, {layer.name: rule_name}, clip, batch_terms)


def check_model(model: keras.Model, x: np.ndarray, rule_names: dict[str, str], clip: float = 0.5,
                batch_terms: bool = False, traced: bool = False) -> None:
    """`check_rule` for a whole model: rule_names maps layer names to the rules they must get. `traced`: the
    engine's sums inside one `tf.function`, as a training step runs them (rules may run differently eagerly)."""
    dtype = tf.int32 if np.issubdtype(np.asarray(x).dtype, np.integer) else tf.float32

    def loss_fn(inputs, layout: BatchLayout):
        out = tf.tanh(model(inputs))
        out = tf.reshape(out, [tf.shape(out)[0], -1])
        terms = {"phi": tf.reduce_sum(out ** 2, axis=1)}
        if not batch_terms:
            return LossTerms(terms)
        counts = tf.reduce_sum(layout.mask, axis=1)
        mean = tf.reduce_sum(layout.gather(out), axis=1) / tf.maximum(counts, 1.0)[:, None]
        return LossTerms(terms, {"psi": tf.reduce_sum(tf.square(mean - 0.3), axis=1) * tf.cast(counts > 0, tf.float32)})

    x = tf.constant(x, dtype)
    n = len(x)
    naive: dict = {}  # the naive loop's gradients, once: both methods sum the same per-example gradients
    for clipped_sum in ("bookkeeping", "reweight"):
        config = DPConfig(aggregation="micro", l2_norm_clip=clip, expected_batch_size=float(n), clipped_sum=clipped_sum,
                          max_batch_size=n + 1 if batch_terms else None)
        engine = DPGradientEngine(config, model, WITH_BATCH if batch_terms else SPEC)
        recorder = engine.recorder
        assert {layer.name: recorder.rules[id(layer)].name for layer in recorder.layers} == rule_names
        out = _clipped_sums(engine, loss_fn, x, traced)
        if not naive:
            naive["phi"] = ref.per_example_sample_grads(loss_fn, x, engine.variables)
            if batch_terms:
                naive["psi"] = ref.grad_of(loss_fn, x, engine.variables, "batch")
        grads = naive["phi"]
        if batch_terms:
            micro = [g + naive["psi"] for g in grads]
            np.testing.assert_allclose(np.sqrt(out["micro_sq_norms"].numpy()), [np.linalg.norm(g) for g in micro],
                                       rtol=1e-4)
            np.testing.assert_allclose(ref.flat(out["sample"]) + ref.flat(out["batch"]),
                                       np.sum([ref.clip(g, clip) for g in micro], axis=0), rtol=1e-4, atol=1e-6)
            check_termwise(engine.variables, model, loss_fn, x, clip, clipped_sum, naive)
        np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), [np.linalg.norm(g) for g in grads],
                                   rtol=1e-4)
        if not batch_terms:
            want = np.sum([ref.clip(g, clip) for g in grads], axis=0)
            np.testing.assert_allclose(ref.flat(out["sample"]), want, rtol=1e-4, atol=1e-6)


def _clipped_sums(engine: DPGradientEngine, loss_fn, x: tf.Tensor, traced: bool) -> dict:
    if not traced:
        return engine.clipped_sums(loss_fn, x)
    keys = ("sample", "batch", "sample_sq_norms", "micro_sq_norms")
    return tf.function(lambda: {k: v for k, v in engine.clipped_sums(loss_fn, x).items() if k in keys})()


def check_termwise(variables, model, loss_fn, x: tf.Tensor, clip: float, clipped_sum: str, naive: dict) -> None:
    """Term-wise with 3 partitions: per-partition norms and clipped sums of the batch-wise term.

    naive: the naive loop's gradients by partition layout, filled here (the methods draw the same partitions)."""
    config = DPConfig(aggregation="termwise", l2_norm_clip=clip, batch_clip=clip / 2, num_partitions=3,
                      expected_batch_size=float(len(x)), clipped_sum=clipped_sum, seed=1)
    engine = DPGradientEngine(config, model, WITH_BATCH)
    out = engine.clipped_sums(loss_fn, x)
    pid = out["layout"].partition_ids.numpy()
    key = ("partitions", tuple(pid))
    if key not in naive:
        naive[key] = ref.per_partition_batch_grads(loss_fn, x, variables, pid, 3)
    grads = naive[key]
    np.testing.assert_allclose(np.sqrt(out["partition_sq_norms"].numpy()), [np.linalg.norm(g) for g in grads],
                               rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(ref.flat(out["batch"]), np.sum([ref.clip(g, clip / 2) for g in grads], axis=0),
                               rtol=1e-4, atol=1e-6)


def check_make_private(keras_model: keras.Model, x: np.ndarray, y: np.ndarray, rule_names: dict[str, str]) -> None:
    """`make_private` + `fit` trains `keras_model` on the fast path and reports ε.

    rule_names: layer name -> the rule its variables must get (not the per-layer fallback).
    """
    import tfpriv
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    batch = 16
    dp_model = tfpriv.make_private(keras_model, loss=loss,
                                   config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                   num_examples=len(x), batch_size=batch, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x, y, epochs=1, verbose=0)
    recorder = dp_model.engine.recorder
    got = {layer.name: recorder.rules[id(layer)].name for layer in recorder.layers}
    assert {name: got.get(name) for name in rule_names} == rule_names
    assert history.history["epsilon"][-1] > 0 and np.isfinite(history.history["loss"][-1])
