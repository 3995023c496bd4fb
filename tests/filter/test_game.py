import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.filter import rdp
from tfpriv.filter.architectures import build_classifier
from tfpriv.filter.divergence import estimate_precision
from tfpriv.filter.filters import LinearFilter, MLPFilter
from tfpriv.filter.game import FilterGame
from tfpriv.filter.pipeline import (FilterConfig, LabelPrivacyError, evaluate_codes, filter_privacy,
                                    release_and_evaluate, run_budget, train_filter)


def _latents(n, seed):
    """Private label linearly encoded on axis 0, utility label on axis 1, axis 2 pure noise."""
    rng = np.random.default_rng(seed)
    y, u = rng.integers(0, 2, n), rng.integers(0, 2, n)
    z = rng.normal(size=(n, 3))
    z[:, 0] += 3 * y - 1.5
    z[:, 1] += 3 * u - 1.5
    return z.astype(np.float32), {"private": y, "utility": u}


def _game(z, budget, rho=10.0, filter_lr=1e-3):
    g = FilterGame(LinearFilter(3, 2), build_classifier(3, 2, "linear"), build_classifier(3, 2, "linear"),
                   estimate_precision(z), 2, budget=budget, rho_init=rho)
    g.compile(keras.optimizers.Adam(filter_lr), keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3))
    return g


def test_filter_hides_linearly_encoded_private_label_and_keeps_utility():
    ztr, ytr = _latents(2000, 0)
    zte, yte = _latents(1000, 1)
    nc = {"private": 2, "utility": 2}
    cfg = FilterConfig(budget=3.0, epochs=40, classifier_kind="linear", eval_epochs=20, eval_min_steps=800)
    raw = evaluate_codes(ztr, zte, ytr, yte, nc, cfg)
    res = run_budget(ztr, zte, ytr, yte, nc, estimate_precision(ztr), cfg)
    assert raw["private_accuracy"] > 0.9 and raw["utility_accuracy"] > 0.9
    assert res["filter"]["private_accuracy"] < 0.8           # fresh adversary: 0.94 -> ~0.68
    assert res["filter"]["utility_accuracy"] > 0.9           # utility kept
    assert res["filter"]["mutual_information"] < raw["mutual_information"]
    # the Gaussian mechanism at the same budget loses utility instead
    assert res["gaussian"]["utility_accuracy"] < res["filter"]["utility_accuracy"] - 0.1
    np.testing.assert_allclose(res["gaussian"]["divergence_test"], 3.0, rtol=0.1)


def test_budget_penalty_binds_only_outside_budget():
    z, y = _latents(1024, 0)
    loose, tight = _game(z, budget=100.0, filter_lr=1e-2), _game(z, budget=0.0, rho=50.0, filter_lr=1e-2)
    log_loose = loose.fit_epochs(z, y["private"], y["utility"], epochs=30)[-1]
    log_tight = tight.fit_epochs(z, y["private"], y["utility"], epochs=30)[-1]
    assert log_loose["penalty"] == 0.0                       # D < b: no penalty at all
    assert log_tight["penalty"] > 0.0
    assert log_tight["divergence"] < 0.2 * log_loose["divergence"]
    # the tracked penalty is ρ·(D − 0)² of the tracked batch divergences, so it is at most ρ·max D²
    assert log_tight["penalty"] <= 50.0 * (2 * log_tight["divergence"]) ** 2


def test_train_step_matches_keras_fit_contract():
    z, y = _latents(512, 0)
    g = _game(z, budget=1.0)
    ds = tf.data.Dataset.from_tensor_slices((z, y["private"], y["utility"])).batch(128)
    hist = g.fit(ds, epochs=2, verbose=0)
    assert set(hist.history) == {"adversary_loss", "utility_loss", "filter_loss", "divergence", "penalty"}
    assert np.isfinite(hist.history["filter_loss"]).all()
    # adversary loss starts at log 2 (zero-initialised linear classifier) and is a mean over batches
    assert 0.0 < hist.history["adversary_loss"][0] <= np.log(2) + 1e-3


def test_rho_follows_schedule_across_fit_epochs_calls():
    z, y = _latents(256, 0)
    g = FilterGame(LinearFilter(3, 2), build_classifier(3, 2, "linear"), build_classifier(3, 2, "linear"),
                   estimate_precision(z), 2, budget=1.0, rho_init=16.0, rho_halve_every=2)
    g.compile(*(keras.optimizers.Adam(1e-3) for _ in range(3)))
    logs = g.fit_epochs(z, y["private"], y["utility"], epochs=7, log_every=1)
    assert [entry["rho"] for entry in logs] == [16.0, 16.0, 8.0, 8.0, 4.0, 4.0, 2.0]


