"""Non-finite and extreme examples get clip factor 0 (dropped), are counted, and never make the update NaN.

One example with features 1e19, 1e30, inf or NaN joins an otherwise normal batch. On every path
(fast with book-keeping or a reweighted pass, per_example, vectorized) and in every mode, the noised
gradient is finite, the clipped sums equal the naive per-example loop (`reference.py`) in which an
example (partition) is dropped when its inputs or its gradient are not finite, and the engine's
`dropped` log counts it. Two models with a tanh layer:

  skip: a tanh branch plus a linear skip from the input, so the extreme example's gradient
        overflows on every path: it is dropped everywhere, and the sample-wise sums equal those of
        the batch without it;
  tanh: the audit's model. The tanh saturates, so 1e19 and 1e30 have an exact, finite gradient
        that the fast path used to turn into inf * 0 = NaN (ghost norm), making every coordinate
        of the update NaN; every path now keeps that example, as the naive loop does.

Also: Conv2D/Conv2DTranspose ghost norms (many positions, partitions) against the Jacobian path;
a finite input that overflows inside the model (on the whole-batch Jacobian computations the
rows are then recomputed each alone, so only the culprit is dropped); `DPModel.fit` summing `dropped` per epoch.
"""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPModel
from tests.privacy import models
from tests.privacy import reference as ref

RTOL = 1e-5
B, C, C2 = 6, 0.5, 0.3
BAD = 0  # row 0 is also the row BatchLayout.gather pads partitions with
VALUES = {"1e19": 1e19, "1e30": 1e30, "inf": np.inf, "nan": np.nan}
PATHS = [("fast", "bookkeeping"), ("fast", "reweight"), ("per_example", "bookkeeping"), ("vectorized", "bookkeeping")]
MODES = {
    "micro": dict(aggregation="micro"),
    "batch": dict(aggregation="batch"),
    "termwise": dict(aggregation="termwise"),
    "micro-psi": dict(aggregation="micro", max_batch_size=20),
    "termwise-psi": dict(aggregation="termwise", num_partitions=3),
    "termwise-psi-singletons": dict(aggregation="termwise", num_partitions=0),
}


def skip_model() -> keras.Model:
    """A tanh branch plus a linear skip from the input (two layers: each adds ops to every traced path)."""
    keras.utils.set_random_seed(0)
    x = keras.Input([7])
    out = keras.layers.Add()([keras.layers.Dense(3, activation="tanh")(x), keras.layers.Dense(3, use_bias=False)(x)])
    return keras.Model(x, out)


MODELS = {"skip": skip_model, "tanh": models.mlp_model}


def engine_for(model, mode: str, clipping: str, clipped_sum: str, noise: float = 0.0) -> DPGradientEngine:
    kw = dict(MODES[mode])
    spec = models.SPEC if ("psi" in mode or mode == "batch") else models.SAMPLE_ONLY
    config = DPConfig(l2_norm_clip=C, batch_clip=C2, noise_multiplier=noise, expected_batch_size=B, seed=1,
                      clipping=clipping, clipped_sum=clipped_sum, **kw)
    return DPGradientEngine(config, model, spec)


def batch_with(value: float) -> tf.Tensor:
    x = tf.random.stateless_normal([B, 7], seed=[1, 2]).numpy()
    x[BAD] = value
    return tf.constant(x)


