"""`tfpriv.make_private` with Keras 3 models (`import keras`, TensorFlow backend): the issue-34 models
(Embedding→LSTM text classifier, a small transformer, a BatchNorm convnet after `fix_model`) train
with metrics and report the accountant's epsilon, as Keras 3 models; their clipped sums equal the
naive per-example loop; `clipping="auto"` takes the LSTM's rule; dropped examples, save/load and export
work as for a Keras 2 model."""
import json

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tests.privacy.rules.helpers import check_model
from tfpriv.compat import keras3
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RDP

pytest.importorskip("keras")  # what a user's `import keras` loads
keras = keras3()
if keras is None:
    pytest.skip("Keras 3 needs TensorFlow >= 2.16 (on this stack `import keras` is Keras 2)", allow_module_level=True)

L = keras.layers
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # reduces: make_private uses a "none" copy
N, B, NOISE, DELTA = 32, 16, 1.1, 1e-5


def _text_classifier():
    return keras.Sequential([L.Input([6], dtype="int32"), L.Embedding(50, 8, name="embedding"), L.LSTM(8, name="lstm"),
                             L.Dense(3, name="dense")])


def _transformer():
    """One encoder block: self-attention and a feed-forward layer, each with a residual and LayerNorm."""
    tokens = L.Input([6], dtype="int32")
    h = L.Embedding(50, 8, name="embedding")(tokens)
    h = L.LayerNormalization(name="ln1")(h + L.MultiHeadAttention(2, 4, name="mha")(h, h))
    h = L.LayerNormalization(name="ln2")(h + L.Dense(8, name="ff2")(L.Dense(16, activation="relu", name="ff1")(h)))
    return keras.Model(tokens, L.Dense(3, name="dense")(L.GlobalAveragePooling1D()(h)))


def _bn_convnet():
    return keras.Sequential([L.Input([8, 8, 1]), L.Conv2D(6, 3, name="conv"), L.BatchNormalization(name="bn"),
                             L.ReLU(), L.Flatten(), L.Dense(3, name="dense")])


ATTENTION = {name: "einsum_dense" for name in ("query", "key", "value", "attention_output")}
MODELS = {  # name -> (build, the rule each layer gets)
    "text_classifier": (_text_classifier, {"embedding": "embedding", "lstm": "lstm", "dense": "dense"}),
    "transformer": (_transformer, {"embedding": "embedding", **ATTENTION, "ln1": "layer_normalization",
                                   "ff1": "dense", "ff2": "dense", "ln2": "layer_normalization", "dense": "dense"}),
    "bn_convnet": (lambda: tfpriv.fix_model(_bn_convnet()),
                   {"conv": "conv2d", "bn_group_norm": "group_normalization", "dense": "dense"}),
}


def _data(name: str, n: int = N):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, n).astype(np.int32)
    if name == "bn_convnet":
        return rng.random((n, 8, 8, 1), dtype=np.float32), y
    return rng.integers(0, 50, (n, 6)).astype(np.int32), y


def _private(model, **config):
    dp_model = tfpriv.make_private(model, LOSS, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                noise_multiplier=NOISE, **config),
                                   num_examples=N, batch_size=B, delta=DELTA)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    return dp_model


@pytest.mark.parametrize("name", list(MODELS))
def test_the_issue_models_train_as_keras3_models_and_report_epsilon(name):
    build, rules = MODELS[name]
    keras.utils.set_random_seed(0)
    model = build()
    x, y = _data(name)
    dp_model = _private(model)
    assert isinstance(dp_model, keras.Model)                                   # the user's Keras, not tf-keras
    history = dp_model.fit(x, y, epochs=2, verbose=0)
    recorder = dp_model.engine.recorder
    assert {layer.name: recorder.rules[id(layer)].name for layer in recorder.layers} == rules
    assert history.history["epsilon"] == pytest.approx([RDP.epsilon([(B / N, NOISE, s)], DELTA) for s in (2, 4)])
    assert dp_model.ledger.total_steps == 4 and 0 <= history.history["accuracy"][-1] <= 1
    assert set(dp_model.evaluate(x, y, verbose=0, return_dict=True)) >= {"loss", "accuracy"}


@pytest.mark.parametrize("name", list(MODELS))
def test_clipped_sums_equal_the_naive_per_example_loop(name):
    build, rules = MODELS[name]
    keras.utils.set_random_seed(0)
    x, _ = _data(name, 5)
    check_model(build(), x, rules)


def test_a_layer_without_rule_gets_the_exact_per_layer_fallback():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([L.Input([4, 3]), L.SimpleRNN(4, name="rnn"), L.PReLU(name="prelu"),
                              L.Dense(2, name="dense")])
    x = np.random.default_rng(0).normal(size=(5, 4, 3)).astype(np.float32)
    check_model(model, x, {"rnn": "per_layer", "prelu": "per_layer", "dense": "dense"})


