"""Private training end to end: one trace for all batch sizes, budget stop, resume continuity."""
import json
import os
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privae.architectures import mlp_decoder, mlp_encoder
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE
from tfpriv.privacy.accounting import RDP, PrivacyLedger
from tfpriv.privacy.config import DPConfig
from tfpriv.training.results import REQUIRED_KEYS, write_results
from tfpriv.training.runner import (add_selection_epsilon, fit_private, plan_privacy, read_ledger,
                                    read_selection_epsilon, restore_networks)

N = 200


def data():
    rng = np.random.default_rng(0)
    return (rng.random([N, 12]) > 0.5).astype(np.float32)


def vae():
    """A linear encoder and decoder (no hidden layer: the same terms, runner and checkpoints, each traced
    step a fraction of the ops of the default MLP's)."""
    enc, dec = mlp_encoder([12], 3, hidden=()), mlp_decoder(3, [12], hidden=())
    return VAE(enc, dec, prior=make_prior("sparse", 3), alpha=5.0, regularizer=make_divergence("mmd"))


def plan(model, epochs=2, **kw):
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=1.5, num_partitions=2)
    return plan_privacy(cfg, model.term_spec(), N, 20, epochs, delta=1e-3, **kw)


# RSS may grow by at most this much from the end of the warm-up epochs to the end of the run. Measured on
# 2 loaded cores: 3-8 MB for runs like this one (N=300..2000, 6-8 epochs); 82 MB for this test when each
# epoch traces its step again (a fresh train_function per epoch), so one leaked graph per epoch fails.
RSS_TOLERANCE_MB = 30
WARMUP_EPOCHS = 2


@pytest.fixture(scope="module")
def poisson_run(tmp_path_factory):
    """6 epochs of Poisson batches (n = 300, B = 20) through `fit_private`, counting the step's traces
    and the RSS after every epoch; read by the tracing and the memory test."""
    import gc

    import psutil

    n, epochs = 300, 6
    x = (np.random.default_rng(1).random([n, 12]) > 0.5).astype(np.float32)
    model = vae()
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=1.5, num_partitions=2)
    p = plan_privacy(cfg, model.term_spec(), n, 20, epochs, delta=1e-4)
    traces, rss_mb = [], []
    step = model.train_step

    def counted_step(batch):  # Python runs this once per trace, whichever tf.function traces it
        traces.append(batch.shape)
        return step(batch)

    model.train_step = counted_step

    class Rss(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            gc.collect()
            rss_mb.append(psutil.Process().memory_info().rss / 2**20)

    folder = tmp_path_factory.mktemp("poisson")
    out = fit_private(model, x, p, keras.optimizers.Adam(1e-3), str(folder), seed=1, verbose=0,
                      extra_callbacks=[Rss()])
    return types.SimpleNamespace(model=model, x=x, plan=p, out=out, folder=folder, traces=traces, rss_mb=rss_mb)


def test_poisson_batches_vary_but_train_step_is_traced_once(poisson_run):
    from tfpriv.data.sampling import make_dataset

    model, p, out, epochs = poisson_run.model, poisson_run.plan, poisson_run.out, poisson_run.plan.epochs
    batches, _, steps_per_epoch = make_dataset(poisson_run.x, 20, "poisson", 1)  # the batches of the run: (seed, step)
    sizes = {int(b.shape[0]) for b in batches.take(epochs * steps_per_epoch)}
    assert len(sizes) >= 5  # Poisson: the batch size varies ...
    traces = poisson_run.traces
    assert len(traces) == 1 and traces[0][0] is None  # ... and one trace with an unknown batch size serves all
    assert model.train_function.experimental_get_tracing_count() == 1
    assert out["steps"] == epochs * p.steps_per_epoch == 90
    expected = RDP.epsilon([(p.sampling_rate, p.effective_noise_multiplier, 90)], 1e-4)
    assert out["epsilon"] == pytest.approx(expected)
    assert len(out["history"]["epsilon"]) == epochs and out["history"]["epsilon"][-1] == pytest.approx(expected)
    assert os.path.isdir(poisson_run.folder / "logs")
    # the MMD of the codes reaches the encoder, not the decoder: only the encoder gets the C2 noise
    encoder_size, decoder_size = model.encoder.count_params(), model.decoder.count_params()
    assert out["batch_terms_reach"] == {"reached_parameters": encoder_size, "unreached_parameters": decoder_size}


def test_memory_stays_flat_over_epochs_of_poisson_batches(poisson_run):
    rss_mb = poisson_run.rss_mb
    growth = max(rss_mb[WARMUP_EPOCHS:]) - rss_mb[WARMUP_EPOCHS - 1]
    assert len(rss_mb) == poisson_run.plan.epochs and growth < RSS_TOLERANCE_MB, rss_mb


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory):
    """A finished 1-epoch run (its folder, trained model and record), the first segment of the resume
    tests (each resumes a copy of the folder) and the checkpoint `restore_networks` reads."""
    keras.utils.set_random_seed(0)
    folder = tmp_path_factory.mktemp("one_epoch")
    first = vae()
    out = fit_private(first, data(), plan(first, epochs=1), keras.optimizers.Adam(1e-3), str(folder), seed=1,
                      verbose=0)
    return folder, first, out


