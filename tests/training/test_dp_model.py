"""`DPModel.fit` alone (no runner) counts its steps in the ledger and reports the accountant's epsilon."""
import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import dp as gan_dp
from tests.gan.helpers import tiny_wgan
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privae.architectures import mlp_decoder, mlp_encoder
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE
from tfpriv.privacy.accounting import RDP, get_accountant
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import LossTerms, TermSpec
from tfpriv.training.dp_model import DPModel

N, B = 96, 16
CONFIG = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=2.0, num_partitions=2,
                  expected_batch_size=B)


def _vae():
    """A linear encoder and decoder: what is checked here is accounting, which no hidden layer changes
    (each traced step a fraction of the ops of the default MLP's)."""
    keras.utils.set_random_seed(0)
    enc, dec = mlp_encoder([12], 3, hidden=()), mlp_decoder(3, [12], hidden=())
    return VAE(enc, dec, prior=make_prior("sparse", 3), alpha=5.0, regularizer=make_divergence("mmd"))


def _x():
    return (np.random.default_rng(0).random([N, 12]) > 0.5).astype(np.float32)


def _expected(steps):
    return RDP.epsilon([(B / N, CONFIG.effective_noise_multiplier(True), steps)], 1e-3)


def _fixed(steps):
    """A fixed batch: a Gaussian at half the effective noise multiplier, no amplification."""
    return RDP.epsilon([(1.0, CONFIG.effective_noise_multiplier(True) / 2, steps)], 1e-3)


def test_a_dataset_tfpriv_did_not_sample_is_refused_unless_its_scheme_is_declared():
    """Issue 48: fixed batches used to be accounted as Poisson steps at q = B/N (an epsilon 3-6x too small)."""
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)
    batches = tf.data.Dataset.from_tensor_slices(_x()).batch(B)
    with pytest.raises(ConfigError, match="^x: tfpriv did not sample this dataset's or generator's batches"):
        vae.fit(batches, epochs=1, verbose=0)
    assert vae.ledger.total_steps == 0
    history = vae.fit(batches, epochs=2, verbose=0, sampling="fixed")
    assert vae.ledger.total_steps == 2 * (N // B)
    assert history.history["epsilon"] == pytest.approx([_fixed(6), _fixed(12)])
    assert _fixed(12) > 3 * _expected(12)   # what was reported before
    assert [row["scheme"] for row in vae.ledger.raw_segments() if row["steps"]] == ["fixed"]


def test_a_declared_poisson_pipeline_is_the_users_claim_and_its_first_batch_is_checked():
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)
    with pytest.raises(ConfigError, match="^sampling: a Poisson batch at q = 0.1667 from N=96 has size <= "):
        vae.fit(tf.data.Dataset.from_tensor_slices(_x()).batch(N), epochs=1, verbose=0, sampling="poisson")
    history = vae.fit(tf.data.Dataset.from_tensor_slices(_x()).batch(B), epochs=1, verbose=0, sampling="poisson")
    assert history.history["epsilon"][-1] == pytest.approx(_expected(6))
    assert [row["scheme"] for row in vae.ledger.raw_segments() if row["steps"]] == ["poisson_declared"]


def test_poisson_batches_are_accounted_by_their_tag_and_never_replayed():
    from tfpriv.data.sampling import poisson_batches, sampled_by
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)
    ds = poisson_batches(_x(), batch_size=B, seed=0)
    vae.fit(ds, steps_per_epoch=6, epochs=1, verbose=0)
    history = vae.fit(ds, steps_per_epoch=6, epochs=1, verbose=0)
    assert history.history["epsilon"][-1] == pytest.approx(_expected(12))
    assert sampled_by(ds).next_step == 6           # the second fit drew the steps after the first's
    with pytest.raises(ConfigError, match=r"^x: the dataset samples at rate 0.25 \(64 examples\); the model was compiled for q = 0.166667"):
        vae.fit(poisson_batches(_x()[:64], batch_size=B, seed=0), steps_per_epoch=2, verbose=0)
    with pytest.raises(ConfigError, match="^sampling: the dataset was drawn by tfpriv's poisson sampler"):
        vae.fit(ds, steps_per_epoch=2, verbose=0, sampling="fixed")


def test_train_on_batch_is_a_fixed_batch_step_before_and_after_fit():
    """Issue 49.1: train_on_batch crashed before any fit, and after one was counted as a Poisson step."""
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)
    vae.train_on_batch(_x())                                  # before any fit
    vae.fit(_x(), epochs=1, verbose=0, seed=0)                # 6 Poisson steps
    for _ in range(3):
        vae.train_on_batch(_x())
    expected = RDP.epsilon([(1.0, CONFIG.effective_noise_multiplier(True) / 2, 1),
                            (B / N, CONFIG.effective_noise_multiplier(True), 6),
                            (1.0, CONFIG.effective_noise_multiplier(True) / 2, 3)], 1e-3)
    assert vae.ledger.total_steps == 10 and vae.epsilon() == pytest.approx(expected)
    assert [r["scheme"] for r in vae.ledger.raw_segments() if r["steps"]] == ["fixed", "poisson", "fixed"]


