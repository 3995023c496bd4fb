"""Save -> load -> identical outputs for the GAN generator and the filter (VAE: tests/privae/test_vae.py,
make_private: tests/training/test_private_model.py)."""
import types

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.filter.filters import build_filter
from tfpriv.filter.pipeline import load_filter, save_filter
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp


def test_gan_generator_round_trip(tmp_path):
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
    latent, labels = tf.random.stateless_normal([6, 4], seed=[1, 2]), np.arange(6, dtype=np.int32)
    before = model.generator([latent, labels]).numpy()
    save_generator(model, str(tmp_path), {"model": "dpwgan_gp"})
    loaded = keras.models.load_model(str(tmp_path / "generator.keras"), compile=False)
    np.testing.assert_array_equal(loaded([latent, labels]).numpy(), before)


def test_filter_round_trip(tmp_path):
    for kind in ("linear", "mlp"):
        layer = build_filter(kind, 4, 3, None)
        z = tf.random.stateless_normal([5, 4], seed=[3, 4])
        y = tf.one_hot([0, 1, 2, 0, 1], 3)
        noise = tf.random.stateless_normal([5, layer.noise_dim], seed=[5, 6])
        before = layer(z, y, noise=noise).numpy()
        save_filter(types.SimpleNamespace(filter_layer=layer), str(tmp_path / kind), {"budget": 0.5})
        np.testing.assert_array_equal(load_filter(str(tmp_path / kind))(z, y, noise=noise).numpy(), before)
