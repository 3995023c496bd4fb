"""The per-layer fallback covers layers without a rule; a registered rule goes first; a mis-declared rule fails
loudly."""
import numpy as np
import pytest

from tests.privacy.rules.helpers import SPEC, check_rule
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy import rules
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rules.dense import DenseRule


class ScaledDense(keras.layers.Dense):
    """A Dense subclass with an extra trainable weight: DenseRule does not support it (exact type)."""

    def build(self, input_shape):
        super().build(input_shape)
        self.scale = self.add_weight(name="scale", shape=[], initializer="ones")

    def call(self, inputs):
        return super().call(inputs) * self.scale


def test_layers_without_a_rule_use_the_per_layer_fallback():
    x = np.random.default_rng(0).normal(size=[5, 4])
    check_rule(keras.layers.PReLU(), x, "per_layer")
    check_rule(ScaledDense(3), x, "per_layer")


def test_recurrent_layers_are_one_unit_of_the_per_layer_fallback():
    """An RNN's cell runs inside a while_loop where its calls cannot be tapped: the RNN layer is the unit
    (Bidirectional, an LSTM or GRU the recurrent rules refuse: pfor cannot vectorize their backward pass,
    so one example after another)."""
    L = keras.layers
    x = np.random.default_rng(0).normal(size=[3, 2, 2])  # 3 examples of 2 steps: the recurrence, on a small batch
    for layer in (L.SimpleRNN(3), L.GRU(3, recurrent_dropout=0.2), L.LSTM(3, unroll=True), L.Bidirectional(L.LSTM(2))):
        check_rule(layer, x, "per_layer")


class _ClaimsAnyDense(DenseRule):
    """Mis-declared on purpose: supports Dense subclasses but declares only kernel and bias."""

    name = "claims_any_dense"

    def supports(self, layer):
        return isinstance(layer, keras.layers.Dense)


def test_a_misdeclared_rule_is_refused():
    model = keras.Sequential([keras.Input([4]), ScaledDense(3)])
    rules.register(_ClaimsAnyDense())
    try:
        with pytest.raises(ConfigError, match="claims_any_dense.*declares the variables"):
            DPGradientEngine(DPConfig(aggregation="micro", expected_batch_size=4.0), model, SPEC)
    finally:
        rules.REGISTRY.remove(_ClaimsAnyDense.name)


def test_a_registered_rule_is_tried_before_the_built_ins_and_a_taken_name_is_refused():
    rule = _ClaimsAnyDense()
    assert rules.register(rule) is rule
    try:
        assert rules.REGISTRY.names()[:2] == ("claims_any_dense", "dense")
        assert rules.rule_for(keras.layers.Dense(2)) is rule
        with pytest.raises(ValueError, match="^name: layer rule 'dense' is already registered to another value"):
            rules.register(DenseRule())
    finally:
        rules.REGISTRY.remove(rule.name)
    assert isinstance(rules.rule_for(keras.layers.Dense(2)), DenseRule)