def _resume_copy(one_epoch_run, tmp_path):
    return shutil.copytree(one_epoch_run[0], tmp_path / "run")


def test_an_extended_run_whose_noise_multiplier_changes_says_so(tmp_path, capsys, one_epoch_run):
    folder, first = _resume_copy(one_epoch_run, tmp_path), one_epoch_run[2]
    second = vae()
    target = first["epsilon"] + 1.0  # a larger target over 3 epochs: the noise is re-calibrated for 20 steps
    p = plan(second, epochs=3, target_epsilon=target)
    capsys.readouterr()
    out = fit_private(second, data(), p, keras.optimizers.Adam(1e-3), str(folder), seed=1, verbose=0)
    z = out["plan"].effective_noise_multiplier
    assert z != pytest.approx(first["plan"].effective_noise_multiplier) and out["epsilon"] <= target
    lines = [line for line in capsys.readouterr().out.splitlines() if "noise multiplier changes" in line]
    assert lines == [f"noise multiplier changes: effective {first['plan'].effective_noise_multiplier:.4g} over the "
                     f"10 steps taken, {z:.4g} from here (target_epsilon={target:g} re-calibrated for the remaining "
                     "20 planned steps)"]


def test_resume_restores_weights_and_optimizer(tmp_path, one_epoch_run):
    folder, saved = _resume_copy(one_epoch_run, tmp_path), one_epoch_run[1].get_weights()
    second = vae()
    opt = keras.optimizers.Adam(1e-3)
    fit_private(second, data(), plan(second, epochs=1), opt, str(folder), seed=1, verbose=0)  # nothing left to do
    for a, b in zip(saved, second.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_max_epsilon_stops_training_before_the_budget_is_exceeded(tmp_path):
    model = vae()
    p = plan(model, epochs=50, max_epsilon=3.0)
    out = fit_private(model, data(), p, keras.optimizers.Adam(1e-3), str(tmp_path), seed=1, verbose=0)
    allowed = RDP.max_steps_within(3.0, 1e-3, p.sampling_rate, p.effective_noise_multiplier)
    assert out["budget_reached"] and out["steps"] == allowed < 50 * p.steps_per_epoch
    assert out["epsilon"] <= 3.0


@pytest.fixture(scope="module")
def planned_at_target():
    """A plan of 4 epochs at target_epsilon=2, its noise calibrated once (a PrivacyPlan is frozen)."""
    return plan(vae(), epochs=4, target_epsilon=2.0)


def test_target_epsilon_calibrates_the_noise(planned_at_target):
    p = planned_at_target
    eps = RDP.epsilon([(p.sampling_rate, p.effective_noise_multiplier, p.planned_steps)], p.delta)
    assert 1.95 < eps <= 2.0
    assert p.config.noise_multiplier == pytest.approx(p.effective_noise_multiplier * 5 ** 0.5)


def test_results_json_requires_the_documented_keys(tmp_path):
    with pytest.raises(KeyError, match="epsilon"):
        write_results(str(tmp_path), {"model": "x"})
    record = {k: 1 for k in REQUIRED_KEYS}
    record["epsilon"] = float("inf")
    path = write_results(str(tmp_path), record)
    assert json.load(open(path))["epsilon"] == "inf"


def test_restore_networks_reads_raw_weights_and_step_count_and_refuses_a_wrong_name(one_epoch_run):
    folder, model, out = one_epoch_run
    checkpoint = os.path.join(folder, "checkpoints", "ckpt-1")
    fresh = vae()
    fresh(data()[:2])  # builds the variables the checkpoint fills
    assert not np.allclose(fresh.decoder.get_weights()[0], model.decoder.get_weights()[0])
    assert restore_networks(checkpoint, encoder=fresh.encoder, decoder=fresh.decoder) == out["steps"]
    for got, want in zip(fresh.encoder.get_weights() + fresh.decoder.get_weights(),
                         model.encoder.get_weights() + model.decoder.get_weights()):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(AssertionError):
        restore_networks(checkpoint, generator=vae().decoder)
    with pytest.raises(ValueError, match="at least one network"):
        restore_networks(checkpoint)


def test_a_plan_for_a_finished_run_records_the_noise_its_ledger_used(planned_at_target):
    """Re-planning a run whose ledger holds every planned step (a re-run of a finished run) keeps the
    noise of that ledger, not the flag's noise nor a target epsilon's calibration for 0 steps."""
    model, first = vae(), planned_at_target
    used = [(first.sampling_rate, first.effective_noise_multiplier, first.planned_steps)]
    for again in (plan(model, epochs=4, target_epsilon=2.0, history=used), plan(model, epochs=4, history=used)):
        assert again.config.noise_multiplier == pytest.approx(first.config.noise_multiplier, rel=1e-12) != 1.5
        assert again.summary()["noise_stddev"] == pytest.approx(first.summary()["noise_stddev"], rel=1e-12)


def test_a_resumed_run_that_takes_no_step_records_the_noise_it_used(tmp_path, one_epoch_run):
    """A re-run stopped before its first step (here the budget) records the noise of the steps taken."""
    folder = _resume_copy(one_epoch_run, tmp_path)
    second = vae()
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, noise_multiplier=0.7, num_partitions=2)
    p = plan_privacy(cfg, second.term_spec(), N, 20, 3, delta=1e-3, max_epsilon=one_epoch_run[2]["epsilon"])
    out = fit_private(second, data(), p, keras.optimizers.Adam(1e-3), str(folder), seed=1, verbose=0)
    assert out["budget_reached"] and out["steps"] == one_epoch_run[2]["steps"]
    first = one_epoch_run[2]["plan"]
    recorded = json.load(open(folder / "privacy_plan.json"))
    for record in (out["plan"].summary(), recorded):
        assert record["noise_multiplier"] == pytest.approx(first.config.noise_multiplier, rel=1e-6) != 0.7
        assert record["effective_noise_multiplier"] == pytest.approx(first.effective_noise_multiplier, rel=1e-6)


