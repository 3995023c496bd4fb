"""`tfpriv.make_private`: the issue's snippet on a small MLP and a small convnet; epsilon from `fit` alone."""
import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import epsilon_for

N, B = 256, 32


def _data(shape):
    rng = np.random.default_rng(0)
    x = rng.random((N, *shape), dtype=np.float32)
    y = (x.reshape(N, -1).mean(axis=1) > 0.5).astype(np.int32)
    return x, y


def _mlp():
    return tf.keras.Sequential([tf.keras.layers.Input([12]), tf.keras.layers.Dense(16, activation="relu"),
                                tf.keras.layers.Dense(2)])


def _convnet():
    L = tf.keras.layers
    return tf.keras.Sequential([L.Input([8, 8, 1]), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(),
                                L.Flatten(), L.Dense(2)])


LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


@pytest.mark.parametrize("build,shape", [(_mlp, [12]), (_convnet, [8, 8, 1])], ids=["mlp", "convnet"])
def test_the_snippet_trains_reports_epsilon_and_saves(tmp_path, build, shape):
    x_train, y_train = _data(shape)
    tf.keras.utils.set_random_seed(0)
    dp_model = tfpriv.make_private(build(), loss=LOSS,
                                   config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
                                   num_examples=len(x_train), batch_size=B, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x_train, y_train, epochs=2, verbose=0)
    steps = 2 * round(N / B)
    expected = epsilon_for([(B / N, 1.1, steps)], 1e-5)
    assert history.history["epsilon"][-1] == pytest.approx(expected)
    assert history.history["epsilon"][0] == pytest.approx(epsilon_for([(B / N, 1.1, steps // 2)], 1e-5))
    assert dp_model.ledger.total_steps == steps and 0 <= history.history["accuracy"][-1] <= 1
    dp_model.save(str(tmp_path / "m.keras"))
    loaded = tf.keras.models.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(loaded.predict(x_train[:16], verbose=0), dp_model.predict(x_train[:16], verbose=0),
                               rtol=1e-6)
    assert set(dp_model.evaluate(x_train, y_train, verbose=0, return_dict=True)) >= {"loss", "accuracy"}


def test_target_epsilon_calibrates_the_noise():
    x_train, y_train = _data([12])
    dp_model = tfpriv.make_private(_mlp(), loss=LOSS, config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0),
                                   num_examples=N, batch_size=B, target_epsilon=3.0, epochs=2)
    dp_model.compile(optimizer="sgd")
    history = dp_model.fit(x_train, y_train, epochs=2, verbose=0)
    assert history.history["epsilon"][-1] == pytest.approx(3.0, rel=1e-3)


def test_refusals_name_the_parameter():
    with pytest.raises(ConfigError, match="config.aggregation"):
        tfpriv.make_private(_mlp(), LOSS, tfpriv.DPConfig(aggregation="none"), N, B)
    with pytest.raises(ConfigError, match="target_epsilon, epochs"):
        tfpriv.make_private(_mlp(), LOSS, tfpriv.DPConfig(aggregation="micro"), N, B, target_epsilon=1.0)
    mean_loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)     # reduces to a scalar
    dp_model = tfpriv.make_private(_mlp(), mean_loss, tfpriv.DPConfig(aggregation="micro"), N, B)
    dp_model.compile("sgd")
    x, y = _data([12])
    with pytest.raises(ConfigError, match="one value per example"):
        dp_model.fit(x, y, epochs=1, verbose=0)


@pytest.mark.parametrize("clipping", ["fast", "per_example"])
def test_text_classifier_with_lstm_trains(clipping):
    """Embedding -> LSTM -> Dense (issue 34): fast clipping was refused, per_example crashed in pfor."""
    L = tf.keras.layers
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([L.Input([6], dtype="int32"), L.Embedding(50, 8), L.LSTM(8), L.Dense(3)])
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, (32, 6)).astype(np.int32), rng.integers(0, 3, 32)
    dp_model = tfpriv.make_private(model, LOSS, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                noise_multiplier=1.1, clipping=clipping),
                                   num_examples=32, batch_size=16, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x, y, epochs=1, verbose=0)
    assert history.history["epsilon"][-1] == pytest.approx(epsilon_for([(16 / 32, 1.1, 2)], 1e-5))
    assert 0 <= history.history["accuracy"][-1] <= 1
