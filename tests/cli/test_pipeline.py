"""The run sequence's shared pieces: Ctrl-C handling (a request recorded by the SIGINT handler stops training at
the next batch) and the --lr_schedule learning rate."""
import signal
import types

import numpy as np
import pytest

from tfpriv.compat import keras
from tfpriv.jobs import pipeline
from tfpriv.training.callbacks import StepProgressBar


@pytest.fixture
def interrupt():
    pipeline.INTERRUPT.clear()
    yield pipeline.INTERRUPT
    pipeline.INTERRUPT.clear()


def test_a_swallowed_ctrl_c_stops_training_at_the_next_batch(interrupt):
    """Ctrl-C that landed where TensorFlow turned it into a data error or an epoch end is raised again."""
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    seen = []
    press = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: (seen.append(batch), batch == 2 and interrupt.set()))
    x = np.zeros([40, 2], np.float32)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, x[:, :1], batch_size=4, epochs=3, verbose=0, callbacks=[press, pipeline.StopOnInterrupt()])
    assert seen == [0, 1, 2]


def test_the_sigint_handler_records_the_request_and_interrupts(interrupt):
    with pytest.raises(KeyboardInterrupt):
        pipeline.on_sigint(signal.SIGINT, None)
    assert interrupt.is_set()


def _settings(**kw):
    return types.SimpleNamespace(**{**dict(lr_schedule="constant", learning_rate=0.01, epochs=3, batch_size=20,
                                           sampling="poisson"), **kw})


@pytest.mark.parametrize("steps_per_update", [1, 2])
def test_cosine_schedule_decays_to_zero_over_the_planned_updates(steps_per_update):
    assert pipeline.learning_rate(_settings(), 400) == 0.01
    schedule = pipeline.learning_rate(_settings(lr_schedule="cosine"), 400, steps_per_update)
    planned = 3 * 20 // steps_per_update  # 3 epochs of round(400 / 20) steps, one update every steps_per_update
    assert float(schedule(0)) == pytest.approx(0.01)
    assert float(schedule(planned // 2)) == pytest.approx(0.005, rel=1e-4)
    assert float(schedule(planned)) == pytest.approx(0.0, abs=1e-9)
    assert float(schedule(planned - 1)) > 0


def test_training_uses_the_progress_bar_that_ends_an_early_stop_at_the_steps_taken(monkeypatch, tmp_path):
    # was Keras' own bar: `59/59` after --max_steps stopped at step 20 (tests/training/test_callbacks.py)
    seen = {}

    def fit_private(*args, extra_callbacks, **kwargs):
        seen["callbacks"] = extra_callbacks
        raise KeyboardInterrupt  # nothing to train here

    monkeypatch.setattr(pipeline, "fit_private", fit_private)
    with pytest.raises(KeyboardInterrupt):
        pipeline.train(types.SimpleNamespace(model=None, arrays=None, optimizer=None, make_releases=None), None,
                       str(tmp_path), 0, 2)
    assert [type(c) for c in seen["callbacks"]][-1] is StepProgressBar
