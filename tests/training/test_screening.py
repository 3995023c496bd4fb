"""Issue 46 item 1: one record the old screening did not see (an id out of range for an Embedding in a
nested model or behind a slicing Lambda, a float label = K for a plain-function loss) aborted
training after part of the budget was spent. Screened where consumed, the record is dropped
(counted in `dropped`, clipped sums as without it) and training runs to the end, in both Kerases."""
import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.compat import keras as keras2, keras3

KERASES = [pytest.param(keras2, id="keras2")]
if keras3() is not None:
    KERASES.append(pytest.param(keras3(), id="keras3"))
N, VOCAB, BAD = 12, 20, 5


def _nested_embedding(keras):
    """A 'pretrained encoder' sub-model holding the Embedding."""
    L = keras.layers
    encoder = keras.Sequential([L.Embedding(VOCAB, 4), L.GlobalAveragePooling1D()], name="encoder")
    return keras.Sequential([L.Input([6], dtype="int32"), encoder, L.Dense(3)])


def _sliced_embedding(keras):
    """The Embedding reads ids a Lambda slices out of the model input."""
    L = keras.layers
    tokens = keras.Input([7], dtype="int32")
    ids = L.Lambda(lambda t: t[:, 1:])(tokens)
    h = L.GlobalAveragePooling1D()(L.Embedding(VOCAB, 4)(ids))
    return keras.Model(tokens, L.Dense(3)(h))


def _case(keras, case):
    """(model, loss, x, y) with one bad record at row BAD."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    y = np.arange(N) % 3
    if case == "float_label":
        model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(3)])
        x = rng.normal(size=(N, 4)).astype(np.float32)
        y = y.astype(np.float32)
        y[BAD] = 3.0                                                       # = the number of classes

        def loss(t, p):                                                     # a plain function, not Keras' SCCE
            return keras.losses.sparse_categorical_crossentropy(t, p, from_logits=True)
        return model, loss, x, y
    model = (_nested_embedding if case == "nested" else _sliced_embedding)(keras)
    x = rng.integers(0, VOCAB, size=(N, 6 if case == "nested" else 7)).astype(np.int32)
    x[BAD, -1] = VOCAB                                                     # = input_dim
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), x, y


@pytest.mark.parametrize("keras", KERASES)
@pytest.mark.parametrize("case", ["nested", "sliced", "float_label"])
def test_a_record_the_input_screening_missed_is_dropped_and_training_completes(keras, case):
    model, loss, x, y = _case(keras, case)
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0)
    dp_model = tfpriv.make_private(model, loss, config, num_examples=N, batch_size=N, delta=1e-3)  # q = 1
    dp_model.compile(optimizer="sgd", metrics=["accuracy"])
    history = dp_model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(N), epochs=2, verbose=0,
                           sampling="poisson")  # q = 1: every example in every batch
    assert history.history["dropped"] == [1.0, 1.0]                        # used to raise InvalidArgumentError
    assert np.all(np.isfinite(history.history["loss"])) and len(history.history["epsilon"]) == 2
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    keep = np.arange(N) != BAD
    engine = dp_model.engine
    with_bad = engine.clipped_sums(dp_model.loss_fn, dp_model.private_inputs((tf.constant(x), tf.constant(y))))
    without = engine.clipped_sums(dp_model.loss_fn,
                                  dp_model.private_inputs((tf.constant(x[keep]), tf.constant(y[keep]))))
    assert float(with_bad["dropped"]) == 1.0 and float(without["dropped"]) == 0.0
    for a, b in zip(with_bad["sample"], without["sample"]):                 # sensitivity unchanged
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    evaluated = dp_model.evaluate(x, y, batch_size=N, verbose=0, return_dict=True)
    assert np.isfinite(evaluated["loss"])


@pytest.mark.parametrize("clipping", ["per_example", "vectorized"])
def test_a_nested_embeddings_bad_id_is_dropped_on_the_other_paths(clipping):
    model, loss, x, y = _case(keras2, "nested")
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, clipping=clipping)
    dp_model = tfpriv.make_private(model, loss, config, num_examples=N, batch_size=N, delta=1e-3)
    dp_model.compile(optimizer="sgd")
    history = dp_model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(N), epochs=1, verbose=0,
                           sampling="poisson")  # q = 1
    assert history.history["dropped"] == [1.0] and np.isfinite(history.history["loss"][0])


def test_float_regression_targets_of_a_plain_loss_are_not_screened():
    """A loss that does not fail on label K (here squared error on the first output) keeps every record."""
    keras2.utils.set_random_seed(0)
    model = keras2.Sequential([keras2.layers.Input([4]), keras2.layers.Dense(3)])
    x = np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32)
    y = np.full(N, 7.5, np.float32)
    dp_model = tfpriv.make_private(model, lambda t, p: tf.square(t - p[:, 0]),
                                   tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                   num_examples=N, batch_size=N, delta=1e-3)
    dp_model.compile(optimizer="sgd")
    assert dp_model.fit(x, y, epochs=1, verbose=0).history["dropped"] == [0.0]
