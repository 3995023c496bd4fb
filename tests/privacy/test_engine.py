"""The engine's clipped sums equal a naive per-example loop, in every mode and on every path."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine, public_batch
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tests.privacy import models
from tests.privacy import reference as ref

RTOL = 1e-5
PATHS = [("fast", "bookkeeping"), ("fast", "reweight"), ("vectorized", "bookkeeping"), ("per_example", "bookkeeping")]


def rel_err(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)


_NAIVE: dict = {}


def naive(key: tuple, compute):
    """`compute()` (the naive loop's gradients) once per model, loss, batch and partition layout: the paths
    share it (each test rebuilds its model from the same seed)."""
    if key not in _NAIVE:
        _NAIVE[key] = compute()
    return _NAIVE[key]


def make_engine(model, spec=models.SPEC, **kw):
    base = dict(aggregation="termwise", l2_norm_clip=0.5, batch_clip=0.3, noise_multiplier=0.0,
                num_partitions=3, expected_batch_size=10, seed=1)
    base.update(kw)
    return DPGradientEngine(DPConfig(**base), model, spec)


@pytest.mark.parametrize("clipping,clipped_sum", PATHS)
@pytest.mark.parametrize("shared", [False, True], ids=["once", "layers-called-twice"])
def test_termwise_clipped_sums_match_naive_loop(clipping, clipped_sum, shared):
    model = models.conv_model()
    loss_fn = models.make_loss_fn(model, shared_twice=shared)
    x = tf.random.stateless_normal([10, 6, 6, 2], seed=[1, 2])
    engine = make_engine(model, clipping=clipping, clipped_sum=clipped_sum)
    out = engine.clipped_sums(loss_fn, x)
    pid = out["layout"].partition_ids.numpy()

    g = naive(("termwise", shared), lambda: ref.per_example_sample_grads(loss_fn, x, engine.variables))
    np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), [np.linalg.norm(v) for v in g], rtol=1e-4)
    assert rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.5) for v in g)) < RTOL

    q = naive(("termwise", shared, tuple(pid)),
              lambda: ref.per_partition_batch_grads(loss_fn, x, engine.variables, pid, 3))
    np.testing.assert_allclose(np.sqrt(out["partition_sq_norms"].numpy()), [np.linalg.norm(v) for v in q], rtol=1e-4)
    assert rel_err(ref.flat(out["batch"]), sum(ref.clip(v, 0.3) for v in q)) < RTOL
    # every example's phi-gradient is larger than C1 here, so clipping really happened
    assert min(np.linalg.norm(v) for v in g) > 0.5


@pytest.mark.parametrize("clipping,clipped_sum", PATHS)
def test_micro_without_batch_terms_is_dp_sgd(clipping, clipped_sum):
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model, with_batch_term=False)
    x = tf.random.stateless_normal([9, 7], seed=[3, 4])
    engine = make_engine(model, spec=models.SAMPLE_ONLY, aggregation="micro", l2_norm_clip=0.7,
                         clipping=clipping, clipped_sum=clipped_sum)
    out = engine.clipped_sums(loss_fn, x)
    g = naive(("micro",), lambda: ref.per_example_sample_grads(loss_fn, x, engine.variables))
    assert rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.7) for v in g)) < RTOL
    assert "batch" not in out


@pytest.mark.parametrize("clipping,clipped_sum", PATHS)
def test_micro_with_batch_term_clips_each_example_with_the_shared_term(clipping, clipped_sum):
    """Paper Table 1, micro: clip grad(phi_i + psi(batch)) per example."""
    model = models.conv_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([8, 6, 6, 2], seed=[5, 6])
    engine = make_engine(model, aggregation="micro", l2_norm_clip=2.0, max_batch_size=20,
                         clipping=clipping, clipped_sum=clipped_sum)
    out = engine.clipped_sums(loss_fn, x)
    per = naive(("micro-psi",), lambda: [v + ref.grad_of(loss_fn, x, engine.variables, "batch")
                                         for v in ref.per_example_sample_grads(loss_fn, x, engine.variables)])
    np.testing.assert_allclose(np.sqrt(out["micro_sq_norms"].numpy()), [np.linalg.norm(v) for v in per], rtol=1e-4)
    total = ref.flat(out["sample"]) + ref.flat(out["batch"])
    assert rel_err(total, sum(ref.clip(v, 2.0) for v in per)) < RTOL


def test_micro_skips_batches_above_max_batch_size():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([6, 7], seed=[7, 8])
    engine = make_engine(model, aggregation="micro", max_batch_size=5)
    grads, _ = engine.gradients(loss_fn, x)
    assert all(np.all(g.numpy() == 0) for g in grads)
    engine = make_engine(model, aggregation="micro", max_batch_size=6)
    grads, _ = engine.gradients(loss_fn, x)
    assert any(np.any(g.numpy() != 0) for g in grads)


def test_batch_mode_clips_the_whole_batch_gradient_once():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([10, 7], seed=[9, 10])
    engine = make_engine(model, aggregation="batch", l2_norm_clip=0.25)
    grads, _ = engine.gradients(loss_fn, x)
    with tf.GradientTape() as tape:
        terms = loss_fn(x, BatchLayout.single(10))
        loss = tf.reduce_sum(terms.sample_total()) / 10.0 + tf.reduce_sum(terms.batch_total(1))
    full = ref.flat(tape.gradient(loss, engine.variables))
    assert np.linalg.norm(full) > 0.25
    assert rel_err(ref.flat(grads), ref.clip(full, 0.25)) < RTOL


def test_termwise_gradient_is_the_normalised_sum_of_both_clipped_sums():
    """eq. 16 without noise: (1/B) sum clip(phi) + (1/b) sum clip(psi)."""
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([10, 7], seed=[11, 12])
    engine = make_engine(model, expected_batch_size=12.0, num_partitions=2, seed=5)
    grads, _ = engine.gradients(loss_fn, x)
    engine2 = make_engine(model, expected_batch_size=12.0, num_partitions=2, seed=5)
    out = engine2.clipped_sums(loss_fn, x)
    expected = ref.flat(out["sample"]) / 12.0 + ref.flat(out["batch"]) / 2.0
    assert rel_err(ref.flat(grads), expected) < RTOL


def test_singleton_partitions_clip_each_examples_batch_term():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([5, 7], seed=[13, 14])
    engine = make_engine(model, num_partitions=0, batch_clip=0.05)
    out = engine.clipped_sums(loss_fn, x)
    q = [ref.grad_of(loss_fn, x[i:i + 1], engine.variables, "batch") for i in range(5)]
    assert rel_err(ref.flat(out["batch"]), sum(ref.clip(v, 0.05) for v in q)) < RTOL


def test_empty_batch_gives_pure_noise():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    engine = make_engine(model, noise_multiplier=0.0)
    grads, _ = engine.gradients(loss_fn, tf.zeros([0, 7]))
    assert all(np.all(g.numpy() == 0) for g in grads)
    engine = make_engine(model, noise_multiplier=1.0)
    grads, _ = engine.gradients(loss_fn, tf.zeros([0, 7]))
    assert np.std(ref.flat(grads)) > 0


def test_no_batch_term_gradient_when_batch_clip_is_zero():
    model = models.mlp_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([10, 7], seed=[15, 16])
    engine = make_engine(model, batch_clip=0.0)
    assert not engine.batch_terms
    assert engine.effective_noise_multiplier == engine.config.noise_multiplier
    out = engine.clipped_sums(loss_fn, x)
    assert "batch" not in out


def test_partitions_are_disjoint_and_cover_the_batch():
    layout = BatchLayout.random(tf.constant(50), 4, tf.random.Generator.from_seed(0))
    index, mask = layout.index.numpy(), layout.mask.numpy()
    members = index[mask > 0]
    assert sorted(members.tolist()) == list(range(50))
    for p in range(4):
        assert np.all(layout.partition_ids.numpy()[index[p][mask[p] > 0]] == p)


class _RawVariableModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)
        self.scale = tf.Variable(1.0)

    def call(self, x):
        return self.dense(x) * self.scale


@pytest.mark.parametrize("clipping", ["fast", "per_example", "auto"])
def test_engine_refuses_variables_outside_layers(clipping):
    model = _RawVariableModel()
    model(tf.zeros([1, 4]))
    with pytest.raises(ConfigError, match="not owned by a Keras layer"):
        make_engine(model, spec=models.SAMPLE_ONLY, clipping=clipping)


def test_verify_refuses_cross_example_sample_terms():
    model = models.mlp_model()

    def coupled(x, layout):
        z = model(x)
        z = z - tf.reduce_mean(z, axis=0)   # like batch normalisation: phi_i depends on x_k
        return LossTerms({"rec": tf.reduce_sum(tf.square(z), axis=1), "reg": tf.zeros([tf.shape(x)[0]])})

    engine = make_engine(model, spec=models.SAMPLE_ONLY, aggregation="micro")
    with pytest.raises(ConfigError, match="depends on other examples"):
        engine.verify(coupled, tf.random.normal([6, 7]))


def test_verify_refuses_double_backprop_and_vectorized_path_is_exact_for_it():
    """A gradient penalty differentiates through the model twice: ghost norms are wrong."""
    model = models.mlp_model()
    spec = TermSpec(sample=("gp",))

    def penalty(x, layout):
        with tf.GradientTape() as inner:
            inner.watch(x)
            out = tf.reduce_sum(model(x), axis=1)
        grad = inner.gradient(out, x)
        return LossTerms({"gp": tf.square(tf.norm(grad, axis=1) - 1.0)})

    x = tf.random.stateless_normal([6, 7], seed=[17, 18])
    with pytest.raises(ConfigError, match="not exact"):
        make_engine(model, spec=spec, aggregation="micro", clipping="fast").verify(penalty, x)
    engine = make_engine(model, spec=spec, aggregation="micro", clipping="vectorized", l2_norm_clip=0.1)
    out = engine.clipped_sums(penalty, x)
    g = ref.per_example_sample_grads(penalty, x, engine.variables)
    assert rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.1) for v in g)) < RTOL


def _penalty_loss(model):
    """A gradient penalty: differentiates through the model twice (fast clipping is not exact)."""
    def penalty(x, layout):
        with tf.GradientTape() as inner:
            inner.watch(x)
            out = tf.reduce_sum(model(x), axis=1)
        return LossTerms({"gp": tf.square(tf.norm(inner.gradient(out, x), axis=1) - 1.0)})
    return penalty


def test_auto_keeps_fast_per_layer_and_prints_each_layers_path_once(capsys):
    model = models.conv_model()
    loss_fn = models.make_loss_fn(model)
    x = tf.random.stateless_normal([6, 6, 6, 2], seed=[5, 6])
    auto, fast = make_engine(model, clipping="auto"), make_engine(model, clipping="fast")
    auto.verify(loss_fn, x)
    weighted = [layer for layer in model.layers if layer.trainable_weights]
    ruled = ", ".join(layer.name for layer in weighted if not isinstance(layer, keras.layers.PReLU))
    prelu = next(layer.name for layer in weighted if isinstance(layer, keras.layers.PReLU))
    assert capsys.readouterr().err == f"tfpriv: clipping auto: fast for {ruled}; per-example (vectorized) for {prelu}\n"
    assert (auto.clipping, auto.per_example) == ("fast", False)
    layout = BatchLayout(tf.range(6) % 3, 3)
    out, expected = auto.clipped_sums(loss_fn, x, layout), fast.clipped_sums(loss_fn, x, layout)
    for key in ("sample", "batch"):
        assert rel_err(ref.flat(out[key]), ref.flat(expected[key])) < 1e-6
    assert capsys.readouterr().err == ""  # only verify reports the paths


def test_auto_switches_to_per_example_where_fast_is_not_exact(capsys):
    model = models.mlp_model()
    penalty = _penalty_loss(model)
    x = tf.random.stateless_normal([6, 7], seed=[17, 18])
    engine = make_engine(model, spec=TermSpec(sample=("gp",)), aggregation="micro", l2_norm_clip=0.1)
    engine.verify(penalty, x)
    assert capsys.readouterr().err.startswith("tfpriv: clipping auto: per-example (vectorized) for the whole model "
                                              "(fast is not exact")
    assert (engine.clipping, engine.recorder, engine.per_example) == ("per_example", None, True)
    out = engine.clipped_sums(penalty, x)
    g = ref.per_example_sample_grads(penalty, x, engine.variables)
    assert rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.1) for v in g)) < RTOL


def test_auto_refuses_a_cross_example_layer_naming_it():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([7]), keras.layers.Dense(4), keras.layers.BatchNormalization(name="bn"),
                              keras.layers.Dense(2)])
    with pytest.raises(ConfigError, match=r"^DP engine: clipping='auto' finds no exact path for this model: bn: "
                                          r"BatchNormalization .*tfpriv\.fix_model\(model\)") as refused:
        make_engine(model, spec=models.SAMPLE_ONLY, aggregation="micro")
    assert "\n" not in str(refused.value)


def test_verify_accepts_the_supported_layers():
    model = models.conv_model()
    engine = make_engine(model)
    rules = sorted({engine.recorder.rules[id(layer)].name for layer in engine.recorder.layers})
    assert rules == ["conv2d", "conv2d_transpose", "dense", "layer_normalization", "per_layer"]
    assert engine.verify(models.make_loss_fn(model, shared_twice=True), tf.random.normal([6, 6, 6, 2])) is None


def test_verify_takes_each_examples_input_and_variable_rows_in_one_backward_pass(monkeypatch):
    """The input Jacobian (does an example's loss read other examples?) and the per-example variable
    Jacobian (the reference norms) come from the same n backward passes, not 2n."""
    model = models.mlp_model()
    engine = make_engine(model, spec=models.SAMPLE_ONLY, aggregation="micro", clipping="fast")
    x = tf.random.stateless_normal([6, 7], seed=[3, 4])
    passes = []
    gradient = tf.GradientTape.gradient

    def recorded(tape, target, sources, *args, **kwargs):
        passes.append(list(tf.nest.flatten(sources)))
        return gradient(tape, target, sources, *args, **kwargs)

    monkeypatch.setattr(tf.GradientTape, "gradient", recorded)
    engine.verify(models.make_loss_fn(model), x)
    reading_x = [sources for sources in passes if any(isinstance(s, tf.Tensor) and s.shape == x.shape for s in sources)]
    assert len(reading_x) == 6  # one per example
    assert all({v.ref() for v in engine.variables} <= {s.ref() for s in sources} for sources in reading_x)


@pytest.mark.parametrize("aggregation", ["termwise", "micro"])
@pytest.mark.parametrize("clipped_sum", ["bookkeeping", "reweight"])
def test_batch_term_reaching_only_part_of_the_model(aggregation, clipped_sum):
    """Like a VAE's latent divergence: decoder layers get no psi-gradient and are skipped for it."""
    enc, dec = models.encoder_decoder()
    root = keras.Sequential([keras.Input([7]), enc, dec])
    loss_fn = models.make_split_loss_fn(enc, dec)
    x = tf.random.stateless_normal([9, 7], seed=[21, 22])
    engine = make_engine(root, aggregation=aggregation, l2_norm_clip=0.4, batch_clip=0.1, num_partitions=2,
                         max_batch_size=20, clipped_sum=clipped_sum)
    out = engine.clipped_sums(loss_fn, x)
    g = naive(("split",), lambda: ref.per_example_sample_grads(loss_fn, x, engine.variables))
    if aggregation == "termwise":
        pid = out["layout"].partition_ids.numpy()
        q = naive(("split", tuple(pid)), lambda: ref.per_partition_batch_grads(loss_fn, x, engine.variables, pid, 2))
        assert rel_err(ref.flat(out["sample"]), sum(ref.clip(v, 0.4) for v in g)) < RTOL
        assert rel_err(ref.flat(out["batch"]), sum(ref.clip(v, 0.1) for v in q)) < RTOL
        n_dec = sum(int(np.prod(v.shape)) for v in dec.trainable_variables)
        assert np.all(ref.flat(out["batch"])[-n_dec:] == 0)
    else:
        shared = naive(("split", "batch"), lambda: ref.grad_of(loss_fn, x, engine.variables, "batch"))
        per = [v + shared for v in g]
        total = ref.flat(out["sample"]) + ref.flat(out["batch"])
        assert rel_err(total, sum(ref.clip(v, 0.4) for v in per)) < RTOL
    engine.verify(loss_fn, x)


def test_the_public_batch_varies_every_input_dtype():
    """Issue 46 item 2: integer entries were all 0, so the verification batch's examples were identical."""
    batch = public_batch((tf.zeros([3, 6], tf.int32), tf.zeros([3], tf.int64), tf.zeros([3, 2], tf.bool)))
    for t in batch:
        values = t.numpy().reshape(8, -1)
        assert len({row.tobytes() for row in values}) > 1 and set(np.unique(values)) <= {0, 1}


@pytest.mark.parametrize("mixing", [True, False])
@pytest.mark.parametrize("clipping", ["auto", "fast"])
def test_a_loss_that_mixes_integer_input_examples_is_refused_like_the_float_case(clipping, mixing):
    """Issue 46 item 2: Embedding -> Lambda(t - mean over the batch) -> Flatten -> Dense was accepted
    (the locality check read float inputs only; one example then moved the clipped sum by 1.11-1.18 C)."""
    import tfpriv

    keras.utils.set_random_seed(0)
    L = keras.layers
    centred = L.Lambda(lambda t: t - tf.reduce_mean(t, axis=0, keepdims=True) if mixing else t)
    model = keras.Sequential([L.Input([5], dtype="int32"), L.Embedding(20, 3), centred, L.Flatten(), L.Dense(3)])
    x = np.random.default_rng(0).integers(0, 20, size=(16, 5)).astype(np.int32)
    y = np.arange(16) % 3
    dp_model = tfpriv.make_private(model, "sparse_categorical_crossentropy",
                                   tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0,
                                                   clipping=clipping), num_examples=16, batch_size=8, delta=1e-3)
    dp_model.compile(optimizer="sgd")
    if not mixing:
        assert dp_model.fit(x, y, epochs=1, verbose=0).history["dropped"] == [0.0]
        return
    with pytest.raises(ConfigError, match="^DP engine: a sample-wise loss term depends on other examples"):
        dp_model.fit(x, y, epochs=1, verbose=0)
