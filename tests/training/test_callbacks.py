"""The progress bar of private training: an epoch stopped early shows the steps it took."""
import numpy as np
import tensorflow as tf

from tfpriv.models.architectures import build_architecture
from tfpriv.models.vae import VAE
from tfpriv.privacy.config import DPConfig
from tfpriv.training.callbacks import StepProgressBar
from tfpriv.training.runner import fit_private, plan_privacy

N = 200


class StopAt(tf.keras.callbacks.Callback):
    """Stops training after `steps` steps (what `--max_steps` does)."""

    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.step_count.numpy()) >= self.steps:
            self.model.stop_training = True


def fit(tmp_path, callbacks, epochs=2):
    enc, dec = build_architecture("mlp", [12], 3)
    model = VAE(enc, dec)
    cfg = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.5)
    plan = plan_privacy(cfg, model.term_spec(), N, 20, epochs, delta=1e-3, sampling="shuffle")
    x = (np.random.default_rng(0).random([N, 12]) > 0.5).astype(np.float32)
    return fit_private(model, x, plan, tf.keras.optimizers.Adam(1e-3), str(tmp_path), seed=1, verbose=2,
                       extra_callbacks=callbacks)


def test_an_epoch_stopped_early_ends_at_the_steps_taken(tmp_path, capsys):
    out = fit(tmp_path, [StopAt(13), StepProgressBar()])
    assert out["train_steps"] == 13
    printed = capsys.readouterr().out
    assert "10/10 - " in printed  # the first, complete epoch (N / batch = 10 steps)
    assert "3/3 - " in printed and printed.count("10/10 - ") == 1  # Keras' own bar printed 10/10 twice


def test_complete_epochs_are_unchanged(tmp_path, capsys):
    fit(tmp_path, [StepProgressBar()])
    assert capsys.readouterr().out.count("10/10 - ") == 2
