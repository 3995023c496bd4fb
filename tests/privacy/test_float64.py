"""A float64 model (`keras.backend.set_floatx("float64")`) trains privately on every clipping path, its
norms, clip factors, sums and noise in float64: the traced step's clipped sums equal the naive per-example
loop to 1e-10 (float32 anywhere on the way would leave ~1e-7), the noise has the documented std, and
`make_private` trains an Embedding → LSTM → LayerNorm classifier whose first step is the naive loop's, then
`fit`s it. Also: a model whose variables mix dtypes is refused naming `variables`, a family model built in
float64 naming `model`; `clipped_sum="reweight"` on an Embedding (dense and IndexedSlices gradients in one
condition) trains in both dtypes."""
import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tests.privacy import models
from tests.privacy import reference as ref

B, C, C2 = 6, 0.5, 0.2
SPEC = TermSpec(sample=("phi",), batch=("psi",))
L = keras.layers


@pytest.fixture
def floatx():
    """Layers built inside the test get the dtype it asks for; Keras' default is restored after."""
    def use(dtype: str) -> None:
        keras.backend.set_floatx(dtype)
    yield use
    keras.backend.set_floatx("float32")


def loss_for(model: keras.Model, batch_terms: bool):
    """phi_i = ||tanh f(x_i)||^2; psi_j = ||mean of tanh f over partition j - 0.3||^2, in the model's dtype."""
    def loss_fn(x, layout: BatchLayout) -> LossTerms:
        out = tf.tanh(model(x))
        out = tf.reshape(out, [tf.shape(out)[0], -1])
        sample = {"phi": tf.reduce_sum(out ** 2, axis=1)}
        if not batch_terms:
            return LossTerms(sample)
        counts = tf.reduce_sum(tf.cast(layout.mask, out.dtype), axis=1)
        mean = tf.reduce_sum(layout.gather(out), axis=1) / tf.maximum(counts, 1.0)[:, None]
        return LossTerms(sample, {"psi": tf.reduce_sum(tf.square(mean - 0.3), axis=1) * tf.cast(counts > 0, out.dtype)})
    return loss_fn


# (clipping, clipped_sum, model): the rules on the fast path (Conv2D, Conv2DTranspose, Dense on positions,
# LayerNorm, a fallback layer: models.conv_model); the per-example path's partitions on a small MLP. The
# chunked and vectorized paths computed in float64 before this file (a probe of every path); their sums
# against the naive loop are tests/privacy/test_per_example.py's, in float32.
PATHS = [("fast", "bookkeeping", "conv"), ("fast", "reweight", "conv"), ("per_example", "bookkeeping", "mlp")]
INPUTS = {"conv": (models.conv_model, [B, 6, 6, 2]), "mlp": (models.mlp_model, [B, 7])}


@pytest.mark.parametrize("clipping,clipped_sum,model_name", PATHS)
def test_float64_clipped_sums_equal_the_naive_loop_to_float64_precision(floatx, clipping, clipped_sum, model_name):
    """Term-wise, 3 partitions: per-example and per-partition sums, traced as under Keras; the noised
    update in float64 too."""
    floatx("float64")
    build, shape = INPUTS[model_name]
    model = build()
    loss_fn = loss_for(model, batch_terms=True)
    config = DPConfig(aggregation="termwise", l2_norm_clip=C, batch_clip=C2, noise_multiplier=1.0, num_partitions=3,
                      expected_batch_size=B, seed=1, clipping=clipping, clipped_sum=clipped_sum)
    engine = DPGradientEngine(config, model, SPEC)
    assert {v.dtype for v in engine.variables} == {tf.float64}
    x = tf.random.stateless_normal(shape, seed=[1, 2], dtype=tf.float64)

    @tf.function
    def step(x):
        out = engine.clipped_sums(loss_fn, x)  # un-noised
        return out["sample"], out["batch"], out["layout"].partition_ids

    sample, batch, pid = step(x)
    g = ref.per_example_sample_grads(loss_fn, x, engine.variables)
    assert min(np.linalg.norm(v) for v in g) > C  # every example is really clipped
    np.testing.assert_allclose(ref.flat(sample), np.sum([ref.clip(v, C) for v in g], axis=0), rtol=1e-10, atol=1e-13)
    q = ref.per_partition_batch_grads(loss_fn, x, engine.variables, pid.numpy(), 3)
    np.testing.assert_allclose(ref.flat(batch), np.sum([ref.clip(v, C2) for v in q], axis=0), rtol=1e-10, atol=1e-13)
    if clipping == "fast" and clipped_sum == "bookkeeping":  # the noise, drawn in float64 (eager: no second trace)
        grads, logs = engine.gradients(loss_fn, x)
        assert all(g.dtype == tf.float64 for g in grads) and np.all(np.isfinite(ref.flat(grads)))
        assert float(logs["dropped"]) == 0


