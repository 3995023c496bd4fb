"""Keras' `fit` and `compile` arguments on a `make_private` model, Keras 2 and Keras 3 (issue 50.2): each
works with the meaning DP needs or is refused in one line naming it (docs/guide.md, "fit and compile
under DP"). One small model per Keras, shared by the tests (tracing a private step is the cost)."""
import csv

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.compat import keras as keras2, keras3
from tfpriv.data.sampling import poisson_batches
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RDP

N, B, HELD_OUT, DELTA = 80, 16, 20, 1e-3
KERASES = [pytest.param(keras2, id="keras2")] + ([pytest.param(keras3(), id="keras3")] if keras3() else [])


def _data(n=N + HELD_OUT):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


def _private(keras, num_examples=N, **kwargs):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(2)])
    dp = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                             tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
                             num_examples=num_examples, batch_size=B, delta=DELTA, **kwargs)
    dp.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
    return dp


@pytest.mark.parametrize("keras", KERASES)
def test_validation_split_holds_the_examples_out_of_training_and_the_accountant(keras, capsys):
    x, y = _data()
    dp = _private(keras)
    history = dp.fit(x, y, epochs=2, verbose=0, seed=0, validation_split=HELD_OUT / (N + HELD_OUT))
    assert {"val_loss", "val_accuracy", "epsilon"} <= set(history.history)
    assert history.history["epsilon"][-1] == pytest.approx(RDP.epsilon([(B / N, 1.1, 2 * round(N / B))], DELTA))
    assert "epsilon does not cover them" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="^validation_split: 0.5 holds out the last 50 of 100 examples, so private "
                                          "training sees 50; make the model with num_examples=50"):
        dp.fit(x, y, validation_split=0.5, verbose=0)


@pytest.mark.parametrize("keras", KERASES)
def test_weights_and_a_compile_loss_are_refused_naming_the_argument(keras):
    x, y = _data(N)
    dp = _private(keras)
    with pytest.raises(ConfigError, match="^sample_weight: not supported by a private model: each example's gradient"):
        dp.fit(x, y, sample_weight=np.ones(N), verbose=0)
    with pytest.raises(ConfigError, match="^class_weight: not supported"):
        dp.fit(x, y, class_weight={0: 1.0, 1: 2.0}, verbose=0)
    with pytest.raises(ConfigError, match="^loss: a private model's loss is the one given to make_private"):
        dp.compile(keras.optimizers.SGD(0.1), loss="mse")
    assert dp.ledger.total_steps == 0


@pytest.mark.parametrize("keras", KERASES)
def test_callbacks_initial_epoch_and_steps_per_epoch_on_arrays_and_on_poisson_batches(keras, tmp_path):
    x, y = _data()
    xt, yt, xv, yv = x[:N], y[:N], x[N:], y[N:]
    dp = _private(keras)
    log = tmp_path / "log.csv"
    callbacks = [keras.callbacks.EarlyStopping(monitor="val_loss", patience=50),
                 keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt.weights.h5"), save_weights_only=True),
                 keras.callbacks.TensorBoard(str(tmp_path / "tb")), keras.callbacks.CSVLogger(str(log))]
    history = dp.fit(xt, yt, epochs=3, initial_epoch=1, steps_per_epoch=2, validation_data=(xv, yv),
                     callbacks=callbacks, verbose=0, seed=0)
    assert len(history.history["loss"]) == 2 and dp.ledger.total_steps == 4
    rows = list(csv.DictReader(log.open()))
    assert [r["epoch"] for r in rows] == ["1", "2"] and "epsilon" in rows[0] and "val_loss" in rows[0]
    assert (tmp_path / "ckpt.weights.h5").exists() and any((tmp_path / "tb").rglob("*"))
    ds = poisson_batches(xt, yt, batch_size=B, seed=1)
    history = dp.fit(ds, epochs=2, steps_per_epoch=3, validation_data=(xv, yv), verbose=0,
                     callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=50)])
    assert dp.ledger.total_steps == 10
    assert history.history["epsilon"][-1] == pytest.approx(RDP.epsilon([(B / N, 1.1, 10)], DELTA))
