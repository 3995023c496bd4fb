"""`PrivateTraining`, what `make_private`'s model does in either Keras: `evaluate` works before the
first `fit` and keeps one loss tracker across evaluate/fit/evaluate."""
import numpy as np
import pytest

import tfpriv
from tfpriv.compat import keras as keras2, keras3
from tfpriv.errors import ConfigError

KERASES = [pytest.param(keras2, id="keras2")]
if keras3() is not None:
    KERASES.append(pytest.param(keras3(), id="keras3"))


@pytest.mark.parametrize("keras", KERASES)
def test_evaluate_before_fit_reports_the_mean_loss_and_metrics(keras):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    dp_model = tfpriv.make_private(model, loss, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                   num_examples=32, batch_size=8, delta=1e-3)
    dp_model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
    expected = float(np.mean(loss(y, model(x)).numpy()))  # the wrapped model's own mean loss
    before = dp_model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    assert before["loss"] == pytest.approx(expected, rel=1e-5)
    assert 0.0 <= before["accuracy"] <= 1.0
    dp_model.fit(x, y, epochs=1, verbose=0, seed=0)
    after = dp_model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    # The same tracker, reset per evaluate: the loss is this model's, not accumulated with the first call's.
    assert after["loss"] == pytest.approx(float(np.mean(loss(y, model(x)).numpy())), rel=1e-5)


@pytest.mark.parametrize("keras", KERASES)
def test_probability_losses_are_recognised_by_name_function_and_object(keras):
    from tfpriv.training.private_training import per_example_loss, probability_loss
    assert probability_loss(per_example_loss("sparse_categorical_crossentropy", keras)[0]) == "categorical"
    assert probability_loss(per_example_loss("binary_crossentropy", keras)[0]) == "binary"
    assert probability_loss(keras.losses.CategoricalCrossentropy()) == "categorical"
    assert probability_loss(keras.losses.SparseCategoricalCrossentropy(from_logits=True)) is None
    assert probability_loss(keras.losses.MeanSquaredError()) is None


def test_logits_warning_follows_keras_heuristic():
    from tfpriv.training.private_training import logits_warning
    probabilities = np.array([[0.2, 0.8], [0.5, 0.5]])
    assert logits_warning("categorical", probabilities) is None
    assert logits_warning("binary", np.array([[0.1], [0.9]])) is None
    assert "not summing to 1" in logits_warning("categorical", np.array([[0.2, 0.2], [0.5, 0.5]]))
    assert "from_logits=True" in logits_warning("categorical", np.array([[-1.0, 3.0], [0.5, 0.5]]))
    assert "BinaryCrossentropy(from_logits=True)" in logits_warning("binary", np.array([[-0.3], [2.0]]))


@pytest.mark.parametrize("keras, case", [
    *[pytest.param(keras2, case, id=f"keras2-{case}") for case in ("logits", "softmax", "from_logits")],
    *[pytest.param(k.values[0], "logits", id="keras3-logits") for k in KERASES[1:]]])
def test_a_probability_loss_on_logits_is_warned_once_in_one_line(keras, case, capsys):
    """The README's example gave logits to sparse_categorical_crossentropy: chance accuracy, no word."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    activation = "softmax" if case == "softmax" else None
    model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(3, activation=activation)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True) if case == "from_logits" else \
        "sparse_categorical_crossentropy"
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0)
    dp_model = tfpriv.make_private(model, loss, config, num_examples=32, batch_size=8, delta=1e-3)
    dp_model.compile(keras.optimizers.SGD(0.1))
    capsys.readouterr()
    dp_model.fit(x, y, epochs=1, verbose=0, seed=0)
    warned = [line for line in capsys.readouterr().err.splitlines() if "look like logits" in line]
    if case == "logits":
        assert warned == [f"tfpriv: loss: reads probabilities, but the model's outputs look like logits (outside [0, 1] "
                          f"or not summing to 1); if the last layer has no softmax, pass "
                          f"loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)"]
    else:
        assert warned == []


@pytest.mark.parametrize("keras", KERASES)
def test_jit_compile_is_refused_at_compile_in_one_line(keras):
    """`fit` failed with a multi-line InvalidArgumentError (XLA cannot compile the step's ScatterNd)."""
    model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)])
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0)
    dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), config,
                                   num_examples=32, batch_size=8, delta=1e-3)
    with pytest.raises(ConfigError, match=r"^jit_compile: True is not supported: XLA cannot compile the private "
                                          r"training step \(its ScatterNd\), and on CPU it was slower; leave "
                                          r"jit_compile out \(or False\)$"):
        dp_model.compile("sgd", jit_compile=True)
    dp_model.compile("sgd", jit_compile="auto" if keras is not keras2 else False)  # no XLA: accepted
    assert not dp_model.jit_compile


@pytest.mark.parametrize("keras", KERASES)
def test_the_private_step_is_traced_once_with_compiled_metrics(keras, monkeypatch):
    """Metrics given to `compile` are built before the first step (on the public batch): built inside
    the first trace, their variables made tf.function trace the whole private step twice."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    dp_model = tfpriv.make_private(keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)]),
                                   keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                   tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                   num_examples=32, batch_size=8, delta=1e-3)
    dp_model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
    traces = []
    step = type(dp_model).train_step

    def counted(self, data):
        traces.append(1)
        return step(self, data)

    monkeypatch.setattr(type(dp_model), "train_step", counted)
    history = dp_model.fit(x, y, epochs=2, verbose=0, seed=0)
    assert len(traces) == 1
    # Built on a public batch, reset before training: the first epoch's accuracy is of its own steps only.
    assert 0.0 <= history.history["accuracy"][0] <= 1.0 and len(history.history["accuracy"]) == 2
