"""`Heartbeat`: a sign of life during long epochs at verbose=2 (issue 50 item 10: a 74-s epoch showed nothing)."""

import numpy as np

import tfpriv
from tfpriv.compat import keras
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.vae import VAE
from tfpriv.training.progress import Heartbeat
from tfpriv.training.runner import fit_private, plan_privacy


def test_a_line_whenever_the_interval_passed_in_an_epoch(capsys):
    now = [0.0]
    beat = Heartbeat(steps_per_epoch=10, every_seconds=30.0, clock=lambda: now[0])
    beat.set_params({"epochs": 3, "steps": 10})
    beat.on_epoch_begin(1)
    for batch, t in enumerate([10.0, 29.0, 31.0, 45.0, 62.0]):  # a fake clock: no wall time is read
        now[0] = t
        beat.on_train_batch_end(batch)
    assert capsys.readouterr().out.splitlines() == ["  epoch 2: step 3/10 (31 s)", "  epoch 2: step 5/10 (62 s)"]


def test_a_one_epoch_fit_private_at_verbose_2_says_when_its_epoch_starts(tmp_path, capsys):
    """Keras prints `Epoch 1/N` only for N > 1: a one-epoch run printed nothing before its end."""
    vae = VAE(*build_architecture("mlp", [12], 3))
    plan = plan_privacy(tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1, num_partitions=1),
                        vae.term_spec(), 64, 8, 1, delta=1e-3)
    x = (np.random.default_rng(0).random((64, 12)) > 0.5).astype("float32")
    capsys.readouterr()
    fit_private(vae, x, plan, keras.optimizers.Adam(1e-2), str(tmp_path), seed=0, verbose=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Epoch 1/1 (8 steps)" and lines[1].startswith("8/8 - ")
