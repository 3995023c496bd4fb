"""clipping.py: the ghost and the instantiated (direct) squared norms agree with the naive per-group sum;
instantiated gradients are reused for the clipped sums."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy import models
from tfpriv.privacy.clipping import (MAX_PARTITION_PRODUCTS, _balanced, _direct_sq_norms, _ghost_pays, _ghost_sq_norms,
                                     _group_outer, _partition_outer)
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rules.conv import ConvRule
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec


def test_ghost_and_direct_norms_equal_the_naive_norm():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=[3, 5, 7]).astype(np.float32), rng.normal(size=[3, 5, 4]).astype(np.float32)
    want = [np.sum(np.einsum("ri,rj->ij", u[g], v[g]) ** 2) for g in range(3)]
    np.testing.assert_allclose(_direct_sq_norms(u, v).numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(_ghost_sq_norms(*_balanced(u, v)).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("du, dv", [(7, 4), (4, 7), (5, 5)])
def test_group_outer_is_each_groups_naive_outer_in_the_orientation_it_says(du, dv):
    """The product transposes the factor with fewer columns: [G, dv, du] exactly when dv < du."""
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=[3, 6, du]).astype(np.float32), rng.normal(size=[3, 6, dv]).astype(np.float32)
    outer = _group_outer(u, v)
    assert outer.transposed == (dv < du)
    got = np.swapaxes(outer.values.numpy(), 1, 2) if outer.transposed else outer.values.numpy()
    np.testing.assert_allclose(got, [np.einsum("ri,rj->ij", u[g], v[g]) for g in range(3)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("du, dv", [(7, 4), (4, 7)])
@pytest.mark.parametrize("parts", [4, MAX_PARTITION_PRODUCTS + 1])
def test_partition_outer_is_each_partitions_naive_sum_and_a_nan_example_stays_in_its_partition(du, dv, parts):
    """One product per partition (P <= MAX_PARTITION_PRODUCTS) or per-example products summed by partition
    (above): each partition's sum of its rows' outer products, empty partitions 0, oriented as it says;
    example 2's NaN makes its own partition NaN and no other."""
    rng = np.random.default_rng(2)
    ids = np.array([0, 2, 2, 0, 2, 1, 0, 2])  # partition 3 (and above) empty
    u, v = rng.normal(size=[8, 5, du]).astype(np.float32), rng.normal(size=[8, 5, dv]).astype(np.float32)
    u[2, 3, 0] = np.nan
    outer = _partition_outer(tf.constant(u), tf.constant(v), BatchLayout(tf.constant(ids), parts))
    assert outer.transposed == (dv < du)
    got = np.swapaxes(outer.values.numpy(), 1, 2) if outer.transposed else outer.values.numpy()
    want = np.zeros([parts, du, dv], np.float32)
    for i, p in enumerate(ids):
        want[p] += np.einsum("ri,rj->ij", u[i], v[i])
    assert np.isnan(got[2]).any() and not np.isnan(np.delete(got, 2, axis=0)).any()
    np.testing.assert_allclose(np.delete(got, 2, axis=0), np.delete(want, 2, axis=0), rtol=1e-5, atol=1e-5)


def test_ghost_is_chosen_for_one_row_and_for_wide_layers_only():
    assert _ghost_pays(1, 3, 3)
    assert not _ghost_pays(196, 16, 32)     # first conv of the conv VAE: 196 positions, thin factors
    assert _ghost_pays(16, 3136, 256)      # a wide Dense layer, partitions of 16 rows


@pytest.mark.parametrize("aggregation", ["termwise", "micro"])
def test_direct_layers_take_their_clipped_sums_from_the_instantiated_gradients(aggregation):
    """The first conv of `models.conv_model` takes the direct norm for both terms; its kernel's
    clipped sum is then the weighted sum of those gradients (the known-answer tests in
    test_engine.py check the values on the same model) and the layer's own pass is not run."""
    model = models.conv_model()
    conv = model.layers[1]
    calls = []
    kernel_sum = ConvRule.kernel_sum

    def counting(self, tap, grad, alive):
        calls.append(tap.layer.name)
        return kernel_sum(self, tap, grad, alive)

    kw = dict(num_partitions=3) if aggregation == "termwise" else dict(max_batch_size=10)
    engine = DPGradientEngine(DPConfig(aggregation=aggregation, l2_norm_clip=0.5, batch_clip=0.3, noise_multiplier=0.0,
                                       expected_batch_size=10, seed=1, **kw), model, models.SPEC)
    x = tf.random.stateless_normal([10, 6, 6, 2], seed=[1, 2])
    layout = engine.layout(tf.shape(x)[0])
    p, _ = engine._pass(models.make_loss_fn(model), x, layout, tf.shape(x)[0])
    p.micro_sq_norms() if aggregation == "micro" else (p.sample_sq_norms(), p.partition_sq_norms())
    assert ("phi", id(conv)) in p._instantiated and ("psi", id(conv)) in p._instantiated
    ConvRule.kernel_sum = counting
    try:
        p.weighted(tf.ones([10]), tf.ones([layout.num_partitions]))
    finally:
        ConvRule.kernel_sum = kernel_sum
    assert conv.name not in calls


