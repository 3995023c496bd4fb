"""Built-in encoders/decoders: shapes, the pinwheel nets' configurable widths, bad widths."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError, UsageError
from tfpriv.privae.architectures import PINWHEEL_HIDDEN, build_architecture, parse_hidden


def _dense_units(model):
    return [layer.units for layer in model.layers if isinstance(layer, keras.layers.Dense)]


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
    assert all(layer.activation is keras.activations.tanh for layer in enc.layers[1:-1])


@pytest.mark.parametrize("bad", ["", "0", "16,", "a,b", "-4", "1.5", ",", ()])
def test_bad_widths_name_the_parameter(bad):
    with pytest.raises(ConfigError, match="^pinwheel_hidden: "):
        parse_hidden(bad)
    with pytest.raises(UsageError, match="^pinwheel_hidden: "):
        build_architecture("pinwheel", [2], 2, pinwheel_hidden=bad)


def test_unknown_architecture():
    with pytest.raises(ConfigError, match="^architecture"):
        build_architecture("resnet", [2], 2)


def test_pinwheel_anchor_both_ties_the_origin_to_the_prior_centre():
    """Anchored at a centre, both nets are odd about it: x = 0 is encoded at the centre, opposite points
    (the pinwheel's arms k and k+2) at mirrored codes, and no layer has a bias to shift them."""
    keras.utils.set_random_seed(3)
    enc, dec = build_architecture("pinwheel", [2], 2, pinwheel_hidden="6", pinwheel_anchor="both",
                                  pinwheel_centre=[0.5, 0.5])
    x = tf.random.normal([5, 2])
    mean, logvar = tf.split(enc(x), 2, axis=-1)
    mean_neg, logvar_neg = tf.split(enc(-x), 2, axis=-1)
    np.testing.assert_allclose(tf.split(enc(tf.zeros([1, 2])), 2, -1)[0], [[0.5, 0.5]], atol=1e-7)
    np.testing.assert_allclose(mean - 0.5, -(mean_neg - 0.5), atol=1e-6)
    assert not np.allclose(mean, 0.5, atol=1e-3)
    assert not np.allclose(logvar, logvar_neg)  # the log-variance keeps its own head with a bias
    u = tf.random.normal([5, 2])
    bias = [layer for layer in dec.layers if isinstance(layer, keras.layers.Dense)][-1].bias
    np.testing.assert_allclose(dec(0.5 + u) - bias, -(dec(0.5 - u) - bias), atol=1e-6)
    # hidden 2->6 and means 6->2 without biases, log-variance 6->2 with; decoder 2->6 without, 6->2 with
    assert enc.count_params() == 2 * 6 + 6 * 2 + (6 * 2 + 2) and dec.count_params() == 2 * 6 + (6 * 2 + 2)


def test_pinwheel_anchor_decoder_keeps_the_encoder_free():
    """Anchored in the decoder only: the decoder is odd about the centre (up to its output bias),
    the encoder keeps its biases (so it can still send every point to one code), its means
    starting at the centre."""
    keras.utils.set_random_seed(4)
    enc, dec = build_architecture("pinwheel", [2], 2, pinwheel_hidden="6", pinwheel_anchor="decoder",
                                  pinwheel_centre=[0.5, 0.5])
    u = tf.random.normal([5, 2])
    bias = [layer for layer in dec.layers if isinstance(layer, keras.layers.Dense)][-1].bias
    np.testing.assert_allclose(dec(0.5 + u) - bias, -(dec(0.5 - u) - bias), atol=1e-6)
    np.testing.assert_allclose(tf.split(enc(tf.zeros([1, 2])), 2, -1)[0], [[0.5, 0.5]], atol=1e-7)
    # encoder: hidden 2->6, means 6->2 and log-variances 6->2, all with biases; decoder as in `both`
    assert enc.count_params() == (2 * 6 + 6) + 2 * (6 * 2 + 2) and dec.count_params() == 2 * 6 + (6 * 2 + 2)


def test_pinwheel_anchor_odd_mirrors_about_a_trainable_offset():
    """`odd`: bias-free hidden layers as in `both`, the means' offset a trainable bias started at the
    centre: codes of x and -x mirror about the offset wherever training moves it."""
    keras.utils.set_random_seed(5)
    enc, dec = build_architecture("pinwheel", [2], 2, pinwheel_hidden="6", pinwheel_anchor="odd",
                                  pinwheel_centre=[0.5, 0.5], pinwheel_posterior_std=0.03)
    np.testing.assert_allclose(enc(tf.zeros([1, 2]))[:, :2], [[0.5, 0.5]], atol=1e-7)
    offset = [layer for layer in enc.layers if isinstance(layer, keras.layers.Dense)][-1].bias
    assert offset.trainable
    offset.assign([0.0, 1.0])  # as if training had moved it to a prior corner
    x = tf.random.normal([5, 2])
    mean, mean_neg = enc(x)[:, :2], enc(-x)[:, :2]
    np.testing.assert_allclose(enc(tf.zeros([1, 2]))[:, :2], [[0.0, 1.0]], atol=1e-7)
    np.testing.assert_allclose(mean - [0.0, 1.0], -(mean_neg - [0.0, 1.0]), atol=1e-6)
    u = tf.random.normal([5, 2])
    bias = [layer for layer in dec.layers if isinstance(layer, keras.layers.Dense)][-1].bias
    np.testing.assert_allclose(dec(0.5 + u) - bias, -(dec(0.5 - u) - bias), atol=1e-6)  # decoder as in `both`
    # encoder: hidden 2->6 without bias, means 6->2 with; decoder 2->6 without, 6->2 with
    assert enc.count_params() == 2 * 6 + (6 * 2 + 2) and dec.count_params() == 2 * 6 + (6 * 2 + 2)


def test_pinwheel_fixed_posterior_std():
    enc, _ = build_architecture("pinwheel", [2], 2, pinwheel_hidden="6", pinwheel_posterior_std=0.03)
    out = enc(tf.random.normal([4, 2]) * 3)
    assert out.shape == (4, 4)
    np.testing.assert_allclose(tf.exp(0.5 * out[:, 2:]), 0.03, rtol=1e-5)
    assert enc.count_params() == (2 * 6 + 6) + (6 * 2 + 2)  # the encoder outputs means only


def test_pinwheel_options_accept_image_shaped_data():
    enc, dec = build_architecture("pinwheel", [8, 8, 1], 3, pinwheel_hidden="4", pinwheel_anchor="both",
                                  pinwheel_centre=[0.0, 0.0, 0.0], pinwheel_posterior_std=0.1)
    assert enc(tf.zeros([2, 8, 8, 1])).shape == (2, 6) and dec(tf.zeros([2, 3])).shape == (2, 8, 8, 1)


def test_pinwheel_options_survive_saving(tmp_path):
    enc, dec = build_architecture("pinwheel", [2], 2, pinwheel_hidden="4", pinwheel_anchor="both",
                                  pinwheel_centre=[0.5, 0.5], pinwheel_posterior_std=0.05)
    x = tf.random.normal([3, 2])
    for model in (enc, dec):
        model.save(tmp_path / f"{model.name}.keras")
        again = keras.models.load_model(tmp_path / f"{model.name}.keras", compile=False)
        np.testing.assert_allclose(again(x), model(x), atol=1e-6)


@pytest.mark.parametrize("kwargs,param", [({"pinwheel_posterior_std": 0.0}, "pinwheel_posterior_std"),
                                          ({"pinwheel_posterior_std": -1.0}, "pinwheel_posterior_std"),
                                          ({"pinwheel_anchor": "encoder"}, "pinwheel_anchor"),
                                          ({"pinwheel_anchor": "both"}, "pinwheel_centre"),
                                          ({"pinwheel_anchor": "decoder", "pinwheel_centre": [0.5]}, "pinwheel_centre")])
def test_bad_pinwheel_options_name_the_parameter(kwargs, param):
    with pytest.raises(ConfigError, match=f"^{param}: "):
        build_architecture("pinwheel", [2], 2, **kwargs)


@pytest.mark.parametrize("units", [256, 32])
def test_conv_encoder_units_set_the_hidden_fc_width(units):
    enc, dec = build_architecture("conv", [28, 28, 1], 50, conv_encoder_units=units)
    assert _dense_units(enc) == [units, 100]
    conv = (4 * 4 * 1 * 32 + 32) + (4 * 4 * 32 * 64 + 64)
    assert enc.count_params() == conv + (7 * 7 * 64 * units + units) + (units * 100 + 100)
    assert enc(tf.zeros([2, 28, 28, 1])).shape == (2, 100)
    assert _dense_units(dec) == [256, 7 * 7 * 64]  # the decoder is unchanged


@pytest.mark.parametrize("units", [0, -4])
def test_conv_encoder_units_below_one_are_refused(units):
    with pytest.raises(ConfigError, match="^conv_encoder_units"):
        build_architecture("conv", [28, 28, 1], 50, conv_encoder_units=units)
