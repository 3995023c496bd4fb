"""clipping="per_example": clipped sums equal a naive per-example loop and the Jacobian path; noise; refusals.

Every mode of the engine also runs on this path in test_engine.py (PATHS); here: second-order
(gradient-penalty) losses, several terms clipped jointly, singleton partitions, the noise std
and the configurations the path refuses.
"""
import math

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy import per_example
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import LossTerms, TermSpec
from tests.privacy import models
from tests.privacy import reference as ref

RTOL = 1e-5
GP_SPEC = TermSpec(sample=("critic", "gp"))


def engine_for(model, spec, clipping="per_example", **kw):
    base = dict(aggregation="micro", l2_norm_clip=0.5, noise_multiplier=0.0, expected_batch_size=10, seed=1)
    base.update(kw)
    return DPGradientEngine(DPConfig(clipping=clipping, **base), model, spec)


def small_conv(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input([6, 6, 2]),
        keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="tanh"),
        keras.layers.Flatten(),
        keras.layers.Dense(1),
    ])


def gp_loss_fn(model):
    """WGAN-GP-like: phi_i = D(x_i) + (||grad_x D(x_i)|| - 1)^2, two terms clipped jointly."""

    def loss_fn(x, layout):
        with tf.GradientTape() as inner:
            inner.watch(x)
            value = tf.reduce_sum(model(x), axis=1)
        grad = inner.gradient(value, x)
        norm = tf.sqrt(tf.reduce_sum(tf.reshape(tf.square(grad), [tf.shape(x)[0], -1]), axis=1) + 1e-12)
        return LossTerms({"critic": value, "gp": 10.0 * tf.square(norm - 1.0)})

    return loss_fn


def recurrent(layer):
    """[5, 3] sequences -> `layer()` -> Dense: per-example gradients pfor cannot vectorize in TF 2.15."""

    def build(seed: int = 0) -> keras.Model:
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input([5, 3]), layer(), keras.layers.Dense(3)])

    return build


L = keras.layers
SEQUENCE_LOSS = lambda m: models.make_loss_fn(m, with_batch_term=False)  # noqa: E731
CASES = {
    "dense-gp": (models.mlp_model, gp_loss_fn, [8, 7], GP_SPEC),
    "conv-gp": (small_conv, gp_loss_fn, [8, 6, 6, 2], GP_SPEC),
    "dense": (models.mlp_model, lambda m: models.make_loss_fn(m, with_batch_term=False), [8, 7], models.SAMPLE_ONLY),
    "conv": (models.conv_model, lambda m: models.make_loss_fn(m, with_batch_term=False), [8, 6, 6, 2],
             models.SAMPLE_ONLY),
    "simple_rnn": (recurrent(lambda: L.SimpleRNN(4)), SEQUENCE_LOSS, [8, 5, 3], models.SAMPLE_ONLY),
    "gru": (recurrent(lambda: L.GRU(4)), SEQUENCE_LOSS, [8, 5, 3], models.SAMPLE_ONLY),
    "lstm": (recurrent(lambda: L.LSTM(4)), SEQUENCE_LOSS, [8, 5, 3], models.SAMPLE_ONLY),
    "bidirectional": (recurrent(lambda: L.Bidirectional(L.LSTM(2))), SEQUENCE_LOSS, [8, 5, 3], models.SAMPLE_ONLY),
    "time_distributed": (recurrent(lambda: keras.Sequential([L.TimeDistributed(L.Dense(2)), L.Flatten()])),
                         SEQUENCE_LOSS, [8, 5, 3], models.SAMPLE_ONLY),
}