def test_a_resumed_run_continues_its_epsilon_and_keeps_the_selections_epsilon_in_its_checkpoint(tmp_path,
                                                                                                 one_epoch_run):
    """A run resumed after 1 of 3 epochs continues its steps and epsilon (not restarted). The total of
    the selections on a run's validation split lives in its checkpoint (not a side file): each
    addition continues it, and the checkpoints of the resumed run keep it. (One resume checks both:
    each was a resumed training of the same one-epoch run.)"""
    folder = _resume_copy(one_epoch_run, tmp_path)
    assert read_selection_epsilon(str(folder)) == 0.0
    assert add_selection_epsilon(str(folder), 0.5) == 0.5
    assert add_selection_epsilon(str(folder), 0.25) == read_selection_epsilon(str(folder)) == 0.75
    second = vae()
    p = plan(second, epochs=3)
    out = fit_private(second, data(), p, keras.optimizers.Adam(1e-3), str(folder), seed=1, verbose=0)
    assert out["resumed"] and out["epochs_completed"] == 3
    # 10 before the restart + 20 after: continued, not restarted (the rewritten checkpoint restored (ledger,
    # epoch) as saved)
    assert out["steps"] == 30
    assert out["epsilon"] == pytest.approx(RDP.epsilon([(p.sampling_rate, p.effective_noise_multiplier, 30)], 1e-3))
    assert read_selection_epsilon(str(folder)) == 0.75 and os.path.basename(
        tf.train.latest_checkpoint(str(folder / "checkpoints"))) == "ckpt-3"
    with pytest.raises(ConfigError, match=r"^output_dir: .*checkpoints holds no checkpoint"):
        read_selection_epsilon(str(tmp_path / "elsewhere"))


def _release_into_decoder(calls):
    """A `make_releases` that records each pending release and adds seeded noise to the decoder's
    first kernel (what a warm start changes), counting its calls in `calls`."""
    def make(ledger, pending):
        calls.append(dict(pending))
        for name, noise in pending.items():
            kernel = model_of[0].decoder.trainable_variables[0]
            kernel.assign_add(np.random.default_rng(7).normal(0, 0.1, kernel.shape).astype(np.float32))
            ledger.release(name, noise)
    model_of = []
    return make, model_of


