"""A seeded run stopped and resumed equals the uninterrupted run, step for step (issue: a resumed
run replayed its Poisson batches, so the accountant's fresh-sampling assumption failed)."""
import shutil
import types

import numpy as np
import pytest

from tfpriv.compat import keras
from tfpriv.filter.stage1 import build_stage1_vae, privacy_record
from tfpriv.gan.dpgan import make_dpgan, rmsprop
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import TermSpec
from tfpriv.training.runner import fit_private, plan_privacy, read_ledger

N = 120


def _weights(variables) -> list[np.ndarray]:
    return [v.numpy() for v in variables]


def _assert_identical(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# -- VAE (termwise, b = 2 random partitions, MMD with prior samples drawn in the loss) ---------
def _vae_run(directory, epochs):
    keras.utils.set_random_seed(0)
    enc, dec = build_architecture("mlp", [12], 3)
    model = VAE(enc, dec, prior=make_prior("sparse", 3), alpha=5.0, regularizer=make_divergence("mmd"))
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=1.5,
                   num_partitions=2, seed=3)
    plan = plan_privacy(cfg, model.term_spec(), N, 12, epochs, delta=1e-3)
    x = (np.random.default_rng(0).random([N, 12]) > 0.5).astype(np.float32)
    out = fit_private(model, x, plan, keras.optimizers.Adam(1e-2), str(directory), seed=7, verbose=0)
    return model, out


@pytest.fixture(scope="module")
def vae_straight(tmp_path_factory):
    """(model, fit record) of the uninterrupted 2-epoch VAE run: what each stopped-and-resumed VAE run
    (new and old checkpoint layout) must equal. Read only."""
    return _vae_run(tmp_path_factory.mktemp("vae_straight"), epochs=2)


def _stopped_and_resumed(run, straight, tmp_path):
    """(resumed model, its fit record): 1 epoch, a restart, then up to 2 epochs, checked against
    `straight` (the uninterrupted 2-epoch run's model and fit record)."""
    straight, out = straight
    run(tmp_path / "resumed", epochs=1)
    resumed, out2 = run(tmp_path / "resumed", epochs=2)
    assert out2["resumed"] and out2["train_steps"] == out["train_steps"] == 20
    assert out2["epsilon"] == out["epsilon"]
    _assert_identical(_weights(resumed.variables), _weights(straight.variables))
    return resumed, out2


def test_vae_stopped_and_resumed_equals_the_uninterrupted_run(tmp_path, vae_straight):
    _, out2 = _stopped_and_resumed(_vae_run, vae_straight, tmp_path)
    # the second epoch's logged losses equal the straight run's second epoch
    assert out2["history"]["loss"][-1] == vae_straight[1]["history"]["loss"][-1]


# -- GAN (DPGAN critic, generator step every 2nd critic step) -------------------------------------
def _gan_run(directory, epochs):
    """8x8 images: the critic's and generator's layers of 28x28 ones (but the generator's crop), their
    epochs 3-4x faster; resuming does not depend on the image size."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    images = rng.random((200, 8, 8, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 200).astype(np.int32)
    model = make_dpgan(capacity=2, latent_size=4, num_classes=10, critic_steps=2, seed=0, image_shape=(8, 8, 1))
    config = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1, expected_batch_size=20.0,
                      clipping="fast", seed=0, verify=False)
    plan = plan_privacy(config, TermSpec(sample=("wasserstein",)), 200, 20, epochs, "poisson", 1e-3)
    fit = fit_private(model, (images, labels), plan, (rmsprop(1e-3), rmsprop(1e-3)), str(directory), seed=5, verbose=0)
    return model, fit


def test_gan_stopped_and_resumed_equals_the_uninterrupted_run(tmp_path):
    straight = _gan_run(tmp_path / "straight", epochs=2)
    _stopped_and_resumed(_gan_run, straight, tmp_path)
    assert len(straight[0].generator.variables) > 0  # model.variables covers critic and generator


# -- filter stage 1 (micro DP-SGD VAE, checkpoints in a folder) -----------------------------------
def _stage1_run(directory, epochs):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 7)).astype(np.float32)
    ds = types.SimpleNamespace(name="abalone", x_train=x, x_test=x[:40], likelihood="gaussian", kind="tabular")
    keras.utils.set_random_seed(0)
    vae = build_stage1_vae(ds, 4, robust_decoder=1.0)
    dp = DPConfig(aggregation="micro", l2_norm_clip=0.7, noise_multiplier=1.0, num_partitions=1, seed=1)
    plan = plan_privacy(dp, vae.term_spec(), N, 20, epochs, delta=1e-3)
    fit = fit_private(vae, x, plan, keras.optimizers.Adam(1e-3), str(directory), seed=2, verbose=0)
    return vae, {"privacy": privacy_record(vae, plan, fit)}


def test_filter_stage1_stopped_and_resumed_equals_the_uninterrupted_run(tmp_path):
    straight, info = _stage1_run(tmp_path / "straight", epochs=2)
    _stage1_run(tmp_path / "resumed", epochs=1)
    resumed, info2 = _stage1_run(tmp_path / "resumed", epochs=2)
    assert info2["privacy"]["resumed"] and info2["privacy"]["steps"] == info["privacy"]["steps"] == 12
    _assert_identical(_weights(resumed.variables), _weights(straight.variables))


# -- --epsilon on a resumed run: calibrated for the remaining budget ----------------------------
TARGET = 2.0


def _target_run(directory, epochs, with_ledger=True):
    """(plan, fit record) of a micro VAE run to `epochs` at target_epsilon=TARGET in `directory` (resumed
    if it holds a run), planned with the folder's ledger as `history` or, as a library user may, without."""
    keras.utils.set_random_seed(0)
    enc, dec = build_architecture("mlp", [12], 3)
    model = VAE(enc, dec)
    cfg = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, num_partitions=1)
    history = read_ledger(str(directory)) if with_ledger else ()
    plan = plan_privacy(cfg, model.term_spec(), N, 12, epochs, delta=1e-3, target_epsilon=TARGET, history=history)
    x = (np.random.default_rng(0).random([N, 12]) > 0.5).astype(np.float32)
    return plan, fit_private(model, x, plan, keras.optimizers.Adam(1e-2), str(directory), verbose=0)