def test_auto_takes_the_lstm_rule_on_a_masked_embedding_lstm_and_trains(capsys):
    """`clipping="auto"` (the default) checks the fast path's norms against the per-example Jacobian's and
    keeps it: the LSTM's rule, not the per-layer fallback, with the mask of Embedding(mask_zero=True)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([L.Input([6], dtype="int32"), L.Embedding(50, 8, mask_zero=True, name="embedding"),
                              L.LSTM(8, name="lstm"), L.Dense(3, name="dense")])
    x, y = _data("text_classifier")
    x[::3, 4:] = 0  # padded examples
    dp_model = _private(model, clipping="auto")
    history = dp_model.fit(x, y, epochs=1, verbose=0)
    assert capsys.readouterr().err.endswith("tfpriv: clipping auto: fast for embedding, lstm, dense\n")
    assert dp_model.engine.clipping == "fast"
    assert dp_model.engine.recorder.rules[id(model.get_layer("lstm"))].name == "lstm"
    assert history.history["epsilon"][-1] > 0 and np.isfinite(history.history["loss"][-1])


def test_batch_normalization_is_refused_naming_fix_model_which_replaces_it():
    x, y = _data("bn_convnet")
    keras.utils.set_random_seed(0)
    with pytest.raises(ConfigError, match=r"tfpriv\.fix_model\(model\) replaces it by GroupNormalization"):
        _private(_bn_convnet()).fit(x, y, epochs=1, verbose=0)
    original = _bn_convnet()
    assert [p.split(":")[0] for p in tfpriv.validate_model(original)] == ["bn"]
    fixed = tfpriv.fix_model(original)
    norm = fixed.get_layer("bn_group_norm")
    assert type(norm) is L.GroupNormalization and norm.groups == 6 and tfpriv.validate_model(fixed) == []
    np.testing.assert_array_equal(fixed.get_layer("conv").kernel.numpy(), original.get_layer("conv").kernel.numpy())


def test_out_of_range_labels_and_token_ids_are_dropped():
    keras.utils.set_random_seed(0)
    x, y = _data("text_classifier")
    x[3, 2], y[5] = 50, 3
    dp_model = tfpriv.make_private(_text_classifier(), LOSS, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                             noise_multiplier=NOISE),
                                   num_examples=N, batch_size=N, delta=DELTA)                  # q = 1: all sampled
    dp_model.compile(optimizer="sgd")
    history = dp_model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(N), epochs=1, verbose=0,
                           sampling="poisson")  # q = 1: every example in every batch
    assert history.history["dropped"] == [2.0] and np.isfinite(history.history["loss"][0])


def test_tf_data_progress_bar_save_load_and_export(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([L.Input([12]), L.Dense(8, activation="relu"), L.Dense(3)])
    rng = np.random.default_rng(0)
    x, y = rng.random((N, 12), dtype=np.float32), rng.integers(0, 3, N)
    dp_model = _private(model)
    with pytest.raises(tfpriv.errors.ConfigError, match="^x: tfpriv did not sample"):  # issue 48, Keras 3
        dp_model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(B), epochs=1, verbose=0)
    history = dp_model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(B), epochs=1, verbose=2, sampling="fixed")
    assert history.history["epsilon"] == pytest.approx([RDP.epsilon([(1.0, NOISE / 2, 2)], DELTA)])
    assert "epsilon: " in capsys.readouterr().out
    dp_model.save(str(tmp_path / "m.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(loaded.predict(x, verbose=0), dp_model.predict(x, verbose=0), rtol=1e-6)
    dp_model.export(str(tmp_path / "saved_model"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "saved_model"))  # kept: its variables live as long as it does
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), model.predict(x, verbose=0), rtol=1e-5)
    statement = dp_model.privacy_statement()
    with open(tmp_path / "saved_model" / "assets" / "privacy_statement.json") as f:
        assert json.load(f) == statement
    resumed = tfpriv.load_private(str(tmp_path / "m.keras"), LOSS, tfpriv.DPConfig(aggregation="micro",
                                  noise_multiplier=NOISE), N, B)  # a Keras 3 model, its ledger continued
    assert isinstance(resumed, keras.Model) and resumed.ledger.segments() == [(1.0, NOISE / 2, 2)]  # fixed batches
    assert statement["sampling"] == "fixed"


class _Bilinear(L.Layer):
    """A custom layer with weights called on two tensors: no rule, and the fallback takes one input."""

    def build(self, a_shape, b_shape=None):
        self.w = self.add_weight(shape=(4, 4), initializer="ones")

    def call(self, a, b):
        return tf.matmul(a, self.w) * b


def test_a_layer_no_path_supports_is_refused_in_one_line_naming_it():
    a, b = L.Input([4]), L.Input([4])
    model = keras.Model([a, b], L.Dense(2)(_Bilinear(name="bilinear")(a, b)))
    x = np.random.default_rng(0).random((N, 4), dtype=np.float32)
    with pytest.raises(TypeError) as refused:
        _private(model).fit(tf.data.Dataset.from_tensor_slices(((x, x), np.zeros(N, np.int32))).batch(B), verbose=0,
                            sampling="fixed")
    assert str(refused.value) == "bilinear: positional call arguments besides inputs are not supported by the DP engine"
