"""pfor_rules.py: per-example convolution filter gradients under vectorized_map equal a per-example loop,
without TensorFlow's while_loop fallback, one example's NaN/inf stays its own, and the registry is restored;
`map_examples` tries pfor once per owner and per-example shapes, then maps one example after another."""
import gc

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops.parallel_for import pfor as _pfor

from tfpriv.privacy import pfor_rules
from tfpriv.privacy.pfor_rules import map_examples, paths_taken, vectorized_conv_filter_gradients

WHILE_LOOP = "Conv2DBackpropFilter uses a while_loop"


def _filter_grad(x, kernel, kwargs):
    """The kernel gradient of sum(tanh(conv(x))^2) for one example x [H, W, C], and d/dx of it squared
    (a second-order term, as a gradient penalty has)."""
    with tf.GradientTape() as outer:
        outer.watch(kernel)
        with tf.GradientTape() as inner:
            inner.watch(x)
            z = tf.nn.conv2d(x[None], kernel, **kwargs)
            value = tf.reduce_sum(tf.tanh(z) ** 2)
        penalty = tf.reduce_sum(inner.gradient(value, x) ** 2)
        total = value + penalty
    return outer.gradient(total, kernel)


CASES = {
    "same-stride2-shallow": ([2, 9, 9, 3], [5, 5, 3, 4], dict(strides=2, padding="SAME")),
    "valid-deep": ([2, 7, 7, 16], [3, 3, 16, 5], dict(strides=1, padding="VALID")),
    "dilated": ([2, 9, 9, 2], [3, 3, 2, 3], dict(strides=1, padding="SAME", dilations=2)),
}


def _dilated_backprop_runs() -> bool:
    """TensorFlow's CPU kernels differentiate a raw dilated convolution only with oneDNN (on by default on
    Intel CPUs with AVX-512, off e.g. on AMD EPYC); Keras' dilated layers never emit one (they use
    space-to-batch), so elsewhere there is nothing to vectorize."""
    try:
        tf.raw_ops.Conv2DBackpropFilter(input=tf.ones([1, 5, 5, 1]), filter_sizes=[3, 3, 1, 1],
                                        out_backprop=tf.ones([1, 5, 5, 1]), strides=[1, 1, 1, 1], padding="SAME",
                                        dilations=[1, 2, 2, 1])
        return True
    except tf.errors.InvalidArgumentError:
        return False


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_vectorized_filter_gradients_equal_the_loop(case, caplog):
    x_shape, k_shape, kwargs = CASES[case]
    if kwargs.get("dilations", 1) > 1 and not _dilated_backprop_runs():
        pytest.skip("this CPU's TensorFlow kernels cannot differentiate a raw dilated convolution (no oneDNN)")
    rng = np.random.default_rng(0)
    xs = tf.constant(rng.normal(size=[4, *x_shape[1:]]), tf.float32)
    kernel = tf.constant(rng.normal(size=k_shape) * 0.3, tf.float32)
    want = np.stack([_filter_grad(xs[i], kernel, kwargs).numpy() for i in range(4)])
    with vectorized_conv_filter_gradients():
        got = tf.function(lambda: tf.vectorized_map(lambda x: _filter_grad(x, kernel, kwargs), xs,
                                                    fallback_to_while_loop=False))()
    # float32 round-off of sums over positions and channels: relative to the largest entry (up to ~40)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert WHILE_LOOP not in caplog.text


def test_without_the_rule_tensorflow_loops_over_the_examples(caplog):
    """What the rule is for: TF's own converter runs this op in a while_loop over the examples."""
    xs = tf.ones([2, 5, 5, 1])
    kernel = tf.ones([3, 3, 1, 2])
    tf.function(lambda: tf.vectorized_map(lambda x: _filter_grad(x, kernel, dict(strides=1, padding="SAME")), xs))()
    assert WHILE_LOOP in caplog.text


