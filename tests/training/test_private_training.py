"""`PrivateTraining`, what `make_private`'s model does in either Keras: `evaluate` works before the
first `fit` and keeps one loss tracker across evaluate/fit/evaluate."""
import numpy as np
import pytest

import tfpriv
from tfpriv.compat import keras as keras2, keras3

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
