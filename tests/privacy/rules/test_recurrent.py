"""LSTMRule and GRURule: the rule's forward equals Keras' call, and norms and clipped sums equal the naive
loop (return_sequences, go_backwards, both GRU variants, a mask from Embedding(mask_zero=True)), for Keras 2's
layers and Keras 3's."""
import gc
import importlib
import weakref

import numpy as np
import pytest
import tensorflow as tf

from tests.privacy import reference as ref
from tests.privacy.rules.helpers import SPEC, check_model, check_rule
from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rules import GRURule, LSTMRule, rule_for
from tfpriv.privacy.terms import LossTerms

L = keras.layers
LAYERS = {"lstm": L.LSTM, "gru": L.GRU, "gru_reset_before": lambda units, **kw: L.GRU(units, reset_after=False, **kw)}
VARIANTS = {"last": {}, "sequences": {"return_sequences": True},
            "backwards": {"go_backwards": True, "return_sequences": True}}
IDS = np.array([[1, 2, 2, 0, 0], [3, 0, 0, 0, 0], [2, 4, 2, 2, 1], [1, 3, 0, 0, 0]])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", LAYERS)
def test_recurrent_layer(kind, variant):
    x = np.random.default_rng(0).normal(size=[4, 5, 3])
    check_rule(LAYERS[kind](4, **VARIANTS[variant]), x, kind.removesuffix("_reset_before"),
               batch_terms=variant == "last")


# Layer arguments whose forward must equal Keras' call (Keras 2 and 3).
FORWARD_KWARGS = {"last": {}, "zero_output": {"return_sequences": True, "zero_output_for_mask": True},
                  "backwards_state": {"go_backwards": True, "return_state": True, "return_sequences": True},
                  "activations": {"activation": "relu", "recurrent_activation": "hard_sigmoid", "use_bias": False}}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", LAYERS)
def test_recurrent_layer_after_embedding_with_mask_zero(kind, variant):
    keras.utils.set_random_seed(0)
    layer = LAYERS[kind](3, **VARIANTS[variant])
    model = keras.Sequential([L.Input([5], dtype=tf.int32), L.Embedding(5, 2, mask_zero=True, name="emb"), layer])
    check_model(model, IDS, {"emb": "embedding", layer.name: kind.removesuffix("_reset_before")})


@pytest.mark.parametrize("kind", LAYERS)
def test_traced_recurrence_equals_the_naive_loop(kind):
    """Traced (a training step), the recurrence is a `tf.scan`; eagerly (the tests above), a loop of traced steps."""
    keras.utils.set_random_seed(0)
    layer = LAYERS[kind](3, go_backwards=True, return_sequences=True)
    model = keras.Sequential([L.Input([5], dtype=tf.int32), L.Embedding(5, 2, mask_zero=True, name="emb"), layer])
    check_model(model, IDS, {"emb": "embedding", layer.name: kind.removesuffix("_reset_before")}, traced=True)


@pytest.mark.parametrize("kwargs", FORWARD_KWARGS.values(), ids=FORWARD_KWARGS.keys())
@pytest.mark.parametrize("kind", LAYERS)
def test_forward_equals_keras_call(kind, kwargs):
    layer = LAYERS[kind](3, **kwargs)
    x = tf.constant(np.random.default_rng(1).normal(size=[3, 5, 2]), tf.float32)
    mask = tf.constant(IDS[:3] != 0)
    initial = [tf.fill([3, 3], 0.5)] * (2 if kind == "lstm" else 1)
    rule = rule_for(layer)
    # The initial state as a call argument, or with the inputs (as Keras passes a functional model's).
    for call_kwargs, inputs in (({"mask": mask}, x), ({"initial_state": initial}, x), ({}, [x, *initial])):
        want = layer(x, **call_kwargs) if inputs is x else layer(x, initial_state=initial)
        forward = lambda: rule.forward(layer, layer.call, inputs, call_kwargs)[0]  # noqa: E731
        for got in (forward(), tf.function(forward)()):  # eagerly (a loop of traced steps) and traced (tf.scan)
            for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_unsupported_variants_take_the_per_layer_fallback():
    assert isinstance(rule_for(L.LSTM(2)), LSTMRule) and isinstance(rule_for(L.GRU(2)), GRURule)
    for layer in (L.LSTM(2, dropout=0.1), L.GRU(2, recurrent_dropout=0.1), L.LSTM(2, unroll=True),
                  L.GRU(2, time_major=True), L.Bidirectional(L.LSTM(2)), L.SimpleRNN(2)):
        assert rule_for(layer).name == "per_layer"


@pytest.mark.parametrize("clipped_sum", ["bookkeeping", "reweight"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e30], ids=["nan", "inf", "huge"])
def test_a_non_finite_or_huge_example_is_dropped_or_clipped_as_the_naive_loop_does(bad, clipped_sum):
    """NaN/inf: dropped, the others' sum unchanged. 1e30: the gates saturate, its gradient is finite and
    exact (as the naive loop's), not inf * 0 = NaN."""
    keras.utils.set_random_seed(0)
    lstm = L.LSTM(3, return_sequences=True)
    model = keras.Sequential([L.Input([4, 2]), lstm, L.Dense(2)])

    def loss_fn(inputs, layout):
        return LossTerms({"phi": tf.reduce_sum(tf.square(model(inputs)), axis=[1, 2])})

    x = np.random.default_rng(2).normal(size=[3, 4, 2]).astype(np.float32)
    x[1, 2, 0] = bad
    engine = DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=0.1, expected_batch_size=3.0,
                                       clipped_sum=clipped_sum), model, SPEC)
    assert engine.recorder.rules[id(lstm)].name == "lstm"
    out = engine.clipped_sums(loss_fn, tf.constant(x))
    grads = ref.per_example_sample_grads(loss_fn, tf.constant(x), engine.variables)
    keep = [i for i, g in enumerate(grads) if np.isfinite(x[i]).all() and np.isfinite(g).all()]
    assert float(out["dropped"]) == 3 - len(keep) == (0 if bad == 1e30 else 1)
    want = np.sum([ref.clip(grads[i], 0.1) for i in keep], axis=0)
    np.testing.assert_allclose(ref.flat(out["sample"]), want, rtol=1e-5, atol=1e-7)


