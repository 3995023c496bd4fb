import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.filter import architectures as arch
from tfpriv.privae.vae import VAE


def test_vae_network_shapes_per_dataset():
    cases = {"mnist": ((28, 28, 1), 10), "adult": ((101,), 10), "abalone": ((7,), 4)}
    for name, (shape, d) in cases.items():
        enc, dec = arch.build_vae_networks(name, shape)
        x = tf.zeros((3, *shape))
        assert enc(x).shape == (3, 2 * d)
        assert dec(tf.zeros((3, d))).shape == (3, *shape)
    enc, _ = arch.build_vae_networks("abalone", (7,))
    assert len(enc.layers) == 2  # input + one linear layer (paper §6.7.1)


class _LinearDecoderVAE:
    """decode(z) = 2 z: the Lipschitz quotient is exactly 4 wherever it is measured."""
    rng = tf.random.Generator.from_seed(0)  # the model's loss stream, which the term draws from

    def decode(self, z):
        return 2.0 * z


def test_lipschitz_decoder_term_on_linear_decoder():
    z = tf.constant(np.random.default_rng(0).normal(size=(16, 5)), tf.float32)
    term = arch.make_lipschitz_decoder_term(weight=0.5)(_LinearDecoderVAE(), None, z)
    assert term.shape == (16,)
    np.testing.assert_allclose(term.numpy(), 0.5 * 4.0, rtol=1e-3)


def test_celeba_path_on_synthetic_64x64_images():
    enc = arch.build_celeba_encoder(latent_dim=50, growth=4, layers_per_block=2)
    dec = arch.build_celeba_decoder(latent_dim=50, base_channels=32)
    x = tf.random.uniform((4, 64, 64, 3), seed=0)
    assert enc(x).shape == (4, 100)            # 50 mean ‖ 50 logvar
    out = dec(tf.zeros((4, 50)))
    assert out.shape == (4, 64, 64, 3)
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 1.0
    vae = VAE(enc, dec, likelihood="gaussian", extra_sample_terms={"lip": arch.make_lipschitz_decoder_term(1.0)})
    vae.compile(optimizer=keras.optimizers.Adam(1e-3))
    hist = vae.fit(x, batch_size=2, epochs=2, verbose=0)
    assert np.isfinite(hist.history["loss"]).all()
    mean, logvar = vae.encode(x)
    assert mean.shape == logvar.shape == (4, 50)


def test_classifier_kinds():
    assert len(arch.build_classifier(4, 3, "linear").layers) == 2
    mlp = arch.build_classifier(10, 2, "mlp")
    assert [l.__class__.__name__ for l in mlp.layers] == ["InputLayer", "Dense", "Dense"]
    assert mlp.layers[1].activation.__name__ == "elu"
