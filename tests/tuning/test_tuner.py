"""Tuning jobs: keras-tuner runs trials that are ordinary private runs; the job's epsilon is the
Papernot-Steinke bound for random search over a random number of trials (checked against the
paper's closed forms), composition otherwise."""
import json
import math
import os

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.stats import norm

from tests.privacy.reference import composed_epsilon, repeat_and_select_epsilon
import tfpriv
from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DEFAULT_ORDERS, RDP, training_event
from tfpriv.privacy.tuning import TrialCount
from tfpriv.training.results import write_results
from tfpriv.tuning.space import Objective
from tfpriv.tuning.tuner import TuningJob, job_epsilon_from_rdp, rdp_epsilon, worst_rdp

N = 128
Z = 1.2


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 6)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


def _trial(values, trial_dir):
    x, y = _data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Input([6]), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    dp_model = tfpriv.make_private(model, loss, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=Z),
                                   num_examples=N, batch_size=values["batch_size"], delta=1e-3)
    dp_model.compile(keras.optimizers.SGD(values["learning_rate"]), metrics=["accuracy"])
    dp_model.fit(x, y, epochs=1, verbose=0, seed=0)
    x_test, y_test = _data(seed=1)  # held-out data: what the objective reads
    accuracy = float(np.mean(np.argmax(model(x_test).numpy(), axis=1) == y_test))
    results = {"model": "linear", "dataset": "synthetic", "aggregation": "micro", "epsilon": dp_model.epsilon(),
               "delta": 1e-3, "noise_multiplier": Z, "effective_noise_multiplier": Z, "sampling_rate": values["batch_size"] / N,
               "steps": dp_model.ledger.total_steps, "epochs": 1, "metrics": {"accuracy": accuracy}}
    write_results(trial_dir, results)
    return results


def _event(values):
    b = values.get("batch_size", 16)
    return training_event([(b / N, Z, round(N / b))])


ACCURACY = Objective("accuracy", reads="test")  # the trials measure it on held-out data
SPACE = {"learning_rate": {"type": "float", "min": 1e-3, "max": 1e-1, "log": True},
         "batch_size": {"type": "choice", "values": [16, 32]}}


def test_random_search_runs_a_random_number_of_ordinary_runs_and_reports_the_jobs_epsilon(tmp_path):
    count = TrialCount("geometric", 3)
    job = TuningJob(_trial, _event, SPACE, objective=ACCURACY, trials=count, delta=1e-3, seed=2)
    job.run(str(tmp_path))
    record = json.loads((tmp_path / "private" / "tuning.json").read_text())
    assert record["trials_drawn"] == count.sample(np.random.default_rng(2)) == len(record["trials"]) >= 1
    for trial in record["trials"]:
        assert os.path.isfile(trial["results"])
    assert record["best"]["objective"] == max(t["objective"] for t in record["trials"])
    privacy = record["privacy"]
    # the worst configuration is batch 32 (q = 1/4, 4 steps) vs batch 16 (1/8, 8 steps): the bound uses the max
    worst = max(repeat_and_select_epsilon(_event({"batch_size": b}), count, 1e-3) for b in (16, 32))
    assert privacy["epsilon"] >= worst * (1 - 1e-9)
    assert privacy["epsilon_one_trial"] < privacy["epsilon"]


def test_single_configuration_matches_the_event_accountant(tmp_path):
    space = {"learning_rate": SPACE["learning_rate"], "batch_size": {"type": "choice", "values": [16]}}
    count = TrialCount("poisson", 4)
    job = TuningJob(_trial, _event, space, objective=ACCURACY, trials=count, delta=1e-3, seed=1)
    privacy = job.privacy(trials_run=4)
    assert privacy["epsilon"] == pytest.approx(repeat_and_select_epsilon(_event({}), count, 1e-3), rel=1e-9)
    assert privacy["epsilon_naive_composition"] == pytest.approx(composed_epsilon(_event({}), 4, 1e-3), rel=1e-6)


