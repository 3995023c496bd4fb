"""`DPState`: a private model's DP state is one attribute neither Keras tracks (its variables are in no
weights or checkpoint of the model: `fit_private` checkpoints them by name), read through read-only
properties; `swapped` stands a field in for a block and restores it."""
import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.compat import keras, keras3
from tfpriv.training.state import DPState

CONFIG = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1)


def _prepared(k):
    """A make_private model of Keras `k`, compiled and prepared (engine, trackers, ledger, step counter)."""
    model = k.Sequential([k.layers.Input([4]), k.layers.Dense(2)])
    dp_model = tfpriv.make_private(model, k.losses.SparseCategoricalCrossentropy(from_logits=True), CONFIG,
                                   num_examples=64, batch_size=8, delta=1e-3)
    dp_model.compile(k.optimizers.SGD(0.1))
    dp_model.prepare((np.zeros([8, 4], np.float32), np.zeros([8], np.int32)))
    return dp_model


try:
    import keras as _keras  # noqa: F401 - what a user's `import keras` loads (Keras 3 from TensorFlow 2.16 on)
except ImportError:
    pass
KERAS3 = keras3()
KERASES = [pytest.param(keras, id="keras2"),
           pytest.param(KERAS3, id="keras3", marks=pytest.mark.skipif(KERAS3 is None, reason="no Keras 3 here"))]


@pytest.mark.parametrize("k", KERASES)
def test_neither_keras_tracks_the_state(k, tmp_path):
    dp_model = _prepared(k)
    state = dp_model.dp_state
    held = [state.step_count, state.ledger.steps, state.rng.state, state.engine.generator.state]
    # A Keras 3 variable wraps its tf.Variable (`value`).
    tracked = {id(v if isinstance(v, tf.Variable) else v.value) for v in dp_model.variables}
    assert tracked and not {id(v) for v in held} & tracked
    saved = tf.train.Checkpoint(model=dp_model).write(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(saved)]
    assert names and not [n for n in names if any(s in n for s in ("step_count", "ledger", "_state_var"))]
    # The fields are the model's read-only attributes: an assignment cannot leave a (tracked) copy on the model.
    assert dp_model.ledger is state.ledger and dp_model.rng is state.rng and dp_model.engine is state.engine
    with pytest.raises(AttributeError):
        dp_model.rng = tf.random.Generator.from_seed(0)


def test_swapped_restores_the_fields_and_refuses_unknown_ones():
    state = DPState(rng=tf.random.Generator.from_seed(0), delta=1e-5)
    rng, stand_in = state.rng, tf.random.Generator.from_seed(1)
    with pytest.raises(RuntimeError, match="inside"):
        with state.swapped(rng=stand_in, delta=1e-3) as swapped:
            assert swapped.rng is stand_in and swapped.delta == 1e-3
            raise RuntimeError("inside")
    assert state.rng is rng and state.delta == 1e-5
    with pytest.raises(TypeError, match="no field prior"):
        with state.swapped(prior=None):
            pass