@pytest.fixture(scope="module")
def first_epoch_at_target(tmp_path_factory):
    """(folder, plan, fit record) of a finished 1-epoch run at target_epsilon=TARGET (a new folder's
    ledger is empty: planned as without one): each resume below continues a copy of the folder."""
    folder = tmp_path_factory.mktemp("first_epoch_at_target")
    return (folder, *_target_run(folder, epochs=1))


def test_target_epsilon_on_resume_is_calibrated_for_what_is_left(tmp_path, first_epoch_at_target):
    folder, first_plan, first = first_epoch_at_target
    folder = shutil.copytree(folder, tmp_path / "run")
    assert first["epsilon"] == pytest.approx(2.0, rel=1e-3)
    # Resume to 3 epochs at the same target: the old code calibrated 3 epochs from scratch on top
    # of the first one's spending and overshot the target.
    plan, out = _target_run(folder, epochs=3)
    assert plan.steps_taken == 10 and plan.summary()["resumed_from"]["steps"] == 10
    assert out["steps"] == 30
    assert out["epsilon"] <= 2.0 * (1 + 1e-3) and out["epsilon"] == pytest.approx(2.0, rel=1e-3)
    assert plan.config.noise_multiplier > first_plan.config.noise_multiplier  # 20 more steps, less budget each
    segments = read_ledger(str(folder)).segments()
    assert [s[2] for s in segments] == [10, 20]
    assert out["epsilon"] == pytest.approx(RDP.epsilon(segments, 1e-3))


def test_target_epsilon_already_spent_is_refused(tmp_path):
    def plan_for(target, history=()):
        enc, dec = build_architecture("mlp", [12], 3)
        cfg = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, num_partitions=1)
        return plan_privacy(cfg, VAE(enc, dec).term_spec(), N, 12, 2, delta=1e-3, target_epsilon=target,
                            history=history)

    spent = [(0.1, 0.8, 10)]
    from tfpriv.errors import ConfigError
    with pytest.raises(ConfigError, match="^target_epsilon: 1 is already spent"):
        plan_for(1.0, spent)
    assert RDP.epsilon(spent, 1e-3) > 1.0


def test_fit_private_recalibrates_a_plan_made_without_the_ledger(tmp_path, first_epoch_at_target):
    """A library user who plans without `history` still stops at the target on resume."""
    folder = shutil.copytree(first_epoch_at_target[0], tmp_path / "run")
    _, out = _target_run(folder, epochs=2, with_ledger=False)
    assert out["epsilon"] == pytest.approx(TARGET, rel=1e-3) and out["plan"].steps_taken == 10


def test_a_checkpoint_written_before_the_selections_total_still_resumes(tmp_path, monkeypatch, vae_straight):
    """Run folders written before `RunState.selection_epsilon` existed resume (the same objects without
    it, total 0) and continue step for step, instead of a traceback from the checkpoint's matching."""
    from tfpriv.training import runner
    straight, out = vae_straight
    new_layout = runner.RunState.__init__

    def old_layout(self, sampling_seed):
        new_layout(self, sampling_seed)
        del self.selection_epsilon

    monkeypatch.setattr(runner.RunState, "__init__", old_layout)
    _vae_run(tmp_path / "old", epochs=1)
    monkeypatch.undo()
    ckpt = runner.tf.train.latest_checkpoint(str(tmp_path / "old" / "checkpoints"))
    assert runner.SELECTION_EPSILON_KEY not in runner.tf.train.load_checkpoint(ckpt).get_variable_to_dtype_map()
    resumed, out2 = _vae_run(tmp_path / "old", epochs=2)
    assert out2["resumed"] and out2["train_steps"] == out["train_steps"] and out2["epsilon"] == out["epsilon"]
    _assert_identical(_weights(resumed.variables), _weights(straight.variables))
