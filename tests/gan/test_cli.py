import os

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from tfpriv.cli import flags as common_flags  # noqa: F401  (train.py's shared flags)
from tfpriv.errors import UsageError
from tfpriv.gan import cli
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp

FLAGS = flags.FLAGS


@pytest.fixture(autouse=True)
def _parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


@pytest.mark.parametrize("model,overrides,message", [
    ("dpwgan_gp", {"capacity": 0}, "--capacity: must be >= 1, got 0"),
    ("dpwgan_gp", {"critic_steps": 0}, "--critic_steps: must be >= 1, got 0"),
    ("dpwgan_gp", {"gp_weight": -1.0}, "--gp_weight: must be a finite number >= 0, got -1.0"),
    ("dpgan", {"weight_clip": 0.0}, "--weight_clip: must be a positive finite number, got 0.0"),
    ("dpwgan_gp", {"clipping": "fast"}, "--clipping: fast (ghost-norm) clipping is not exact"),
    ("dpwgan_gp", {"aggregation": "termwise"}, "--aggregation: must be micro (per-example clipping of the critic)"),
    ("dpwgan_gp", {"clipping": "vmap"}, "--clipping: must be one of fast, vectorized, per_example, got 'vmap'"),
    ("dpwgan_gp", {"num_samples": 0}, "--num_samples: must be >= 10, got 0"),
    ("dpwgan", {}, "--model: GAN models are dpwgan_gp, dpgan, got 'dpwgan'"),
    ("dpgan", {"feature_scaling": "public"}, "--feature_scaling: applies to the UCI tabular datasets only"),
])
def test_bad_flags_raise_one_line_usage_error_before_output(tmp_path, model, overrides, message):
    out = tmp_path / "run"
    with flagsaver.flagsaver(**overrides):
        with pytest.raises(UsageError) as err:
            cli.run(str(out), model)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not out.exists()


def test_model_defaults_apply_unless_a_common_flag_is_given():
    # train.py's defaults (aggregation=termwise, clipping=fast, batch 64, ...) are not GAN settings.
    s = cli.validate_flags("dpwgan_gp")
    assert (s.critic_steps, s.batch_size, s.clipping, s.aggregation) == (1, 128, "per_example", "micro")
    assert s.learning_rate == pytest.approx(128 * 3.125e-6)  # 004's lr = batch * 3.125e-6
    assert s.seed_from_os
    d = cli.validate_flags("dpgan")
    assert (d.critic_steps, d.clipping, d.learning_rate) == (5, "fast", 5e-5)
    with flagsaver.flagsaver(batch_size=64, seed=3):
        s = cli.validate_flags("dpwgan_gp")
    assert (s.batch_size, s.learning_rate, s.seed, s.seed_from_os) == (64, pytest.approx(64 * 3.125e-6), 3, False)


def test_sample_writes_labelled_samples_from_a_saved_generator(tmp_path):
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
    model.generator(model._generator_in(model._latent(2), np.array([0, 1], np.int32)))
    save_generator(model, str(tmp_path / "run"), {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4,
                                                  "num_classes": 10})
    with flagsaver.flagsaver(num_samples=30):
        info = cli.sample(str(tmp_path / "run"))  # train.py --mode=sample --output_dir=<the run>
    data = np.load(info["samples"])
    assert data["images"].shape == (30, 28, 28, 1) and data["labels"].shape == (30,)
    assert np.bincount(data["labels"], minlength=10).tolist() == [3] * 10  # balanced classes
    assert 0.0 <= data["images"].min() and data["images"].max() <= 1.0
    assert os.path.getsize(info["grid"]) > 1000


def test_sample_without_generator_is_a_usage_error(tmp_path):
    with flagsaver.flagsaver(generator_path=str(tmp_path / "nothing")):
        with pytest.raises(UsageError, match=r"^--generator_path: no generator at"):
            cli.sample(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