@pytest.mark.parametrize("case", list(CASES))
def test_clipped_sums_equal_naive_loop_and_jacobian_path(case):
    build, make_loss, shape, spec = CASES[case]
    model = build()
    loss_fn = make_loss(model)
    x = tf.random.stateless_normal(shape, seed=[1, 2])
    g = ref.per_example_sample_grads(loss_fn, x, model.trainable_variables)  # each example alone
    norms = np.array([np.linalg.norm(v) for v in g])
    clip = float(np.median(norms))  # about half the examples are clipped
    assert (norms > 1.01 * clip).sum() >= 2
    naive = sum(ref.clip(v, clip) for v in g)
    out = engine_for(model, spec, l2_norm_clip=clip).clipped_sums(loss_fn, x)
    jac = engine_for(model, spec, clipping="vectorized", l2_norm_clip=clip).clipped_sums(loss_fn, x)
    np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), norms, rtol=1e-4)
    assert _rel_err(ref.flat(out["sample"]), naive) < RTOL
    assert _rel_err(ref.flat(out["sample"]), ref.flat(jac["sample"])) < RTOL


@pytest.mark.parametrize("case,chunk", [("dense-gp", 1), ("dense-gp", 3), ("conv", 3), ("lstm", 3)])
def test_clipped_sums_taken_a_chunk_at_a_time_equal_the_naive_loop(case, chunk):
    """8 examples clipped and summed `chunk` at a time (3: the last chunk short), eager and traced; example 4
    has a NaN input and is dropped and counted in its chunk. LSTM: one example after another in each chunk."""
    build, make_loss, shape, spec = CASES[case]
    model = build()
    loss_fn = make_loss(model)
    x = tf.random.stateless_normal(shape, seed=[1, 2])
    g = ref.per_example_sample_grads(loss_fn, x, model.trainable_variables)
    clip = float(np.median([np.linalg.norm(v) for v in g]))
    naive = sum(ref.clip(v, clip) for i, v in enumerate(g) if i != 4)
    x = tf.tensor_scatter_nd_update(x, [[4]], tf.fill([1, *shape[1:]], np.nan))
    engine = engine_for(model, spec, l2_norm_clip=clip, per_example_chunk=chunk)
    assert engine.clips_by_chunk
    out = engine.clipped_sums(loss_fn, x)
    assert float(out["dropped"]) == 1 and out["c_phi"].numpy()[4] == 0 and out["c_phi"].shape == [8]
    assert _rel_err(ref.flat(out["sample"]), naive) < RTOL
    grads, logs = tf.function(lambda x: engine.gradients(loss_fn, x))(x)
    assert float(logs["dropped"]) == 1 and np.isfinite(list(logs.values())).all()
    assert _rel_err(ref.flat(grads) * 10, naive) < RTOL  # expected_batch_size 10


def test_chunks_run_one_after_another():
    """The chunk loop has parallel_iterations=1: with the loop's default (10) the executor runs chunks side
    by side and holds their intermediates together, which is the memory `per_example_chunk` bounds."""
    build, make_loss, shape, spec = CASES["dense-gp"]
    model = build()
    loss_fn = make_loss(model)
    engine = engine_for(model, spec, per_example_chunk=3)
    x = tf.random.stateless_normal(shape, seed=[1, 2])
    graph = tf.function(lambda x: engine.gradients(loss_fn, x)).get_concrete_function(x).graph
    loops = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    assert len(loops) == 1 and loops[0].get_attr("parallel_iterations") == 1


def test_a_chunk_holds_64_mib_of_per_example_gradients_unless_configured(monkeypatch):
    """Automatic chunks only where the expected batch's per-example gradients exceed one; never with fast
    clipping or batch-wise terms (micro's psi needs the whole batch)."""
    model = models.mlp_model()  # 69 float32 parameters: 276 bytes per example
    spec = models.SAMPLE_ONLY
    assert per_example.chunk_size(model.trainable_variables) == 64 * 2**20 // 276
    assert not engine_for(model, spec).clips_by_chunk  # the expected batch (10) fits in one chunk
    assert engine_for(model, spec, per_example_chunk=4).clips_by_chunk
    monkeypatch.setattr(per_example, "CHUNK_BYTES", 276 * 9)
    assert per_example.chunk_size(model.trainable_variables) == 9 and engine_for(model, spec).clips_by_chunk
    # The expected batch in chunks of equal size (10 in 2 of 5, not 9 and then 1 on its own), at most 9.
    assert [per_example.chunk_size(model.trainable_variables, b) for b in (10, 9, 64, 2.5)] == [5, 9, 8, 3]
    assert not engine_for(model, spec, clipping="fast", per_example_chunk=1).clips_by_chunk
    assert not engine_for(model, TermSpec(sample=("a",), batch=("b",)), max_batch_size=20,
                          per_example_chunk=1).clips_by_chunk
    with pytest.raises(ConfigError, match="^per_example_chunk: must be >= 1"):
        DPConfig(aggregation="micro", per_example_chunk=0)


