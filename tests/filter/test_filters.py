import numpy as np
import tensorflow as tf

from tfpriv.filter.filters import LinearFilter, MLPFilter


def test_linear_filter_is_z_plus_w_times_noise_and_onehot():
    f = LinearFilter(latent_dim=3, num_private_classes=2, noise_dim=4)
    z = tf.constant([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    onehot = tf.constant([[0.0, 1.0], [1.0, 0.0]])
    noise = tf.constant(np.random.default_rng(0).normal(size=(2, 4)), tf.float32)
    out = f(z, onehot, noise=noise).numpy()
    w = np.concatenate([f.noise_matrix, f.label_matrix], axis=1)  # paper's W = [W_w W_y], 3 x 6
    ref = z.numpy() + (w @ np.concatenate([noise.numpy(), onehot.numpy()], axis=1).T).T
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    assert f.noise_matrix.shape == (3, 4) and f.label_matrix.shape == (3, 2)


def test_linear_filter_noise_dim_defaults_to_latent_and_noise_is_fresh():
    f = LinearFilter(latent_dim=5, num_private_classes=3)
    assert f.noise_dim == 5
    z, onehot = tf.zeros((2, 5)), tf.one_hot([0, 0], 3)
    a, b = f(z, onehot).numpy(), f(z, onehot).numpy()
    assert not np.allclose(a, b)


def test_mlp_filter_output_shape_and_starts_near_identity():
    f = MLPFilter(latent_dim=4, num_private_classes=2)
    z = tf.constant(np.random.default_rng(0).normal(size=(8, 4)), tf.float32)
    out = f(z, tf.one_hot(np.zeros(8, int), 2)).numpy()
    assert out.shape == (8, 4)
    assert np.abs(out - z.numpy()).max() < 0.5