def test_adaptive_tuners_are_accounted_by_composition():
    job = TuningJob(_trial, _event, SPACE, objective=ACCURACY, tuner="bayesian", delta=1e-3)
    privacy = job.privacy(trials_run=3)
    assert privacy["epsilon"] == privacy["epsilon_naive_composition"] and "composition" in privacy["analysis"]


def test_bad_spaces_are_refused():
    with pytest.raises(ConfigError, match="space.batch_size"):
        TuningJob(_trial, _event, {"batch_size": {"type": "int", "min": 8, "max": 64}}, objective=ACCURACY)
    with pytest.raises(ConfigError, match="tuner"):
        TuningJob(_trial, _event, SPACE, objective=ACCURACY, tuner="grid")


def _scored(values, trial_dir):
    """A trial that trains nothing: its score is its learning rate (tests the tuner, not training)."""
    results = {"model": "none", "dataset": "none", "aggregation": "micro", "epsilon": 0.5, "delta": 1e-3,
               "noise_multiplier": Z, "effective_noise_multiplier": Z, "sampling_rate": 0.125, "steps": 0, "epochs": 0,
               "metrics": {"accuracy": values["learning_rate"]}}
    write_results(trial_dir, results)
    return results


def test_random_search_trials_are_independent_draws_repeats_included(tmp_path):
    """A space of one point: keras-tuner's own random search would stop after one trial (no new
    values); the theorem's K i.i.d. trials all run, the first one drawn like the others."""
    space = {"learning_rate": {"type": "choice", "values": [0.25]}}
    count = TrialCount("geometric", 3)
    job = TuningJob(_scored, _event, space, objective=ACCURACY, trials=count, delta=1e-3, seed=1,
                    neutral=("learning_rate",))
    job.run(str(tmp_path))
    record = json.loads((tmp_path / "private" / "tuning.json").read_text())
    assert record["trials_drawn"] == 3 == len(record["trials"])
    assert [t["values"]["learning_rate"] for t in record["trials"]] == [0.25] * 3
    ranged = TuningJob(_scored, _event, {"learning_rate": {"type": "float", "min": 0.5, "max": 0.75}},
                       objective=ACCURACY, trials=count, delta=1e-3, seed=1)
    ranged.run(str(tmp_path / "ranged"))
    trials = json.loads((tmp_path / "ranged" / "private" / "tuning.json").read_text())["trials"]
    first = trials[0]["values"]["learning_rate"]
    assert first != 0.5  # drawn, not the range's default (its minimum)


def test_a_rerun_reuses_the_stored_trial_count(tmp_path):
    space = {"learning_rate": SPACE["learning_rate"]}
    job = TuningJob(_scored, _event, space, objective=ACCURACY, trials=TrialCount("geometric", 3), delta=1e-3,
                    seed=1, tuner="random")
    assert job.draw_trials(str(tmp_path)) == 3
    again = TuningJob(_scored, _event, space, objective=ACCURACY, trials=TrialCount("geometric", 3), delta=1e-3,
                      seed=0)  # this seed alone would draw K = 1; the folder's K stands
    assert again.draw_trials(str(tmp_path)) == 3
    other = TuningJob(_scored, _event, space, objective=ACCURACY, trials=TrialCount("poisson", 3), delta=1e-3)
    with pytest.raises(ConfigError, match="trial_count"):
        other.draw_trials(str(tmp_path))


def test_an_objective_that_reads_private_data_cannot_choose_among_private_trials(tmp_path):
    """Undeclared objectives read private data: refused before anything is written when the trials
    are private, allowed when they are not (the job then has no epsilon to keep)."""
    space = {"learning_rate": SPACE["learning_rate"]}
    for objective in ("accuracy", Objective("accuracy", reads="private")):
        job = TuningJob(_scored, _event, space, objective=objective, trials=TrialCount("geometric", 2), delta=1e-3)
        with pytest.raises(ConfigError, match="^objective: accuracy reads private data"):
            job.run(str(tmp_path / "private"))
        assert not (tmp_path / "private").exists()
    public = TuningJob(_scored, lambda values: dp_accounting.NonPrivateDpEvent(), space, objective="accuracy",
                       trials=TrialCount("geometric", 2), delta=1e-3, seed=1)
    assert public.run(str(tmp_path / "public"))["privacy"]["epsilon"] == float("inf")
    with pytest.raises(ConfigError, match="reads must be one of test, public, private"):
        Objective("accuracy", reads="validation")