def test_float64_noise_has_the_documented_std(floatx):
    """z C / B per coordinate (micro), drawn in float64: 9,150 draws, the sample std within 4 % of it."""
    floatx("float64")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([60]), keras.layers.Dense(150)])
    loss_fn = loss_for(model, batch_terms=False)
    x = tf.random.stateless_normal([20, 60], seed=[1, 1], dtype=tf.float64)
    common = dict(aggregation="micro", l2_norm_clip=0.7, expected_batch_size=32, seed=3)
    spec = TermSpec(sample=("phi",))
    clean, _ = DPGradientEngine(DPConfig(noise_multiplier=0.0, **common), model, spec).gradients(loss_fn, x)
    noisy, _ = DPGradientEngine(DPConfig(noise_multiplier=1.3, **common), model, spec).gradients(loss_fn, x)
    assert all(g.dtype == tf.float64 for g in noisy)
    noise = ref.flat(noisy) - ref.flat(clean)
    assert np.std(noise) == pytest.approx(1.3 * 0.7 / 32, rel=0.04)


def _token_classifier() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([L.Input([5], dtype="int32"), L.Embedding(30, 6, name="embedding"),
                             L.LSTM(4, return_sequences=True, name="lstm"), L.LayerNormalization(name="ln"),
                             L.Flatten(), L.Dense(3, name="dense")])


@pytest.mark.parametrize("dtype,clipped_sum", [("float64", "bookkeeping"), ("float32", "reweight")])
def test_make_private_trains_a_token_classifier_whose_first_step_is_the_naive_loops(floatx, dtype, clipped_sum):
    floatx(dtype)
    model = _token_classifier()
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 30, (16, 5)).astype(np.int32), rng.integers(0, 3, 16).astype(np.int32)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    per_example = []  # the naive loop, in the model's dtype
    for i in range(16):
        with tf.GradientTape() as tape:
            value = loss(y[i:i + 1], model(x[i:i + 1]))
        grads = tape.gradient(value, model.trainable_variables)
        per_example.append(ref.clip(ref.flat(grads), 1.0))
    want = ref.flat(model.trainable_variables) - np.sum(per_example, axis=0) / 16
    dp_model = tfpriv.make_private(model, loss, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                noise_multiplier=0.0, clipped_sum=clipped_sum),
                                   num_examples=16, batch_size=16, delta=1e-3)
    dp_model.compile(optimizer=keras.optimizers.SGD(1.0))
    dp_model.train_on_batch(x, y)
    rules = {layer.name: dp_model.engine.recorder.rules[id(layer)].name for layer in dp_model.engine.recorder.layers}
    assert rules == {"embedding": "embedding", "lstm": "lstm", "ln": "layer_normalization", "dense": "dense"}
    np.testing.assert_allclose(ref.flat(model.trainable_variables), want,
                               rtol=1e-10 if dtype == "float64" else 1e-5, atol=1e-12 if dtype == "float64" else 1e-6)
    if dtype == "float64":  # Poisson batches: a step traced for any batch size, the empty one included
        history = dp_model.fit(x, y, epochs=2, verbose=0)
        assert {v.dtype for v in model.trainable_variables} == {tf.float64}
        assert np.isfinite(history.history["loss"][-1]) and np.all(np.isfinite(ref.flat(model.trainable_variables)))


def test_variables_of_two_dtypes_are_refused_naming_them():
    keras.utils.set_random_seed(0)
    x = keras.Input([3])
    model = keras.Model(x, L.Dense(2, dtype="float64")(L.Dense(4)(x)))
    with pytest.raises(ConfigError, match="^DP engine: the trainable variables must all be float32 or all float64; "
                                          "found float32, float64") as err:
        DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=1.0, expected_batch_size=4), model,
                         TermSpec(sample=("phi",)))
    assert err.value.param == "variables"


def test_a_family_built_in_float64_is_refused_in_one_line_naming_the_model(floatx):
    """The families' losses compute in float32 (constants, partition masks): a PriVAE built under float64 is
    refused before any step, not left to crash in a Mul."""
    from tfpriv.privae.architectures import build_architecture
    from tfpriv.privae.vae import VAE
    floatx("float64")
    vae = VAE(*build_architecture("mlp", (8,), 2))
    vae.compile(keras.optimizers.SGD(0.1), dp=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0,
                                                        expected_batch_size=4), num_examples=16, delta=1e-3)
    with pytest.raises(ConfigError, match=r"^model: VAE computes in float32 only, and it was built in float64 "
                                          r"\(keras.backend.set_floatx\('float64'\)\)") as err:
        vae.fit(np.random.default_rng(0).random((16, 8)), epochs=1, verbose=0)
    assert err.value.param == "model"
