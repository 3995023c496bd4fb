"""`--model=privae` flags of the pinwheel experiment: --pinwheel_scale, --pinwheel_hidden, --pinwheel_anchor,
--pinwheel_posterior_std, --lr_schedule, --prior_samples; and the conv encoder's width, --conv_encoder_units.

Bad values are one line on stderr and exit code 2 (no output folder left behind); good
values reach the data and the networks and are recorded in results.json.
"""
import json

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.helpers import assert_one_line_error, train_py
from tests.conftest import saved_flags
from tfpriv.compat import keras
from tfpriv.data import make_pinwheel
from tfpriv.privae import job as privae_job
from tfpriv.privae.vae import load_vae

PINWHEEL = ["--model=privae", "--dataset=pinwheel", "--prior=mixture", "--regularizer=kl_pq", "--latent_dim=2",
            "--num_partitions=1", "--batch_size=20"]


@pytest.mark.parametrize("args,flag", [
    (PINWHEEL + ["--pinwheel_scale=0"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=-2"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=nan"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=inf"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=ten"], "pinwheel_scale"),
    (["--dataset=digits", "--pinwheel_scale=1"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_hidden=0"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden=16,"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden=wide"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden="], "--pinwheel_hidden"),
    (["--dataset=digits", "--pinwheel_hidden=16"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_posterior_std=0"], "--pinwheel_posterior_std"),
    (PINWHEEL + ["--pinwheel_posterior_std=-0.1"], "--pinwheel_posterior_std"),
    (["--dataset=digits", "--pinwheel_posterior_std=0.03"], "--pinwheel_posterior_std"),
    (PINWHEEL + ["--pinwheel_anchor=encoder"], "--pinwheel_anchor"),
    (["--dataset=digits", "--pinwheel_anchor=both"], "--pinwheel_anchor"),
    (PINWHEEL + ["--lr_schedule=step"], "--lr_schedule"),
    (PINWHEEL + ["--prior_samples=0"], "--prior_samples"),
    (["--dataset=digits", "--regularizer=none", "--prior_samples=8"], "--prior_samples"),
    (["--dataset=mnist", "--architecture=conv", "--conv_encoder_units=0"], "--conv_encoder_units"),
    (["--dataset=digits", "--conv_encoder_units=32"], "--conv_encoder_units"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_architecture_flags_are_one_line_exit_2(tmp_path, capsys, args, flag):
    out = tmp_path / "run"
    assert_one_line_error(train_py(f"--output_dir={out}", "--epochs=1", "--verbose=0", *args, capsys=capsys), flag, out)


def test_scale_widths_anchor_and_posterior_std_reach_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", *PINWHEEL, "--pinwheel_scale=1", "--pinwheel_hidden=8,4", "--pinwheel_anchor=both",
                    "--pinwheel_posterior_std=0.03", "--prior_samples=40", "--epochs=1", "--epsilon=2.87",
                    "--l2_norm_clip=0.05", "--batch_clip=0.005", "--eval_importance_samples=5", "--verbose=0", "--seed=2", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]  # includes the engine's check of the fast clipping path
    results = json.load(open(out / "results.json"))
    assert results["pinwheel_scale"] == 1.0 and results["pinwheel_hidden"] == [8, 4]
    assert results["pinwheel_anchor"] == "both" and results["pinwheel_posterior_std"] == 0.03
    assert results["prior_samples"] == 40
    # encoder 2-8-4-2 (means only) and decoder 2-4-8-2, no biases but the decoder's output
    assert results["num_parameters"] == (2 * 8 + 8 * 4 + 4 * 2) + (2 * 4 + 4 * 8 + 8 * 2 + 2)
    assert 0 <= results["metrics"]["cluster_purity"] <= 1
    # the reconstruction error is measured on the unit-scale data (radius ~1), not on radius ~10
    x = make_pinwheel(seed=2, scale=1.0)[0]
    assert results["metrics"]["reconstruction_error"] < 20 * float(np.var(x))
    assert (out / "pinwheel.png").exists()
    mean, logvar = load_vae(str(out / "vae")).encode(tf.constant([[0.0, 0.0], [0.3, -0.2]]))
    np.testing.assert_allclose(mean[0], [0.5, 0.5], atol=1e-6)  # the prior's centre, whatever was learned
    np.testing.assert_allclose(tf.exp(0.5 * logvar), 0.03, rtol=1e-5)
    assert load_vae(str(out / "vae")).regularizer.prior_samples == 40


def test_cosine_schedule_reaches_the_built_optimizer(tmp_path):
    with saved_flags():
        s = privae_job.JOB.settings(dataset="pinwheel", prior="mixture", latent_dim=2,
                          architecture="pinwheel", pinwheel_hidden="4", lr_schedule="cosine", learning_rate=0.01,
                          epochs=2, batch_size=20, sampling="poisson", seed=0)
    run = privae_job.PriVAERun(s, str(tmp_path / "unused"))
    optimizer = run.build(run.load()).optimizer
    schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
    assert float(schedule(0)) == pytest.approx(0.01)
    assert float(schedule(40)) == pytest.approx(0.0, abs=1e-9)  # 2 epochs of round(400 / 20) steps


def test_conv_encoder_units_reach_the_built_encoder(tmp_path):
    with saved_flags():
        s = privae_job.JOB.settings(dataset="mnist", architecture="conv", conv_encoder_units=16,
                          latent_dim=4, epochs=1, batch_size=20, sampling="poisson", seed=0)
    data = type("Data", (), {"x_train": np.zeros([3, 28, 28, 1], np.float32), "kind": "images",
                             "likelihood": "bernoulli"})()
    vae = privae_job.build_vae(s, data, latent_dim=4)
    assert [layer.units for layer in vae.encoder.layers if isinstance(layer, keras.layers.Dense)] == [16, 8]