def test_a_non_finite_example_does_not_reach_the_others_and_the_registry_is_restored():
    before = _pfor._pfor_converter_registry["Conv2DBackpropFilter"]
    xs = np.random.default_rng(1).normal(size=[3, 6, 6, 2]).astype(np.float32)
    xs[1, 2, 3, 0] = np.inf
    kernel = tf.constant(np.random.default_rng(2).normal(size=[3, 3, 2, 2]) * 0.3, tf.float32)
    kwargs = dict(strides=1, padding="SAME")
    with vectorized_conv_filter_gradients():
        got = tf.vectorized_map(lambda x: _filter_grad(x, kernel, kwargs), tf.constant(xs)).numpy()
    assert _pfor._pfor_converter_registry["Conv2DBackpropFilter"] is before
    assert not np.all(np.isfinite(got[1]))
    for i in (0, 2):
        np.testing.assert_allclose(got[i], _filter_grad(tf.constant(xs[i]), kernel, kwargs).numpy(), rtol=1e-4, atol=1e-5)


class _Owner:
    """Stands for an engine or a layer: whose per-example function is mapped."""


def test_a_failed_vectorization_is_tried_once_per_owner_and_shapes():
    """The first trace of `fn` (pfor's try) fails; later calls succeed. With an owner, the second call
    does not try pfor again (map_fn only); without one, or with other per-example shapes, it does (and
    now vectorizes). The values are fn's either way."""
    traces = []

    def fn(x):
        traces.append(tuple(x.shape))
        if len(traces) == 1:
            raise TypeError("pfor cannot convert this")  # as the LSTM's backward pass fails in pfor
        return x * 2.0

    owner, x = _Owner(), tf.reshape(tf.range(6, dtype=tf.float32), [3, 2])
    with paths_taken() as taken:
        np.testing.assert_array_equal(map_examples(fn, x, owner=owner).numpy(), 2 * x.numpy())
    # the try, the signature's trace, then fn on each of the 3 examples (map_fn runs eagerly here)
    assert taken == {"the model": "map"} and len(traces) == 2 + 3
    with paths_taken() as taken:
        np.testing.assert_array_equal(map_examples(fn, x, owner=owner).numpy(), 2 * x.numpy())
    assert taken == {"the model": "map"} and len(traces) == 5 + 3  # map_fn only: no try, no signature
    with paths_taken() as taken:
        wider = tf.ones([3, 5])
        np.testing.assert_array_equal(map_examples(fn, wider, owner=owner).numpy(), 2 * wider.numpy())
    assert taken == {"the model": "vectorized"}  # other per-example shapes: tried again
    with paths_taken() as taken:
        map_examples(fn, x)
    assert taken == {"the model": "vectorized"}  # no owner: nothing remembered
    assert len(pfor_rules._NOT_VECTORIZED) >= 1
    before = len(pfor_rules._NOT_VECTORIZED)
    del owner
    gc.collect()
    assert len(pfor_rules._NOT_VECTORIZED) == before - 1  # held weakly: gone with its owner


@pytest.mark.parametrize("wrap", ["LSTM", "GRU", "Bidirectional"])
def test_an_owner_holding_an_lstm_or_gru_goes_to_map_fn_without_a_try(monkeypatch, wrap):
    """pfor cannot convert an LSTM's or GRU's backward pass (a try costs a trace): an owner whose layers
    hold one (also inside Bidirectional) maps one example after another at once; a Dense owner still
    tries, and a SimpleRNN (which pfor converts) is not marked."""
    from tfpriv.compat import keras
    L = keras.layers
    recurrent = L.Bidirectional(L.LSTM(3)) if wrap == "Bidirectional" else getattr(L, wrap)(3)
    tries = []
    real = tf.vectorized_map
    monkeypatch.setattr(tf, "vectorized_map", lambda *a, **k: tries.append(1) or real(*a, **k))
    owner, dense_owner, x = _Owner(), _Owner(), tf.ones([3, 2])
    pfor_rules.remember_known_failures(owner, [L.Dense(2), recurrent])
    pfor_rules.remember_known_failures(dense_owner, [L.Dense(2), L.SimpleRNN(2)])
    with paths_taken() as taken:
        np.testing.assert_array_equal(map_examples(lambda e: e * 2.0, x, owner=owner).numpy(), 2 * x.numpy())
    assert taken == {"the model": "map"} and not tries
    with paths_taken() as taken:
        map_examples(lambda e: e * 2.0, x, owner=dense_owner)
    assert taken == {"the model": "vectorized"} and tries