# -- Keras 3 (`import keras`, TensorFlow backend): the same rules, the same checks ------------------------

def _keras3():
    """Keras 3, or the test is skipped (not installed, or `import keras` is Keras 2 on TensorFlow 2.15)."""
    pytest.importorskip("keras")
    from tfpriv.compat import keras3
    if keras3() is None:
        pytest.skip("Keras 3 needs TensorFlow >= 2.16 (on this stack `import keras` is Keras 2)")
    return keras3()


def _k3_layer(kind: str, units: int, **kwargs):
    k3 = _keras3()
    cls = k3.layers.LSTM if kind == "lstm" else k3.layers.GRU
    return cls(units, **({"reset_after": False} if kind == "gru_reset_before" else {}), **kwargs)


@pytest.mark.parametrize("kind", LAYERS)
def test_keras3_recurrent_layer(kind):
    k3 = _keras3()
    k3.utils.set_random_seed(0)
    layer = _k3_layer(kind, 4)
    model = k3.Sequential([k3.Input([5, 3]), layer])
    x = np.random.default_rng(0).normal(size=[4, 5, 3]).astype(np.float32)
    check_model(model, x, {layer.name: kind.removesuffix("_reset_before")}, batch_terms=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", LAYERS)
def test_keras3_recurrent_layer_after_embedding_with_mask_zero(kind, variant):
    k3 = _keras3()
    k3.utils.set_random_seed(0)
    layer = _k3_layer(kind, 3, **VARIANTS[variant])
    model = k3.Sequential([k3.Input([5], dtype="int32"), k3.layers.Embedding(5, 2, mask_zero=True, name="emb"), layer])
    check_model(model, IDS, {"emb": "embedding", layer.name: kind.removesuffix("_reset_before")})


@pytest.mark.parametrize("kwargs", FORWARD_KWARGS.values(), ids=FORWARD_KWARGS.keys())
@pytest.mark.parametrize("kind", LAYERS)
def test_keras3_forward_equals_keras_call(kind, kwargs):
    layer = _k3_layer(kind, 3, **kwargs)
    x = tf.constant(np.random.default_rng(1).normal(size=[3, 5, 2]), tf.float32)
    mask = tf.constant(IDS[:3] != 0)
    initial = [tf.fill([3, 3], 0.5)] * (2 if kind == "lstm" else 1)
    rule = rule_for(layer)
    for call_kwargs in ({"mask": mask}, {"initial_state": initial}, {"mask": mask, "initial_state": initial}):
        want = layer(x, **call_kwargs)
        forward = lambda: rule.forward(layer, layer.call, x, call_kwargs)[0]  # noqa: E731
        for got in (forward(), tf.function(forward)()):  # eagerly and traced
            assert type(got) is type(want)  # return_state: a tuple, as Keras 3's
            for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_keras3_unsupported_variants_take_the_per_layer_fallback(monkeypatch):
    k3 = _keras3()
    kl = k3.layers
    assert isinstance(rule_for(kl.LSTM(2)), LSTMRule) and isinstance(rule_for(kl.GRU(2, use_cudnn=False)), GRURule)
    for layer in (kl.LSTM(2, dropout=0.1), kl.GRU(2, recurrent_dropout=0.1), kl.LSTM(2, unroll=True),
                  kl.GRU(2, stateful=True), kl.LSTM(2, use_cudnn=True), kl.Bidirectional(kl.LSTM(2)),
                  kl.SimpleRNN(2)):
        assert rule_for(layer).name == "per_layer", layer
    # With a GPU, "auto" runs cuDNN for cuDNN-compatible arguments (masked outputs 0): refused unless use_cudnn=False.
    monkeypatch.setattr(importlib.import_module("keras.src.backend.tensorflow.rnn"), "_is_gpu_available", lambda: True)
    assert rule_for(kl.LSTM(2)).name == rule_for(kl.GRU(2)).name == "per_layer"
    assert rule_for(kl.LSTM(2, use_cudnn=False)).name == "lstm"
    assert rule_for(kl.GRU(2, reset_after=False)).name == "gru"  # not cuDNN-compatible: Keras runs backend.rnn


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_an_eager_forward_keeps_no_layer_alive(kind):
    """The traced step kept for an eager forward lives as long as its layer and does not keep it alive."""
    layer = LAYERS[kind](2)
    layer(tf.ones([2, 3, 2]))  # built
    rule = rule_for(layer)
    rule.forward(layer, layer.call, tf.ones([2, 3, 2]), {})
    assert layer in rule._traced
    alive = weakref.ref(layer)
    del layer
    gc.collect()
    assert alive() is None