def test_moving_average_of_filter_weights_is_what_gets_released():
    z, y = _latents(128, 0)
    g = FilterGame(LinearFilter(3, 2), build_classifier(3, 2, "linear"), build_classifier(3, 2, "linear"),
                   estimate_precision(z), 2, budget=1.0, ema_decay=0.5)
    g.compile(*(keras.optimizers.Adam(1e-2) for _ in range(3)))
    w0 = [v.numpy() for v in g.filter_layer.trainable_variables]
    g._step(tf.constant(z), tf.constant(y["private"]), tf.constant(y["utility"]))
    w1 = [v.numpy() for v in g.filter_layer.trainable_variables]
    assert not np.allclose(w0[0], w1[0])
    g.use_averaged_filter()
    for a, b, now in zip(w0, w1, g.filter_layer.trainable_variables):
        np.testing.assert_allclose(now.numpy(), 0.5 * a + 0.5 * b, rtol=1e-6)


def test_label_epsilon_target_holds_after_training_and_is_the_reported_epsilon():
    ztr, ytr = _latents(1024, 0)
    zte, yte = _latents(256, 1)
    nc = {"private": 2, "utility": 2}
    base = FilterConfig(budget=3.0, epochs=15, learning_rate=1e-2, classifier_kind="linear", eval_epochs=1,
                        eval_min_steps=50)
    free = filter_privacy(train_filter(ztr, ytr["private"], ytr["utility"], 2, 2, estimate_precision(ztr), base),
                          1e-5)
    res = run_budget(ztr, zte, ytr, yte, nc, estimate_precision(ztr),
                     dataclasses.replace(base, label_epsilon=3.0), gaussian=False)
    game, got = res["_game"], res["filter"]
    assert free["filter_epsilon"] > 10.0                     # unconstrained: the game ignores the label RDP
    assert 2.9 < got["filter_epsilon"] <= 3.0                # constrained: the cap binds and holds
    assert got["filter_label_epsilon_target"] == 3.0
    # the reported ε is the accountant's on the released (averaged, projected) weights
    curve = rdp.linear_filter_rdp(game.filter_layer.noise_matrix, game.filter_layer.label_matrix)
    assert got["filter_rdp"] == curve and got["filter_epsilon"] == rdp.rdp_to_epsilon(curve, 1e-5)[0]
    # a filter that no longer meets its target is refused, not reported
    game.filter_layer.w_label.assign(10.0 * game.filter_layer.w_label)
    with pytest.raises(LabelPrivacyError, match="^label_epsilon: the trained filter's label-change epsilon"):
        filter_privacy(game, 1e-5)


def test_released_moving_average_is_projected_into_the_label_epsilon_target():
    z, _ = _latents(64, 0)
    g = FilterGame(LinearFilter(3, 2), build_classifier(3, 2, "linear"), build_classifier(3, 2, "linear"),
                   estimate_precision(z), 2, ema_decay=0.5, label_epsilon=3.0)
    g.compile(*(keras.optimizers.Adam(1e-3) for _ in range(3)))
    g.ema_weights[1].assign(100.0 * tf.ones_like(g.ema_weights[1]) * [[1.0], [-1.0]])  # a huge label shift
    g.use_averaged_filter()
    eps = filter_privacy(g, 1e-5)["filter_epsilon"]
    assert 2.9 < eps <= 3.0


def test_label_epsilon_needs_the_linear_filter():
    z, _ = _latents(64, 0)
    with pytest.raises(UsageError, match="^label_epsilon: needs the linear filter"):
        FilterGame(MLPFilter(3, 2), build_classifier(3, 2, "linear"), build_classifier(3, 2, "linear"),
                   estimate_precision(z), 2, label_epsilon=3.0)


def test_privatize_draws_secret_noise_unless_given_a_seeded_generator():
    """The label-change guarantee assumes the filter noise is secret: without a generator it comes from OS
    entropy, so the global seeds (which --seed or a default would fix) do not reproduce it."""
    z, y = _latents(200, 0)
    game = _game(z, budget=1.0)
    releases = []
    for _ in range(2):
        keras.utils.set_random_seed(7)
        releases.append(game.privatize(z, y["private"]))
    assert np.abs(releases[0] - releases[1]).min() > 0
    seeded = [game.privatize(z, y["private"], np.random.default_rng(5)) for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])


def test_released_codes_differ_between_runs_without_a_release_seed_and_repeat_with_one():
    ztr, ytr = _latents(300, 0)
    zte, yte = _latents(100, 1)
    nc = {"private": 2, "utility": 2}
    precision = estimate_precision(ztr)
    cfg = FilterConfig(epochs=1, classifier_kind="linear", eval_epochs=1, eval_min_steps=1)
    game = train_filter(ztr, ytr["private"], ytr["utility"], 2, 2, precision, cfg)

    def released(release_seed):  # the release scored for the private label only (one fresh classifier, not two)
        c = dataclasses.replace(cfg, release_seed=release_seed)
        private = ({"private": ytr["private"]}, {"private": yte["private"]})
        return release_and_evaluate(game, ztr, zte, *private, nc, precision, c, gaussian=False)["_release_test"]

    assert np.abs(released(None) - released(None)).min() > 0
    np.testing.assert_array_equal(released(3), released(3))
