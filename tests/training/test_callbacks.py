"""Callbacks of private training: a budget that allows no step is refused with what happened, a
budget stop says so, an epsilon beyond float32 is logged as inf, and an epoch stopped early shows
the steps it took in the progress bar."""
import math

import numpy as np
import pytest

import tfpriv
from tfpriv.audit.sweep import build_vae
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.vae import VAE
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.config import DPConfig
from tfpriv.training.callbacks import BudgetExhausted, StepProgressBar, loggable
from tfpriv.training.runner import fit_private, plan_privacy

N, B, Z, DELTA = 64, 16, 1.0, 1e-3


def _private(max_epsilon: float):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    config = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=Z)
    dp_model = tfpriv.make_private(model, loss, config, num_examples=N, batch_size=B, delta=DELTA,
                                   max_epsilon=max_epsilon)
    dp_model.compile(optimizer="sgd")
    x = np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32)
    return dp_model, x, (x[:, 0] > 0).astype(np.int32)


def test_a_budget_below_one_step_is_refused_saying_what_one_step_would_spend():
    one_step = RDP.epsilon([(B / N, Z, 1)], DELTA)
    dp_model, x, y = _private(max_epsilon=one_step / 2)
    with pytest.raises(BudgetExhausted) as info:
        dp_model.fit(x, y, epochs=1, verbose=0)
    message = str(info.value)
    assert message.startswith(f"max_epsilon={one_step / 2:g}: no further step fits in the budget")
    assert f"epsilon = {one_step:.4g}" in message and "after 0 steps" in message
    assert dp_model.ledger.total_steps == 0


def test_a_budget_stop_prints_epsilon_and_steps(capsys):
    budget = RDP.epsilon([(B / N, Z, 6)], DELTA) * 1.0001
    allowed = RDP.max_steps_within(budget, DELTA, B / N, Z)
    dp_model, x, y = _private(max_epsilon=budget)
    history = dp_model.fit(x, y, epochs=5, verbose=2)                  # 4 steps an epoch: stops in epoch 2
    assert allowed == 6 and dp_model.ledger.total_steps == 6 and len(history.history["epsilon"]) == 2
    spent = RDP.epsilon([(B / N, Z, 6)], DELTA)
    assert (f"stopped at max_epsilon={budget:g}: epsilon = {spent:.4g} at delta = 0.001 after 6 steps; "
            "one more step would exceed the budget") in capsys.readouterr().out
    with pytest.raises(BudgetExhausted, match=f"spent so far: epsilon = {spent:.4g} at delta = 0.001 after 6 steps"):
        dp_model.fit(x, y, epochs=1, verbose=0)                        # nothing left: refused


def test_a_budget_with_several_steps_per_execution_is_refused_naming_it():
    """The budget is checked between executions: several steps in one could overshoot it."""
    dp_model, x, y = _private(max_epsilon=5.0)
    dp_model.compile(optimizer="sgd", steps_per_execution=2)
    with pytest.raises(ConfigError, match="^steps_per_execution: max_epsilon=5 is checked before every step"):
        dp_model.fit(x, y, epochs=1, verbose=0)
    assert dp_model.ledger.total_steps == 0


N_VAE = 200


class StopAt(keras.callbacks.Callback):
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
    plan = plan_privacy(cfg, model.term_spec(), N_VAE, 20, epochs, delta=1e-3, sampling="shuffle")
    x = (np.random.default_rng(0).random([N_VAE, 12]) > 0.5).astype(np.float32)
    return fit_private(model, x, plan, keras.optimizers.Adam(1e-3), str(tmp_path), seed=1, verbose=2,
                       extra_callbacks=callbacks)


def test_an_epoch_stopped_early_ends_at_the_steps_taken(tmp_path, capsys):
    out = fit(tmp_path, [StopAt(13), StepProgressBar()])
    assert out["train_steps"] == 13
    printed = capsys.readouterr().out
    assert "9/9 - " in printed  # the first, complete epoch ((N_VAE - 1) // batch = 9 shuffled steps)
    assert "4/4 - " in printed and printed.count("9/9 - ") == 1  # Keras' own bar printed 9/9 twice


def test_complete_epochs_are_unchanged(tmp_path, capsys):
    fit(tmp_path, [StepProgressBar()])
    assert capsys.readouterr().out.count("9/9 - ") == 2


def test_an_epsilon_beyond_float32_is_logged_as_inf():
    assert loggable(3.0) == 3.0 and loggable(3e38) == 3e38
    assert loggable(6e61) == math.inf and loggable(math.inf) == math.inf


def test_a_negligible_noise_multiplier_finishes_with_the_accountants_epsilon(tmp_path):
    """noise_multiplier=1e-30: the RDP epsilon is ~1e61, beyond float32; the epoch's logs (TensorBoard
    writes float32) carry inf and the run reports the accountant's value. Before, TensorBoard raised
    at the end of the epoch and the run ended without an epsilon."""
    x = (np.random.default_rng(0).random((32, 12)) > 0.5).astype(np.float32)
    vae = build_vae("normal", "none", (12,), latent_dim=2, hidden=(8,), seed=0)
    config = DPConfig(aggregation="termwise", num_partitions=0, l2_norm_clip=1.0, noise_multiplier=1e-30)
    plan = plan_privacy(config, vae.term_spec(), len(x), 16, 1)
    fit = fit_private(vae, x, plan, keras.optimizers.SGD(0.1), str(tmp_path), seed=0, verbose=0)
    assert fit["steps"] == 2 and 1e38 < fit["epsilon"] < math.inf
    assert fit["history"]["epsilon"] == [math.inf]
