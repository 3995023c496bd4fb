"""`tfpriv.load(run_dir)`: the trained model of a GAN or filter run folder (the family its results.json
names), with identical outputs before and after loading (the VAE run: tests/test_export.py, a real
train.py run), and clear errors naming `run_dir`."""
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tfpriv.errors import UsageError
from tfpriv.files import write_json
from tfpriv.filter.filters import build_filter
from tfpriv.filter.pipeline import save_filter
from tfpriv.filter.serving import TrainedFilter
from tfpriv.gan.serving import TrainedGenerator
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.vae import VAE


def record_model(path, model: str) -> None:
    """The `model` key of the run's results.json, by which `tfpriv.load` finds its family."""
    write_json(os.path.join(path, "results.json"), {"model": model})


def tiny_generator_run(path, num_classes):
    """A tiny DP-WGAN-GP's generator saved as a GAN run saves it; returns the in-process TrainedGenerator."""
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=num_classes, seed=0)
    save_generator(model, str(path), {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4, "num_classes": num_classes})
    record_model(str(path), "dpwgan_gp")
    return TrainedGenerator(model.generator, num_classes, {})


def tiny_filter_run(path, users=("",)):
    """A small VAE (6 features, latent 3) and linear filters saved as a filter run saves them."""
    encoder, decoder = build_architecture("mlp", (6,), 3)
    vae = VAE(encoder, decoder)
    vae.save_vae(os.path.join(path, "vae"))
    filters = {}
    for k, user in enumerate(users):
        filters[user] = build_filter("linear" if k == 0 else "mlp", 3, 2 + k)
        save_filter(types.SimpleNamespace(filter_layer=filters[user]), os.path.join(path, "filter", user),
                    {"budget": 1.0, "private_label": "p"})
    record_model(path, "filter")
    return TrainedFilter(vae, filters, {})


@pytest.mark.parametrize("num_classes", [None, 10])
def test_generator_samples_identically_after_load(tmp_path, num_classes):
    before = tiny_generator_run(tmp_path, num_classes)
    after = tfpriv.load(str(tmp_path))
    assert isinstance(after, TrainedGenerator) and after.num_classes == num_classes and after.latent_size == 4
    labels = np.arange(6, dtype=np.int32) % 10 if num_classes else None
    images = after.sample(6, 7, labels).numpy()
    assert images.shape == (6, 28, 28, 1) and 0 < images.min() and images.max() < 1
    np.testing.assert_array_equal(images, before.sample(6, 7, labels).numpy())
    np.testing.assert_array_equal(images, after.sample(6, 7, labels).numpy())  # the seed fixes the draw
    assert not np.allclose(images, after.sample(6, 8, labels).numpy())
    if num_classes:
        with pytest.raises(UsageError, match=r"^labels: this generator is conditional"):
            after.sample(6, 7)
    else:
        with pytest.raises(UsageError, match=r"^labels: this generator is unconditional"):
            after.sample(6, 7, np.zeros(6, np.int32))


def test_filter_and_its_vae_privatize_identically_after_load(tmp_path):
    before = tiny_filter_run(str(tmp_path), users=("user1", "user2"))
    after = tfpriv.load(str(tmp_path))
    assert isinstance(after, TrainedFilter) and sorted(after.filters) == ["user1", "user2"]
    assert after.configs["user1"]["budget"] == 1.0 and after.configs["user2"]["filter_type"] == "mlp"
    x = np.random.default_rng(0).random((5, 6)).astype(np.float32)
    y = np.array([0, 1, 1, 0, 1], np.int32)
    for user in ("user1", "user2"):
        released = after.privatize_x(x, y, 3, user).numpy()
        np.testing.assert_array_equal(released, before.privatize_x(x, y, 3, user).numpy())
        # privatize_x is privatize_z of the frozen VAE's encoder mean
        mean, _ = after.vae.encode(x)
        np.testing.assert_array_equal(released, after.privatize_z(mean, y, 3, user).numpy())
        assert not np.allclose(released, after.privatize_x(x, y, 4, user).numpy())  # fresh filter noise per seed
    with pytest.raises(UsageError, match=r"^user: must be one of \['user1', 'user2'\], got ''"):
        after.privatize_z(x[:, :3], y, 3)


def test_the_linear_filter_adds_its_label_term_and_seeded_noise(tmp_path):
    tiny_filter_run(str(tmp_path))
    model = tfpriv.load(str(tmp_path))
    layer = model.filters[""]
    z, y = np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1], np.int32)
    noise = tf.random.stateless_normal([4, layer.noise_dim], seed=tf.constant([9, 0], tf.int64))
    expected = noise.numpy() @ layer.w_noise.numpy() + layer.w_label.numpy()[y]
    np.testing.assert_allclose(model.privatize_z(z, y, 9).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_bad_run_dirs_name_run_dir(tmp_path):
    with pytest.raises(UsageError, match=r"^run_dir: .*missing is not a directory"):
        tfpriv.load(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match=r"^run_dir: .* holds no trained model"):
        tfpriv.load(str(tmp_path))
    tiny_generator_run(tmp_path / "gan", None)
    os.remove(tmp_path / "gan" / "gan.json")
    with pytest.raises(UsageError, match=r"^run_dir: .* has a generator but no gan.json"):
        tfpriv.load(str(tmp_path / "gan"))
    os.makedirs(tmp_path / "filter" / "filter")
    record_model(str(tmp_path / "filter"), "filter")
    with pytest.raises(UsageError, match=r"^run_dir: .* has a filter but no frozen VAE"):
        tfpriv.load(str(tmp_path / "filter"))