class Crash(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        raise RuntimeError("killed")


def test_a_release_is_planned_made_once_checkpointed_before_the_first_step_and_survives_a_restart(tmp_path):
    """#47.8: the plan calibrates the steps' noise with the release composed; `fit_private` makes it
    once, checkpoints it before any step, and a run killed after it continues to the same weights and
    epsilon without releasing again."""
    cfg = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, num_partitions=2, seed=3)  # seeded noise
    p = plan_privacy(cfg, vae().term_spec(), N, 20, 1, delta=1e-3, target_epsilon=8.0, releases={"means": 0.5})
    (name, z0), = p.releases
    assert name == "means" and RDP.epsilon([(1.0, z0, 1)], 1e-3) == pytest.approx(0.5, rel=1e-3)
    assert RDP.epsilon(p.planned_segments(), 1e-3) == pytest.approx(8.0, rel=1e-3)
    alone = plan(vae(), epochs=1, target_epsilon=8.0)
    assert p.effective_noise_multiplier > alone.effective_noise_multiplier  # the steps get the rest
    runs = {}
    for kind in ("whole", "killed"):
        keras.utils.set_random_seed(0)
        model, calls = vae(), []
        make, model_of = _release_into_decoder(calls)
        model_of.append(model)
        folder = str(tmp_path / kind)
        if kind == "killed":
            with pytest.raises(RuntimeError, match="killed"):
                fit_private(model, data(), p, keras.optimizers.Adam(1e-3), folder, seed=1, verbose=0,
                            extra_callbacks=[Crash()], make_releases=make)
            assert calls == [{"means": z0}] and tf.train.latest_checkpoint(os.path.join(folder, "checkpoints"))
            keras.utils.set_random_seed(0)
            model = vae()

            def make(ledger, pending):  # noqa: F811 (the restarted run must not release again)
                raise AssertionError("released twice")
        out = fit_private(model, data(), p, keras.optimizers.Adam(1e-3), folder, seed=1, verbose=0,
                          make_releases=make)
        runs[kind] = (out, model.get_weights())
    whole, killed = runs["whole"][0], runs["killed"][0]
    assert whole["steps"] == killed["steps"] == 10
    assert whole["epsilon"] == killed["epsilon"] == pytest.approx(RDP.epsilon(p.planned_segments(), 1e-3))
    assert whole["ledger"][0]["scheme"] == "release" and whole["plan"].summary()["releases"][0]["made"]
    for a, b in zip(*(runs[k][1] for k in runs)):
        np.testing.assert_array_equal(a, b)


def test_a_release_the_run_cannot_make_as_planned_is_refused(tmp_path):
    p = plan(vae(), epochs=1, releases={"means": 0.5})
    with pytest.raises(ConfigError, match=r"^make_releases: the plan holds releases \(means\) but nothing makes them"):
        fit_private(vae(), data(), p, keras.optimizers.Adam(1e-3), str(tmp_path / "a"), seed=1, verbose=0)
    with pytest.raises(ConfigError, match="^make_releases: the ledger must record exactly the releases"):
        fit_private(vae(), data(), p, keras.optimizers.Adam(1e-3), str(tmp_path / "b"), seed=1, verbose=0,
                    make_releases=lambda ledger, pending: ledger.release("means", 1.0))
    assert not tf.train.latest_checkpoint(str(tmp_path / "b" / "checkpoints"))  # nothing saved for it
    with pytest.raises(ConfigError, match="^releases: 'means' is a private release; a run without DP makes none"):
        plan_privacy(DPConfig(aggregation="none"), vae().term_spec(), N, 20, 1, delta=1e-3, releases={"means": 0.5})
    with pytest.raises(ConfigError, match="^releases: the epsilon of 'means' must be positive, finite and below"):
        plan(vae(), epochs=1, target_epsilon=1.0, releases={"means": 1.0})
    with pytest.raises(ConfigError, match="^releases: they alone would spend more than max_epsilon=0.3"):
        plan(vae(), epochs=1, max_epsilon=0.3, releases={"means": 0.5})


def test_a_release_is_refused_after_steps_and_at_another_noise_than_the_ledgers(tmp_path, one_epoch_run):
    folder = _resume_copy(one_epoch_run, tmp_path)
    with pytest.raises(ConfigError, match="^releases: 'means' is made before the first step; the ledger holds 10 steps"):
        plan(vae(), epochs=2, releases={"means": 0.5}, history=read_ledger(str(folder)))
    ledger = PrivacyLedger()
    ledger.release("means", 3.0)
    with pytest.raises(ConfigError, match="^releases: the ledger holds 'means' at noise multiplier 3, this plan"):
        plan(vae(), epochs=2, releases={"means": 0.5}, history=ledger)
    z0 = plan(vae(), epochs=1, releases={"means": 0.5}).releases[0][1]
    ledger = PrivacyLedger()
    ledger.release("means", z0)
    continued = plan(vae(), epochs=1, releases={"means": 0.5}, history=ledger)
    assert continued.pending_releases == () and continued.history == ((1.0, z0, 1),) and continued.steps_taken == 0
