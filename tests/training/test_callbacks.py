"""Epsilon in the logs (tfpriv/training/callbacks.py)."""
import math

import numpy as np
import tensorflow as tf

from tfpriv.audit.sweep import build_vae
from tfpriv.privacy.config import DPConfig
from tfpriv.training.callbacks import loggable
from tfpriv.training.runner import fit_private, plan_privacy


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
    fit = fit_private(vae, x, plan, tf.keras.optimizers.SGD(0.1), str(tmp_path), seed=0, verbose=0)
    assert fit["steps"] == 2 and 1e38 < fit["epsilon"] < math.inf
    assert fit["history"]["epsilon"] == [math.inf]