def test_random_search_releases_the_best_trial_alone(tmp_path):
    """Papernot & Steinke bound the release of the best trial, not of K or the other trials: the
    released tuning.json and best/ hold the best trial's values, score and run; the number of
    trials, every trial and its score stay in private/."""
    space = {"learning_rate": {"type": "float", "min": 0.1, "max": 0.9}}
    job = TuningJob(_scored, _event, space, objective=ACCURACY, trials=TrialCount("geometric", 3), delta=1e-3, seed=1)
    released = job.run(str(tmp_path))
    private = json.loads((tmp_path / "private" / "tuning.json").read_text())
    assert private["trials_drawn"] == 3 == len(private["trials"]) == private["privacy"]["trials_run"]
    best = private["best"]
    assert best["objective"] == max(t["objective"] for t in private["trials"])
    assert json.loads((tmp_path / "tuning.json").read_text()) == released
    assert released["best"] == {"values": best["values"], "objective": best["objective"], "run": "best"}
    assert "trials" not in released and "trials_drawn" not in released
    assert not {"trials_run", "epsilon_naive_composition"} & set(released["privacy"])
    assert released["privacy"]["epsilon"] == private["privacy"]["epsilon"]
    assert "private/" in released["private"] and "not covered by epsilon" in released["private"]
    assert sorted(os.listdir(tmp_path)) == ["best", "private", "tuning.json"]
    assert os.listdir(tmp_path / "best") == ["results.json"]  # the run, without its trial id
    assert (tmp_path / "best" / "results.json").read_text() == open(best["results"]).read()


def test_the_released_runs_privacy_statement_carries_the_jobs_budget(tmp_path):
    from tfpriv.files import write_json
    from tfpriv.privacy.statement import privacy_statement

    statement = privacy_statement([(0.125, Z, 8)], tfpriv.DPConfig(aggregation="micro", noise_multiplier=Z), 1e-3)

    def with_statement(values, trial_dir):
        os.makedirs(os.path.join(trial_dir, "saved_model", "assets"))
        write_json(os.path.join(trial_dir, "saved_model", "assets", "privacy_statement.json"), statement)
        results = {**_scored(values, trial_dir), "privacy_statement": statement}
        write_results(trial_dir, results)
        return results

    space = {"learning_rate": {"type": "float", "min": 0.1, "max": 0.9}}
    job = TuningJob(with_statement, _event, space, objective=ACCURACY, trials=TrialCount("geometric", 3), delta=1e-3,
                    seed=1)
    released = job.run(str(tmp_path))
    job = released["privacy"]
    expected = {**statement, "tuning": {"job_epsilon": job["epsilon"], "delta": job["delta"], "accountant": "rdp",
                                        "count_distribution": job["trial_count"], "count_cap": job.get("max_trials"),
                                        "bound": "Papernot & Steinke 2022: a random number of runs, the best one "
                                                 "released"}}  # the job's budget, no trial count
    assert json.loads((tmp_path / "best" / "results.json").read_text())["privacy_statement"] == expected
    assert json.loads((tmp_path / "best" / "saved_model" / "assets" / "privacy_statement.json").read_text()) == expected
    assert "trials_run" not in expected["tuning"] and expected["tuning"]["job_epsilon"] > statement["epsilon"]["rdp"]


def test_an_order_without_a_bound_is_left_out_not_fatal():
    """dp_accounting >= 0.6 gives inf at the orders where its series does not converge (excluding
    them); the other orders still bound one trial and the job."""
    orders = np.array(DEFAULT_ORDERS, float)
    curve = 0.02 * orders
    partial = np.where(orders == orders[0], np.inf, curve)
    count = TrialCount("poisson", 3)
    assert rdp_epsilon(partial, 1e-5) == pytest.approx(rdp_epsilon(curve[1:], 1e-5, orders[1:]))
    assert job_epsilon_from_rdp(partial, count, 1e-5) == pytest.approx(
        job_epsilon_from_rdp(curve[1:], count, 1e-5, orders[1:]))
    assert math.isfinite(job_epsilon_from_rdp(partial, count, 1e-5))
    assert rdp_epsilon(np.full_like(orders, np.inf), 1e-5) == math.inf


