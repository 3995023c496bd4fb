"""Held-out VAE metrics on a trained toy model."""
import numpy as np

from tfpriv.compat import keras
from tfpriv.data import load_dataset
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.evaluation import evaluate_vae
from tfpriv.privae.priors import make_prior
from tfpriv.privae.vae import VAE


def test_metrics_on_pinwheel_have_sane_values():
    data = load_dataset("pinwheel", seed=0)
    keras.utils.set_random_seed(0)
    enc, dec = build_architecture("pinwheel", [2], 2)
    vae = VAE(enc, dec, prior=make_prior("mixture", 2, sigma=0.3), likelihood="gaussian")
    vae.compile(keras.optimizers.Adam(1e-2))
    vae.fit(data.x_train, batch_size=50, epochs=30, verbose=0)
    m = evaluate_vae(vae, data.x_test, data.labels_test["cluster"], importance_samples=20)
    assert 0.25 <= m["cluster_purity"] <= 1.0
    assert 0.0 <= m["hoyer_sparsity"] <= 1.0
    assert np.isfinite(m["log_likelihood"]) and m["log_likelihood"] < 0
    assert m["reconstruction_error"] < float(np.var(data.x_test)) * 2   # learned something
    assert m["eval_examples"] == len(data.x_test)