@pytest.mark.parametrize("aggregation", ["termwise", "micro"])
def test_an_unknown_batch_size_leaves_each_layers_norm_form_as_it_is(aggregation):
    """A private `fit` traces its step for any batch size (Poisson batches vary). The rules keep each
    layer's positions per example static, so every layer takes the form it takes for a batch of known
    size (with them unknown, every layer took the ghost form: bench/make_private_models.py's convnet
    step 2.4x slower), and the clipped sums are the same."""
    model = models.conv_model()
    kw = dict(num_partitions=3) if aggregation == "termwise" else dict(max_batch_size=10)
    engine = DPGradientEngine(DPConfig(aggregation=aggregation, l2_norm_clip=0.5, batch_clip=0.3, noise_multiplier=0.0,
                                       expected_batch_size=10, seed=1, **kw), model, models.SPEC)
    x = tf.random.stateless_normal([10, 6, 6, 2], seed=[1, 2])
    chosen = {}

    def clipped_sample_sum(batch):
        b = tf.shape(batch)[0]
        p, _ = engine._pass(models.make_loss_fn(model), batch, engine.layout(b), b)
        p.micro_sq_norms() if aggregation == "micro" else (p.sample_sq_norms(), p.partition_sq_norms())
        chosen[batch.shape[0]] = set(p._instantiated)
        return p.weighted(tf.fill([b], 0.1), None)

    static = tf.function(clipped_sample_sum, input_signature=[tf.TensorSpec(x.shape)])(x)
    dynamic = tf.function(clipped_sample_sum, input_signature=[tf.TensorSpec([None, *x.shape[1:]])])(x)
    assert ("phi", id(model.layers[1])) in chosen[10] and chosen[None] == chosen[10]
    for a, b in zip(static, dynamic):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def _drop_example_2(monkeypatch, model, power: int) -> list[bool]:
    """Example 2 of 5 scaled by 1e30, loss sum(model(x) ** power): the engine (micro, clip 0.5) drops it
    and its clipped sum equals the naive loop's over the other four. Returns whether each weighted sum
    `_finite_or` was given came out finite (False: the masked sum was taken)."""
    from tests.privacy import reference as ref
    from tfpriv.privacy import clipping
    from tfpriv.privacy.terms import LossTerms, TermSpec

    x = np.random.default_rng(0).normal(size=[5, *model.input_shape[1:]]).astype(np.float32)
    x[2] *= 1e30

    def loss_fn(inputs, layout):
        return LossTerms({"phi": tf.reduce_sum(model(inputs) ** power, axis=1)})

    taken = []
    finite_or = clipping._finite_or
    monkeypatch.setattr(clipping, "_finite_or", lambda fast, selected: taken.append(
        bool(tf.reduce_all(tf.math.is_finite(fast)))) or finite_or(fast, selected))
    engine = DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=0.5, expected_batch_size=5.0,
                                       clipping="fast"), model, TermSpec(sample=("phi",)))
    out = engine.clipped_sums(loss_fn, tf.constant(x))
    assert int(out["dropped"]) == 1
    kept = np.delete(x, 2, axis=0)
    want = np.sum([ref.clip(g, 0.5) for g in ref.per_example_sample_grads(loss_fn, tf.constant(kept), engine.variables)],
                  axis=0)
    np.testing.assert_allclose(ref.flat(out["sample"]), want, rtol=1e-5, atol=1e-6)
    return taken


def test_an_overflowing_dropped_example_leaves_the_instantiated_clipped_sum_exact(monkeypatch):
    """Pixels of 1e30 through a linear convolution (direct form: 16 positions, thin factors) overflow
    that example's gradient: norm inf, coefficient 0, and its instantiated gradient holds inf, so the
    plain weighted sum is NaN and `_finite_or` takes the masked one (the bias rows are always masked)."""
    from tfpriv.compat import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([6, 6, 1]), keras.layers.Conv2D(2, 3), keras.layers.Flatten()])
    assert _drop_example_2(monkeypatch, model, power=2) == [False]  # the kernel's sum


def test_a_dropped_example_with_an_infinite_output_gradient_leaves_the_book_keeping_sum_exact(monkeypatch):
    """Dense layers take ghost norms, so their clipped sums are book-keeping sums: layer inputs times
    row-weighted output gradients, with the rows of coefficient 0 selected away in both factors (no
    finiteness condition). The loss out**4 of an input of 1e30 overflows: its output gradient is inf,
    its coefficient 0, and 0 * inf would be NaN in a plain sum of the last layer; the sums are exact."""
    from tfpriv.compat import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([3]), keras.layers.Dense(4), keras.layers.Dense(2)])
    assert _drop_example_2(monkeypatch, model, power=4) == []  # no sum went through a condition
    x = np.random.default_rng(0).normal(size=[5, 3]).astype(np.float32)
    x[2] *= 1e30
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(4 * model(x).numpy()[2] ** 3))  # the dropped row's output gradient


@pytest.mark.parametrize("traced", [False, True])
def test_a_layer_called_on_rows_not_a_multiple_of_the_batch_is_refused_by_name(traced):
    """A tapped layer called on B + 1 rows cannot have its gradient attributed to examples: the step
    fails naming the layer calls, eager or traced (one check for all calls)."""
    from tfpriv.compat import keras
    keras.utils.set_random_seed(0)
    first, extra = keras.layers.Dense(3, name="first"), keras.layers.Dense(2, name="extra")

    def loss_fn(x, layout):
        h = first(x)
        out = extra(tf.concat([h, h[:1]], axis=0))[:-1]  # B + 1 rows through `extra`
        return LossTerms({"phi": tf.reduce_sum(out ** 2, axis=1)})

    x = tf.random.stateless_normal([4, 5], seed=[1, 2])
    first(x), extra(first(x))
    engine = DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=0.0,
                                       expected_batch_size=4, clipping="fast", verify=False),
                              [first, extra], TermSpec(sample=("phi",)))

    def step(b):
        return engine.gradients(loss_fn, b)

    if traced:  # a Poisson batch: its size unknown when the step is traced
        step = tf.function(step, input_signature=[tf.TensorSpec([None, 5])])
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a multiple of the batch size.*first, extra"):
        step(x)
