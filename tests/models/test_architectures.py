"""Built-in encoders/decoders: shapes, the pinwheel nets' configurable widths, bad widths."""
import pytest
import tensorflow as tf

from tfpriv.errors import ConfigError, UsageError
from tfpriv.models.architectures import PINWHEEL_HIDDEN, build_architecture, parse_hidden


def _dense_units(model):
    return [layer.units for layer in model.layers if isinstance(layer, tf.keras.layers.Dense)]


def test_pinwheel_default_is_two_hidden_layers_of_64():
    enc, dec = build_architecture("pinwheel", [2], 2)
    assert PINWHEEL_HIDDEN == (64, 64)
    assert _dense_units(enc) == [64, 64, 4] and _dense_units(dec) == [64, 64, 2]
    assert enc.count_params() == 2 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4


@pytest.mark.parametrize("spec,widths", [("16", (16,)), ("32,8", (32, 8)), (" 8 , 4 ", (8, 4)), ((12,), (12,))])
def test_pinwheel_widths_mirror_in_the_decoder(spec, widths):
    assert parse_hidden(spec) == widths
    enc, dec = build_architecture("pinwheel", [2], 2, pinwheel_hidden=spec)
    assert _dense_units(enc) == [*widths, 4] and _dense_units(dec) == [*widths[::-1], 2]
    z = tf.zeros([3, 2])
    assert enc(tf.zeros([3, 2])).shape == (3, 4) and dec(z).shape == (3, 2)
    # the hidden layers are tanh, the outputs linear
    assert all(layer.activation is tf.keras.activations.tanh for layer in enc.layers[1:-1])


@pytest.mark.parametrize("bad", ["", "0", "16,", "a,b", "-4", "1.5", ",", ()])
def test_bad_widths_name_the_parameter(bad):
    with pytest.raises(ConfigError, match="^pinwheel_hidden: "):
        parse_hidden(bad)
    with pytest.raises(UsageError, match="^pinwheel_hidden: "):
        build_architecture("pinwheel", [2], 2, pinwheel_hidden=bad)


def test_unknown_architecture():
    with pytest.raises(ConfigError, match="^architecture"):
        build_architecture("resnet", [2], 2)