def usable(v: np.ndarray) -> bool:
    """The engine's rule on a reference gradient: its float32 squared norm is finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.sum(np.square(v, dtype=np.float32), dtype=np.float32)))


def clipped_sum(vectors, keep, clip: float, size: int) -> np.ndarray:
    total = np.zeros(size, np.float32)
    for v, k in zip(vectors, keep):
        if k:
            total = total + ref.clip(v, clip)
    return total


def expected(loss_fn, x: tf.Tensor, variables, mode: str, partition_ids: np.ndarray | None, g: list) -> dict:
    """Naive per-example loop with the drop rule: a NaN/inf input or a non-finite gradient.

    g: the naive loop's per-example gradients of phi (`ref.per_example_sample_grads`)."""
    size = sum(int(np.prod(v.shape)) for v in variables)
    ok = np.isfinite(x.numpy()).reshape(len(x), -1).all(axis=1)
    out = {}
    if mode == "micro-psi":  # psi(batch) is in every example's loss: a bad input drops them all
        shared = ref.grad_of(loss_fn, x, variables, "batch")
        per = [v + shared for v in g]
        keep = [bool(ok.all()) and usable(v) for v in per]
        out["total"] = clipped_sum(per, keep, C, size)
        out["dropped"] = keep.count(False)
        return out
    keep = [k and usable(v) for k, v in zip(ok, g)]
    out["sample"] = clipped_sum(g, keep, C, size)
    out["without"] = clipped_sum(g, [i != BAD for i in range(len(g))], C, size)
    out["dropped"] = keep.count(False)
    out["keep"] = keep
    if partition_ids is not None:
        parts = int(partition_ids.max(initial=-1)) + 1 if mode.endswith("singletons") else 3
        q = ref.per_partition_batch_grads(loss_fn, x, variables, partition_ids, parts)
        keep_psi = [bool(ok[partition_ids == j].all()) and usable(v) for j, v in enumerate(q)]
        out["batch"] = clipped_sum(q, keep_psi, C2, size)
        out["dropped"] += keep_psi.count(False)
        out["keep_psi"] = keep_psi
    return out