def test_train_on_batch_stops_at_max_epsilon():
    from tfpriv.training.callbacks import BudgetExhausted
    vae = _vae()
    budget = _fixed(2) * 1.001
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3, max_epsilon=budget)
    vae.train_on_batch(_x())
    vae.train_on_batch(_x())
    with pytest.raises(BudgetExhausted, match="^train_on_batch: max_epsilon="):
        vae.train_on_batch(_x())
    assert vae.ledger.total_steps == 2


def test_fit_on_numpy_draws_poisson_batches_continues_across_calls_and_shows_epsilon(capsys):
    """Two fits on arrays: 6 Poisson steps each, the second after the first's; the first's progress
    bar (verbose=2) shows epsilon."""
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)
    vae.fit(_x(), epochs=1, verbose=2, seed=1)            # round(1/q) = 6 steps an epoch
    assert "epsilon: " in capsys.readouterr().out, "the progress bar shows epsilon"
    history = vae.fit(_x(), epochs=1, verbose=0, seed=1)
    assert vae.ledger.total_steps == int(vae.step_count.numpy()) == 12
    assert history.history["epsilon"][-1] == pytest.approx(_expected(12))
    with pytest.raises(ConfigError, match="batch_size"):
        vae.fit(_x(), batch_size=B + 1, verbose=0)
    with pytest.raises(ConfigError, match="num_examples"):
        vae.fit(_x()[:50], verbose=0)


def test_fit_on_a_generator():
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3)

    def batches():
        x = _x()
        while True:
            for i in range(0, N, B):
                yield x[i:i + B]

    with pytest.raises(ConfigError, match="^x: tfpriv did not sample"):
        vae.fit(batches(), steps_per_epoch=3, epochs=1, verbose=0)
    history = vae.fit(batches(), steps_per_epoch=3, epochs=1, verbose=0, sampling="fixed")
    assert history.history["epsilon"][-1] == pytest.approx(_fixed(3))


def test_a_private_compile_needs_the_training_set_size():
    with pytest.raises(ConfigError, match="num_examples"):
        _vae().compile(keras.optimizers.Adam(1e-3), dp=CONFIG)
    with pytest.raises(ConfigError, match="delta"):
        _vae().compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=0.5)


def test_a_non_private_model_reports_no_epsilon():
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3))
    history = vae.fit(_x(), batch_size=B, epochs=1, verbose=0)
    assert "epsilon" not in history.history and vae.epsilon() == float("inf")


def test_fit_reports_the_chosen_accountants_epsilon():
    vae = _vae()
    vae.compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, delta=1e-3, accountant="pld")
    history = vae.fit(tf.data.Dataset.from_tensor_slices(_x()).batch(B), epochs=1, verbose=0, sampling="poisson")
    segments = [(B / N, CONFIG.effective_noise_multiplier(True), 6)]
    assert history.history["epsilon"][-1] == pytest.approx(get_accountant("pld").epsilon(segments, 1e-3))
    assert history.history["epsilon"][-1] < _expected(6)
    with pytest.raises(ConfigError, match="accountant"):
        _vae().compile(keras.optimizers.Adam(1e-3), dp=CONFIG, num_examples=N, accountant="moments")


class _BatchCentred(DPModel):
    """A sample-wise term that reads the other examples (x_i minus the batch mean): verify refuses it."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def term_spec(self):
        return TermSpec(sample=("centred",))

    def loss_terms(self, x, layout, training=True):
        y = self.dense(x)[:, 0]
        return LossTerms({"centred": tf.square(y - tf.reduce_mean(y))})


def _prepare_outcome(model, batch) -> str:
    try:
        model.prepare(batch)
        return "trains"
    except ConfigError as exc:
        return f"refused: {str(exc).split('(')[0]}"


def test_whether_a_model_trains_does_not_depend_on_one_record():
    """Verification runs on a public batch: replacing one record of the first batch by an extreme or
    non-finite one changes nothing. Before, the DP-WGAN-GP critic (per_example) was refused when one
    image held 3e38 (its norms were compared with a whole-batch Jacobian that the record made NaN)."""
    images = np.random.default_rng(0).random((8, 28, 28, 1)).astype(np.float32)
    extreme = images.copy()
    extreme[3] = 3e38
    for batch in (images, extreme):
        assert _prepare_outcome(tiny_wgan(gan_dp()), {"image": tf.constant(batch)}) == "trains"
    features = np.random.default_rng(1).random((8, 5)).astype(np.float32)
    config = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=8)
    outcomes = set()
    for record in (None, 3e38, -3e38, np.inf, np.nan):
        batch = features.copy()
        if record is not None:
            batch[2] = record
        model = _BatchCentred()
        model.compile(keras.optimizers.SGD(0.1), dp=config, num_examples=100)
        outcomes.add(_prepare_outcome(model, tf.constant(batch)))
    assert outcomes == {"refused: DP engine: a sample-wise loss term depends on other examples in the batch "}