@pytest.mark.parametrize("rnn", [L.SimpleRNN, L.LSTM], ids=["simple_rnn", "lstm"])
def test_text_classifier_clipped_sum_equals_naive_loop(rnn):
    """The issue's Embedding -> RNN -> Dense classifier (pfor fails on both after an Embedding)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([6], dtype="int32"), L.Embedding(50, 8), rnn(8), L.Dense(3)])
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    ids = tf.random.stateless_uniform([8, 6], seed=[3, 4], maxval=50, dtype=tf.int32)
    labels = tf.random.stateless_uniform([8], seed=[5, 6], maxval=3, dtype=tf.int32)

    def loss_fn(data, layout):
        x, y = data
        return LossTerms({"loss": xent(y, model(x))})

    def grad(i):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(loss_fn((ids[i:i + 1], labels[i:i + 1]), None).sample["loss"])
        return ref.flat([tf.convert_to_tensor(g) for g in tape.gradient(value, model.trainable_variables)])

    g = [grad(i) for i in range(8)]
    clip = float(np.median([np.linalg.norm(v) for v in g]))
    out = engine_for(model, TermSpec(sample=("loss",)), l2_norm_clip=clip).clipped_sums(loss_fn, (ids, labels))
    np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), [np.linalg.norm(v) for v in g], rtol=1e-4)
    assert _rel_err(ref.flat(out["sample"]), sum(ref.clip(v, clip) for v in g)) < RTOL


def _rel_err(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)


def test_gradient_penalty_is_not_what_the_fast_path_computes():
    """The second-order term matters: the fast path is refused, this path is verified and exact."""
    model = models.mlp_model()
    loss_fn = gp_loss_fn(model)
    x = tf.random.stateless_normal([6, 7], seed=[3, 4])
    with pytest.raises(ConfigError, match="fast clipping is not exact"):
        engine_for(model, GP_SPEC, clipping="fast").verify(loss_fn, x)
    assert engine_for(model, GP_SPEC).verify(loss_fn, x) is None


def test_singleton_partitions_take_each_examples_batch_term_from_the_vectorized_pass():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([6, 7], seed=[5, 6])
    engine = engine_for(model, models.SPEC, aggregation="termwise", num_partitions=0, batch_clip=0.05)
    out = engine.clipped_sums(loss_fn, x)
    g = ref.per_example_sample_grads(loss_fn, x, engine.variables)
    q = [ref.grad_of(loss_fn, x[i:i + 1], engine.variables, "batch") for i in range(6)]
    assert _rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.5) for v in g)) < RTOL
    assert _rel_err(ref.flat(out["batch"]), sum(ref.clip(v, 0.05) for v in q)) < RTOL
    engine.verify(loss_fn, x)


def test_logged_terms_are_the_batch_means():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([7, 7], seed=[7, 8])
    engine = engine_for(model, models.SPEC, aggregation="termwise", num_partitions=1, batch_clip=0.1)
    _, logs = engine.gradients(loss_fn, x)
    terms = loss_fn(x, engine.layout(7))
    for name in ("rec", "reg"):
        assert float(logs[name]) == pytest.approx(float(tf.reduce_mean(terms.sample[name])), rel=1e-5)
    assert float(logs["div"]) == pytest.approx(float(tf.reduce_sum(terms.batch["div"])), rel=1e-5)


def wide_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input([60]), keras.layers.Dense(150)])   # 9150 coordinates


@pytest.mark.parametrize("aggregation,kw,expected", [
    ("micro", dict(), 1.3 * 0.7 / 32),                                       # z C / B
    ("micro", dict(per_example_chunk=6), 1.3 * 0.7 / 32),                    # clipped and summed 6 at a time
    ("termwise", dict(batch_clip=0.2, num_partitions=0), 1.3 * math.hypot(0.7 / 32, 0.2 / 32)),
])
def test_measured_noise_std_matches_formula(aggregation, kw, expected):
    model = wide_model()
    spec = TermSpec(sample=("rec",), batch=("div",) if aggregation == "termwise" else ())

    def loss_fn(x, layout):
        z = model(x)
        batch = {"div": tf.reduce_sum(tf.square(tf.reduce_sum(layout.gather(z), axis=1)), 1)} if spec.batch else {}
        return LossTerms({"rec": tf.reduce_sum(tf.square(z), 1)}, batch)

    x = tf.random.stateless_normal([20, 60], seed=[1, 1])
    common = dict(aggregation=aggregation, l2_norm_clip=0.7, expected_batch_size=32, seed=3, **kw)
    clean, _ = engine_for(model, spec, **common).gradients(loss_fn, x)
    noisy_engine = engine_for(model, spec, **dict(common, noise_multiplier=1.3))
    assert noisy_engine.noise_stddev == pytest.approx(expected)
    noisy, _ = noisy_engine.gradients(loss_fn, x)
    noise = np.concatenate([(n - c).numpy().ravel() for n, c in zip(noisy, clean)])
    assert np.std(noise) == pytest.approx(expected, rel=0.04)
    assert abs(np.mean(noise)) < 4 * expected / math.sqrt(noise.size)


@pytest.mark.parametrize("chunk", [None, 3])
def test_empty_batch_gives_pure_noise_under_one_trace(chunk):
    """Also in chunks (no chunk at all), traced and eager."""
    model = models.mlp_model()
    loss_fn = gp_loss_fn(model)
    engine = engine_for(model, GP_SPEC, noise_multiplier=1.0, per_example_chunk=chunk)
    step = tf.function(lambda x: engine.gradients(loss_fn, x)[0], input_signature=[tf.TensorSpec([None, 7])])
    empty = step(tf.zeros([0, 7]))
    assert np.std(ref.flat(empty)) == pytest.approx(0.5 / 10, rel=0.3)  # z C / B on 69 coordinates
    assert np.all(np.isfinite(ref.flat(step(tf.random.normal([5, 7])))))
    assert step.experimental_get_tracing_count() == 1
    eager, logs = engine.gradients(loss_fn, tf.zeros([0, 7]))
    assert np.std(ref.flat(eager)) == pytest.approx(0.5 / 10, rel=0.3) and float(logs["dropped"]) == 0


def test_verify_refuses_a_loss_that_differs_as_a_batch_of_one():
    """phi_i scaled by the realised batch size is local, but not the same loss for a batch of one."""
    model = models.mlp_model()

    def scaled(x, layout):
        n = tf.cast(tf.shape(x)[0], tf.float32)
        return LossTerms({"rec": n * tf.reduce_sum(tf.square(model(x)), 1), "reg": tf.zeros([tf.shape(x)[0]])})

    x = tf.random.stateless_normal([6, 7], seed=[9, 10])
    with pytest.raises(ConfigError, match="per-example clipping is not exact.*use clipping='vectorized'"):
        engine_for(model, models.SAMPLE_ONLY).verify(scaled, x)
    engine_for(model, models.SAMPLE_ONLY, clipping="vectorized").verify(scaled, x)


def test_verify_refuses_cross_example_sample_terms():
    model = models.mlp_model()

    def coupled(x, layout):
        z = model(x)
        z = z - tf.reduce_mean(z, axis=0)   # like batch normalisation
        return LossTerms({"rec": tf.reduce_sum(tf.square(z), axis=1), "reg": tf.zeros([tf.shape(x)[0]])})

    with pytest.raises(ConfigError, match="depends on other examples"):
        engine_for(model, models.SAMPLE_ONLY).verify(coupled, tf.random.normal([6, 7]))


def test_unknown_clipping_names_the_options():
    with pytest.raises(ConfigError, match="^clipping: must be one of auto, fast, vectorized, per_example, got 'vmap'"):
        DPConfig(clipping="vmap")