def rel_err(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def check_noised(grads, logs, dropped: float, where: str = "") -> None:
    """(a) the noised update is finite, (c) `dropped` counts the bad example (partition), logs finite."""
    assert np.all(np.isfinite(ref.flat(grads))), where
    assert float(logs["dropped"]) == dropped, where
    assert all(np.isfinite(float(v)) for v in logs.values()), where


_REFERENCES: dict = {}


def reference(model_name: str, mode: str, value: str, loss_fn, x, variables, partition_ids) -> dict:
    """`expected`, once per model, mode, value and partition layout (the paths share it); its per-example
    gradients once per model and value (phi is the same in every mode's loss, with or without psi)."""
    key = (model_name, mode, value, None if partition_ids is None else tuple(partition_ids))
    if key not in _REFERENCES:
        if (model_name, value) not in _REFERENCES:
            _REFERENCES[model_name, value] = ref.per_example_sample_grads(loss_fn, x, variables)
        _REFERENCES[key] = expected(loss_fn, x, variables, mode, partition_ids, _REFERENCES[model_name, value])
    return _REFERENCES[key]


def compiled_step(engine: DPGradientEngine, loss_fn):
    """One trace per engine (as under Keras): the un-noised clipped sums and the noised update."""

    @tf.function(input_signature=[tf.TensorSpec([B, 7])])
    def step(x):
        out = engine.clipped_sums(loss_fn, x)
        sums = {k: out[k] for k in ("sample", "batch", "c_phi", "c_psi", "dropped") if out.get(k) is not None}
        sums["partition_ids"] = out["layout"].partition_ids
        grads, logs = engine.gradients(loss_fn, x)
        return sums, grads, logs

    return step


@pytest.mark.parametrize("clipping,clipped_sum_method", PATHS)
@pytest.mark.parametrize("mode", [m for m in MODES if m != "batch"])
@pytest.mark.parametrize("model_name", list(MODELS))
def test_bad_example_is_dropped_counted_and_bounded(model_name, mode, clipping, clipped_sum_method):
    model = MODELS[model_name]()
    loss_fn = models.make_loss_fn(model, with_batch_term="psi" in mode)
    engine = engine_for(model, mode, clipping, clipped_sum_method, noise=1.0)
    step = compiled_step(engine, loss_fn)
    for name, value in VALUES.items():
        x = batch_with(value)
        out, grads, logs = step(x)
        pid = out["partition_ids"].numpy() if mode.startswith("termwise-psi") else None
        want = reference(model_name, mode, name, loss_fn, x, engine.variables, pid)
        where = f"{name} ({model_name}, {mode}, {clipping}/{clipped_sum_method})"
        if mode == "micro-psi":
            got = ref.flat(out["sample"]) + ref.flat(out["batch"])
            assert np.all(np.isfinite(got)) and rel_err(got, want["total"]) < RTOL, where
        else:
            assert np.all(np.isfinite(ref.flat(out["sample"]))), where
            assert rel_err(ref.flat(out["sample"]), want["sample"]) < RTOL, where
            assert (float(out["c_phi"][BAD]) == 0.0) == (not want["keep"][BAD]), where
            if pid is not None:  # the bad example's partition is dropped with it, the others are not
                assert rel_err(ref.flat(out["batch"]), want["batch"]) < RTOL, where
                assert (float(out["c_psi"][pid[BAD]]) == 0.0) == (not want["keep_psi"][pid[BAD]]), where
        assert float(out["dropped"]) == want["dropped"], where
        if model_name == "skip" or not np.isfinite(value):
            assert want["dropped"] >= 1, where  # the scenario really drops the bad example
            if mode != "micro-psi":  # the naive loop over the batch without that example
                assert rel_err(ref.flat(out["sample"]), want["without"]) < RTOL, where
        else:  # tanh saturates: a finite, exact gradient, kept on every path as in the naive loop
            assert want["dropped"] == 0, where
        # gradients() drew its own partitions; with one bad example the count does not depend on them.
        check_noised(grads, logs, want["dropped"], where)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("clipping", ["fast", "per_example", "vectorized"])
@pytest.mark.parametrize("model_name", list(MODELS))
def test_batch_mode_drops_a_non_finite_group(model_name, clipping):
    """batch: the whole batch's gradient is one group; non-finite => factor 0 (noise only), B dropped."""
    model = MODELS[model_name]()
    loss_fn = models.make_loss_fn(model)
    for name, value in VALUES.items():
        x = batch_with(value)
        grads, logs = engine_for(model, "batch", clipping, "bookkeeping").gradients(loss_fn, x)
        with tf.GradientTape() as tape:
            terms = loss_fn(x, BatchLayout.single(B))
            loss = tf.reduce_sum(terms.sample_total()) / B + tf.reduce_sum(terms.batch_total(1))
        full = ref.flat(tape.gradient(loss, model.trainable_variables))
        finite = usable(full)
        assert finite == (model_name == "tanh" and np.isfinite(value)), name
        want = ref.clip(full, C) if finite else np.zeros_like(full)
        assert np.all(np.isfinite(ref.flat(grads))) and rel_err(ref.flat(grads), want) < RTOL, name
        assert float(logs["dropped"]) == (0.0 if finite else B), name
        check_noised(*engine_for(model, "batch", clipping, "bookkeeping", noise=1.0).gradients(loss_fn, x),
                     0.0 if finite else B, name)


def test_conv_ghost_norms_of_an_extreme_example_match_the_jacobian_path():
    """Conv2D/Conv2DTranspose rows over many positions, in partitions, compiled (one trace).

    A saturated 1e19 example is kept with its exact norm (the ghost norm used to be inf * 0); one
    NaN feature drops its example and its partition.
    """
    model = models.conv_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([B, 6, 6, 2], seed=[3, 4]).numpy()
    x[BAD] = 1e19
    x[3, 2, 1, 0] = np.nan
    x = tf.constant(x)
    fast, jac = (engine_for(model, "termwise-psi", clipping, "bookkeeping").clipped_sums(loss_fn, x)
                 for clipping in ("fast", "vectorized"))
    for key in ("sample", "batch"):
        assert np.all(np.isfinite(ref.flat(fast[key]))) and rel_err(ref.flat(fast[key]), ref.flat(jac[key])) < RTOL
    for key in ("sample_sq_norms", "partition_sq_norms"):
        np.testing.assert_allclose(fast[key].numpy(), jac[key].numpy(), rtol=1e-4)
    assert float(fast["c_phi"][BAD]) > 0 and float(fast["c_phi"][3]) == 0 and float(fast["dropped"]) == 2.0
    engine = engine_for(model, "termwise-psi", "fast", "bookkeeping", noise=1.0)
    step = tf.function(lambda x: engine.gradients(loss_fn, x), input_signature=[tf.TensorSpec([None, 6, 6, 2])])
    check_noised(*step(x), 2.0)  # the NaN example and its partition
    check_noised(*step(x[:3]), 0.0)
    assert step.experimental_get_tracing_count() == 1


def overflow_model() -> keras.Model:
    """A linear layer that overflows to inf on features of 3e38, then LayerNormalization (per-example
    gradients in closed form on the fast path), which turns it into NaN."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input([7]), keras.layers.Dense(4), keras.layers.LayerNormalization(),
                                keras.layers.Dense(3)])


ROW_ISOLATED = [("micro", "fast", "bookkeeping"), ("micro", "fast", "reweight"), ("micro", "per_example", "bookkeeping"),
                ("termwise-psi", "fast", "bookkeeping"), ("termwise-psi", "fast", "reweight"),
                ("termwise-psi-singletons", "per_example", "bookkeeping")]
# Rows of one whole-batch forward pass: recomputed alone when any is non-finite (engine._isolated_if_contaminated).
WHOLE_BATCH_JACOBIAN = [("micro", "vectorized", "bookkeeping"), ("termwise-psi", "per_example", "bookkeeping"),
                        ("termwise-psi", "vectorized", "bookkeeping"),
                        ("termwise-psi-singletons", "vectorized", "bookkeeping")]


@pytest.mark.parametrize("mode,clipping,clipped_sum_method", ROW_ISOLATED + WHOLE_BATCH_JACOBIAN)
def test_finite_input_overflowing_inside_the_model_drops_only_its_example(mode, clipping, clipped_sum_method):
    model = overflow_model()
    loss_fn = models.make_loss_fn(model, with_batch_term="psi" in mode)
    x = tf.random.stateless_normal([B, 7], seed=[1, 2]).numpy()
    x[BAD] = 3e38
    x = tf.constant(x)
    assert np.all(np.isnan(model(x).numpy()[BAD]))
    out = engine_for(model, mode, clipping, clipped_sum_method).clipped_sums(loss_fn, x)
    pid = out["layout"].partition_ids.numpy() if "partition_sq_norms" in out else None
    want = reference("overflow", mode, "3e38", loss_fn, x, model.trainable_variables, pid)
    assert want["dropped"] == (1 if pid is None else 2)
    assert float(out["dropped"]) == want["dropped"]
    assert rel_err(ref.flat(out["sample"]), want["sample"]) < RTOL
    if pid is not None:
        assert rel_err(ref.flat(out["batch"]), want["batch"]) < RTOL


class _Tiny(DPModel):
    def __init__(self):
        super().__init__()
        self.net = models.mlp_model()

    def term_spec(self) -> TermSpec:
        return models.SAMPLE_ONLY

    def loss_terms(self, x, layout: BatchLayout, training: bool = True) -> LossTerms:
        return models.make_loss_fn(self.net, with_batch_term=False)(x, layout)


def test_fit_logs_dropped_examples_and_keeps_weights_finite():
    x = tf.random.stateless_normal([12, 7], seed=[5, 6]).numpy()
    x[4] = np.inf
    model = _Tiny()
    model.compile(keras.optimizers.SGD(0.1), num_examples=12, delta=1e-2,
                  dp=DPConfig(aggregation="micro", l2_norm_clip=C, noise_multiplier=1.0, expected_batch_size=6, seed=0))
    history = model.fit(tf.data.Dataset.from_tensor_slices(x).batch(6), epochs=2, verbose=0, sampling="fixed")
    assert history.history["dropped"] == [1.0, 1.0]  # summed over each epoch's steps
    assert np.all(np.isfinite(history.history["loss"]))
    assert all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)