# -- the job's epsilon from one trial's RDP curve against Papernot & Steinke's closed forms ----------
SIGMA, DELTA = 3.0, 1e-6
ORDERS = np.array(DEFAULT_ORDERS)


def gaussian_rdp(orders):
    return orders / (2 * SIGMA ** 2)        # Gaussian mechanism, sensitivity 1 (Mironov 2017)


def expected_trials(eta: float, gamma: float) -> float:
    """E[K] of the truncated negative binomial D_{eta,gamma} (paper, Section 3)."""
    if eta == 0:
        return (1 / gamma - 1) / math.log(1 / gamma)
    return eta * (1 - gamma) / (gamma * (1 - gamma ** eta))


@pytest.mark.parametrize("count", [TrialCount("geometric", 10), TrialCount("logarithmic", 10),
                                   TrialCount("negative_binomial", 10, shape=0.5),
                                   TrialCount("negative_binomial", 5, shape=2.0)], ids=lambda c: c.distribution + str(c.shape))
def test_theorem_2_closed_form(count):
    eta, gamma = count.dp_shape, count.gamma
    assert expected_trials(eta, gamma) == pytest.approx(count.mean, rel=1e-6)
    eps = gaussian_rdp(ORDERS)
    # Theorem 2, minimised over lambda_hat in the same orders; then RDP's monotonicity in lambda.
    const = (1 + eta) * np.min((1 - 1 / ORDERS) * eps + math.log(1 / gamma) / ORDERS)
    rdp = eps + const + math.log(count.mean) / (ORDERS - 1)
    rdp = np.array([rdp[ORDERS >= o].min() for o in ORDERS])
    expected, _ = compute_epsilon(ORDERS, rdp, DELTA)
    trial = worst_rdp([dp_accounting.GaussianDpEvent(SIGMA)])
    assert job_epsilon_from_rdp(trial, count, DELTA) == pytest.approx(expected, rel=1e-9)


def test_theorem_6_poisson_with_the_exact_gaussian_delta():
    """The bound holds for any (eps_hat, delta_hat) a trial satisfies; the exact Gaussian delta_hat
    gives a tighter valid bound than the accountant's RDP-derived delta_hat (never looser)."""
    mu = 10.0
    eps = gaussian_rdp(ORDERS)
    eps_hat = np.log1p(1 / (ORDERS - 1))
    a = 1 / (2 * SIGMA)
    delta_hat = norm.cdf(a - eps_hat * SIGMA) - np.exp(eps_hat) * norm.cdf(-a - eps_hat * SIGMA)
    exact, _ = compute_epsilon(ORDERS, eps + mu * delta_hat + math.log(mu) / (ORDERS - 1), DELTA)
    got = job_epsilon_from_rdp(worst_rdp([dp_accounting.GaussianDpEvent(SIGMA)]), TrialCount("poisson", mu), DELTA)
    assert exact <= got <= 1.3 * exact   # measured: 3.38 vs 2.76


def test_a_random_number_of_dp_sgd_trials_costs_less_than_composing_them():
    """The bound against the composition `TuningJob.privacy` records beside it (k times one trial's RDP)."""
    trial = worst_rdp([training_event([(0.01, 1.1, 1000)])])
    single = RDP.epsilon([(0.01, 1.1, 1000)], DELTA)
    for count in (TrialCount("poisson", 20), TrialCount("geometric", 20), TrialCount("logarithmic", 20)):
        job = job_epsilon_from_rdp(trial, count, DELTA)
        assert single < job < rdp_epsilon(20 * trial, DELTA)
    assert rdp_epsilon(1 * trial, DELTA) == pytest.approx(single)
