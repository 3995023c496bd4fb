"""`tfpriv.fix_model` / `tfpriv.validate_model`: BatchNormalization -> GroupNormalization, problems listed."""
import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RDP
from tfpriv.training.model_fix import groups_for

L = keras.layers
N, B = 64, 16
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)


def _bn_convnet():
    keras.utils.set_random_seed(0)
    return keras.Sequential([L.Input([8, 8, 1]), L.Conv2D(6, 3), L.BatchNormalization(name="bn"), L.ReLU(),
                                L.Flatten(), L.Dense(2)])


def _data():
    rng = np.random.default_rng(0)
    x = rng.random((N, 8, 8, 1), dtype=np.float32)
    return x, (x.reshape(N, -1).mean(axis=1) > 0.5).astype(np.int32)


def _private(model):
    dp_model = tfpriv.make_private(model, LOSS, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                noise_multiplier=1.1),
                                   num_examples=N, batch_size=B, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    return dp_model


def test_groups_are_the_largest_divisor_up_to_32():
    assert [groups_for(c) for c in (1, 3, 6, 32, 48, 64, 37)] == [1, 3, 6, 32, 24, 32, 1]


def test_the_refusal_of_batch_normalization_names_fix_model():
    x, y = _data()
    with pytest.raises(ConfigError, match=r"tfpriv\.fix_model\(model\) replaces it by GroupNormalization"):
        _private(_bn_convnet()).fit(x, y, epochs=1, verbose=0)


def test_fixed_convnet_trains_privately_and_reports_epsilon():
    original = _bn_convnet()
    assert [p.split(":")[0] for p in tfpriv.validate_model(original)] == ["bn"]
    fixed = tfpriv.fix_model(original)
    assert tfpriv.validate_model(fixed) == []
    norm = [layer for layer in fixed.layers if isinstance(layer, L.GroupNormalization)]
    assert len(norm) == 1 and norm[0].groups == 6 and norm[0].axis == 3
    assert not any(isinstance(layer, L.BatchNormalization) for layer in fixed.layers)
    np.testing.assert_array_equal(norm[0].gamma.numpy(), np.ones(6))
    np.testing.assert_array_equal(norm[0].beta.numpy(), np.zeros(6))
    np.testing.assert_array_equal(fixed.layers[0].kernel.numpy(), original.layers[0].kernel.numpy())
    kernel = original.layers[0].kernel.numpy()
    x, y = _data()
    history = _private(fixed).fit(x, y, epochs=2, verbose=0)
    steps = 2 * round(N / B)
    assert history.history["epsilon"][-1] == pytest.approx(RDP.epsilon([(B / N, 1.1, steps)], 1e-5))
    assert 0 <= history.history["accuracy"][-1] <= 1
    np.testing.assert_array_equal(original.layers[0].kernel.numpy(), kernel)  # the copy trained, not the original


def test_functional_model_with_a_nested_sequential_is_fixed():
    keras.utils.set_random_seed(0)
    inner = keras.Sequential([L.Input([5]), L.Dense(4), L.BatchNormalization()])
    x = L.Input([5])
    h = L.BatchNormalization(axis=1)(L.Reshape([5, 1])(x))
    out = L.Dense(2)(L.Concatenate()([inner(x), L.Flatten()(h)]))
    original = keras.Model(x, out)
    assert len(tfpriv.validate_model(original)) == 2
    fixed = tfpriv.fix_model(original)
    norms = [layer for layer in fixed._flatten_layers() if isinstance(layer, L.GroupNormalization)]
    assert sorted((n.groups, n.axis) for n in norms) == [(4, 1), (5, 1)]
    assert not any(isinstance(layer, L.BatchNormalization) for layer in fixed._flatten_layers())
    batch = tf.random.stateless_normal([6, 5], seed=[1, 2])
    alone = tf.concat([fixed(batch[i:i + 1], training=True) for i in range(6)], 0)
    np.testing.assert_allclose(fixed(batch, training=True).numpy(), alone.numpy(), rtol=1e-5, atol=1e-6)


def test_frozen_batch_normalization_is_kept():
    model = _bn_convnet()
    model.layers[1].trainable = False
    assert tfpriv.validate_model(model) == [] and tfpriv.fix_model(model) is model


class _OwnsAndCalls(L.Layer):
    """Owns a variable and calls a sublayer: its variable cannot be attributed to a layer call."""

    def build(self, shape):
        self.inner = L.Dense(2)
        self.w = self.add_weight(name="w", shape=[2])

    def call(self, x):
        return self.inner(x) * self.w


def test_validate_lists_every_problem_and_fix_model_refuses_what_it_cannot_fix():
    model = keras.Sequential([L.Input([4, 3], batch_size=2), L.LSTM(3, stateful=True, name="lstm"),
                                 _OwnsAndCalls(name="owns"), L.BatchNormalization(name="bn")])
    problems = tfpriv.validate_model(model)
    assert len(problems) == 3
    assert problems[0].startswith("lstm: stateful=True") and problems[1].startswith("bn: BatchNormalization")
    assert "owns" in problems[2]
    with pytest.raises(ConfigError) as refused:  # the BatchNormalization is fixed; the rest is listed
        tfpriv.fix_model(model)
    assert str(refused.value) == f"model: cannot be trained privately: {problems[0]}; {problems[2]}"
