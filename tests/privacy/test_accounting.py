"""The accountant against dp_accounting built independently here, and its ledger."""
import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.privacy import accounting as acc


def independent_epsilon(q, noise, steps, delta):
    accountant = dp_accounting.rdp.RdpAccountant(
        [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512],
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise))
    for _ in range(3):  # compose in pieces: steps split 3 ways
        accountant.compose(event, steps // 3)
    accountant.compose(event, steps - 3 * (steps // 3))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("q,noise,steps,delta", [
    (256 / 60000, 1.1, 14060, 1e-5),
    (0.05, 0.9, 500, 1e-4),
    (0.01, 2.0, 1000, 1e-6),
])
def test_epsilon_matches_dp_accounting(q, noise, steps, delta):
    assert acc.RDP.epsilon([(q, noise, steps)], delta) == pytest.approx(independent_epsilon(q, noise, steps, delta),
                                                                   rel=1e-9)


def test_rdp_epsilon_is_dp_accountings_composition_of_the_training_event_to_the_last_bit():
    """The one-step curves are cached (fit computes epsilon every epoch): the sum over segments is the
    float dp_accounting's own composition of the same event gives, mixed rates, q = 1, repeats."""
    segments = [(0.01, 1.1, 700), (1.0, 0.55, 3), (0.01, 1.1, 300), (0.2, 4.0, 1), (0.01, 0.8, 0), (0.05, 1.3, 41)]
    for delta in (1e-5, 1e-7):
        reference = acc.RDP.fresh().compose(acc.training_event(segments)).get_epsilon(delta)
        assert acc.RDP.epsilon(segments, delta) == reference
        assert acc.RDP.epsilon(segments, delta) == reference  # from the cache


# Settings spanning the regimes of the minimum over orders: a first epoch at a large rate, many steps
# at a small one (integer optimum), epsilon in the tens (optimum below 2), no subsampling, the KL case
# (epsilon 0), orders that overflow to inf, and mixed histories.
EVERY_ORDER_CASES = [
    [(0.125, 1.0, 8)], [(0.5, 1.0, 2)], [(0.004, 4.46, 4012)], [(256 / 60000, 1.1, 14060)], [(0.1, 0.7, 1000)],
    [(0.05, 0.8, 500)], [(1.0, 3.0, 1)], [(1.0, 0.6, 500)], [(1e-5, 300.0, 1)], [(0.5, 4.46, 100000)],
    [(0.01, 1.1, 700), (1.0, 0.55, 3), (0.2, 4.0, 1), (0.05, 1.3, 41)], [(0.2, 0.6, 7), (0.001, 3.0, 500)],
]


@pytest.mark.parametrize("segments", EVERY_ORDER_CASES, ids=range(len(EVERY_ORDER_CASES)))
def test_rdp_epsilon_equals_dp_accountings_minimum_over_every_order(segments):
    """Orders that cannot hold the minimum are not computed (below); the epsilon is still the float
    dp_accounting gives from the curve composed at every order of `DEFAULT_ORDERS`."""
    accountant = dp_accounting.rdp.RdpAccountant(list(acc.DEFAULT_ORDERS))
    for q, noise, steps in segments:
        accountant.compose(acc._event(q, noise, steps))
    for delta in (1e-3, 1e-5, 1e-9):
        assert acc.RDP.epsilon(segments, delta) == accountant.get_epsilon(delta), delta
    if segments == [(1e-5, 300.0, 1)]:
        assert acc.RDP.epsilon(segments, 1e-5) == 0.0  # dp_accounting's KL case


def test_rdp_epsilon_computes_only_the_orders_that_can_hold_the_minimum(monkeypatch):
    """A first epoch at q = 0.125 (epsilon 3.8 at order 4.4): the series of at most 40 of the 155 orders,
    none of the slow fractional ones below 2 (6 ms each; dp_accounting >= 0.6 gives up on some: inf),
    the optimal order among them. Before, every order: 0.1 s at each new noise multiplier."""
    from dp_accounting.rdp import rdp_privacy_accountant
    computed = []
    series = rdp_privacy_accountant._compute_log_a

    def counted(q, noise, order):
        computed.append(order)
        return series(q, noise, order)
    monkeypatch.setattr(rdp_privacy_accountant, "_compute_log_a", counted)
    segments = [(0.125, 1.0123, 8)]  # a noise no other test uses: nothing remembered
    epsilon = acc.RDP.epsilon(segments, 1e-5)
    assert 0 < len(computed) <= 40 and not [a for a in computed if 1 < a < 2]
    monkeypatch.setattr(rdp_privacy_accountant, "_compute_log_a", series)
    optimal = acc.RDP.fresh().compose(acc._event(*segments[0])).get_epsilon_and_optimal_order(1e-5)
    assert epsilon == optimal[0] and optimal[1] in computed and not float(optimal[1]).is_integer()


def test_an_order_whose_series_cancels_to_zero_does_not_make_epsilon_zero():
    """q = 1e-5, z = 50, 1,000 steps, delta = 1e-9: dp_accounting 0.4.3 (the legacy leg) computes
    RDP 0.0 at order 1.1 (cancellation) and so epsilon 0; the composition's KL divergence is at least
    1.3e-11 (Pinsker), far above the KL case's 1e-18, so that order is not computed, and epsilon is
    what dp_accounting 0.6 gives on every order."""
    assert acc.RDP.epsilon([(1e-5, 50.0, 1000)], 1e-9) == pytest.approx(0.0263912400088, rel=1e-9)


def test_full_batch_gaussian_matches_closed_form_rdp():
    """q=1, one step: RDP(a) = a / (2 s^2); dp_accounting's conversion (Balle et al. 2020)."""
    s, delta = 3.0, 1e-5
    orders = np.array(acc.DEFAULT_ORDERS)
    rdp = orders / (2 * s * s)
    eps = rdp + np.log1p(-1 / orders) - (np.log(delta) + np.log(orders)) / (orders - 1)
    assert acc.RDP.epsilon([(1.0, s, 1)], delta) == pytest.approx(max(0.0, eps.min()), rel=1e-6)


def test_segments_compose():
    one = acc.RDP.epsilon([(0.01, 1.0, 300)], 1e-5)
    split = acc.RDP.epsilon([(0.01, 1.0, 100), (0.01, 1.0, 200)], 1e-5)
    assert split == pytest.approx(one, rel=1e-9)
    assert acc.RDP.epsilon([(0.01, 0.0, 10)], 1e-5) == math.inf
    assert acc.RDP.epsilon([], 1e-5) == 0.0


def test_calibration_reaches_the_target_from_below():
    noise = acc.RDP.calibrate(3.0, 1e-5, 0.01, 2000)
    assert acc.RDP.epsilon([(0.01, noise, 2000)], 1e-5) <= 3.0
    assert acc.RDP.epsilon([(0.01, noise * 0.99, 2000)], 1e-5) > 3.0


def test_calibration_refuses_unreachable_targets():
    with pytest.raises(ConfigError, match="^target_epsilon: "):
        acc.RDP.calibrate(1e-9, 1e-5, 0.5, 10**6)


def test_max_steps_within_is_tight():
    n = acc.RDP.max_steps_within(2.0, 1e-5, 0.02, 1.2)
    assert acc.RDP.epsilon([(0.02, 1.2, n)], 1e-5) <= 2.0 < acc.RDP.epsilon([(0.02, 1.2, n + 1)], 1e-5)


def test_ledger_continues_after_checkpoint_restore(tmp_path):
    ledger = acc.PrivacyLedger()
    ledger.begin(0.01, 1.0)
    ledger.steps.assign(120)
    path = tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "ckpt"))
    restored = acc.PrivacyLedger()
    tf.train.Checkpoint(ledger=restored).restore(path)
    restored.begin(0.01, 1.0)          # same mechanism: continue the segment
    restored.steps.assign_add(80)
    assert restored.segments() == [(0.01, 1.0, 200)]
    restored.begin(0.02, 1.5)          # a new mechanism folds the old segment into history
    restored.steps.assign_add(10)
    assert restored.segments() == [(0.01, 1.0, 200), (0.02, 1.5, 10)]
    assert restored.epsilon(1e-5) == pytest.approx(acc.RDP.epsilon([(0.01, 1.0, 200), (0.02, 1.5, 10)], 1e-5))


def test_schemes_are_accounted_as_what_ran_and_survive_a_restore_across_schemes(tmp_path):
    """Issue 48: each segment is accounted by its sampling scheme; a run resumed under another scheme
    composes both; a checkpoint written before schemes existed reads as Poisson."""
    ledger = acc.PrivacyLedger()
    ledger.begin(0.01, 1.0)
    ledger.steps.assign(100)
    path = tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "ckpt"))
    restored = acc.PrivacyLedger()
    tf.train.Checkpoint(ledger=restored).restore(path)
    restored.begin(0.01, 1.0, acc.FIXED)                 # continued on fixed batches
    restored.steps.assign_add(5)
    restored.begin(0.01, 1.0, acc.SHUFFLE, steps_per_epoch=10, first_step=105)   # then 12 shuffled steps
    restored.steps.assign_add(12)                        # steps 105..116: epochs 10 and 11
    assert restored.segments() == [(0.01, 1.0, 100), (1.0, 0.5, 5), (1.0, 0.5, 2)]
    assert [r["scheme"] for r in restored.raw_segments()] == ["poisson", "fixed", "shuffle"]
    assert restored.total_steps == 117
    assert restored.epsilon(1e-5) == pytest.approx(independent_fixed_and_poisson(), rel=1e-9)
    old = acc._Record()
    old.deserialize('{"history": [[0.02, 1.5, 10]], "current": [0.01, 1.0]}')
    assert old.history == [[0.02, 1.5, 10, "poisson", 0, 0]] and old.current == [0.01, 1.0, "poisson", 0, 0]


def independent_fixed_and_poisson():
    accountant = dp_accounting.rdp.RdpAccountant(list(acc.DEFAULT_ORDERS))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100)
    accountant.compose(dp_accounting.GaussianDpEvent(0.5), 7)
    return accountant.get_epsilon(1e-5)


@pytest.mark.parametrize("first,steps,expected", [(0, 10, 1), (0, 11, 2), (5, 10, 2), (9, 1, 1), (10, 20, 2),
                                                  (3, 0, 0)])
def test_epochs_touched(first, steps, expected):
    assert acc.epochs_touched(first, steps, 10) == expected


def test_steps_within_a_budget_under_each_scheme():
    for scheme, z, kwargs in ((acc.POISSON, 3.0, {}), (acc.FIXED, 20.0, {}),
                              (acc.SHUFFLE, 3.0, {"steps_per_epoch": 10, "first_step": 4})):
        ledger = acc.PrivacyLedger()
        ledger.begin(0.05, z, scheme, **kwargs)
        ledger.steps.assign(2)
        n = ledger.steps_within(4.0, 1e-5)
        assert acc.RDP.epsilon(ledger.segments(extra_steps=n), 1e-5) <= 4.0
        assert acc.RDP.epsilon(ledger.segments(extra_steps=n + 1), 1e-5) > 4.0, scheme
    with pytest.raises(ConfigError, match="^sampling: must be one of"):
        acc.PrivacyLedger().begin(0.05, 3.0, "sorted")


# -- the PLD accountant (`get_accountant("pld")`) ---------------------------------------------------
def acc_event(q, z, steps):
    return dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
                                             steps)


def _independent_pld(q, z, steps, delta):
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                          value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    return acc.get_epsilon(delta)


def test_pld_epsilon_equals_dp_accounting_and_is_tighter_than_rdp():
    """At the documented discretisation (1e-3, pessimistic): within 0.1 % of dp_accounting's default 1e-4,
    never below it (both are upper bounds; the coarser one is 5-10x faster)."""
    from tfpriv.privacy.accounting import get_accountant
    segments = [(0.01, 1.1, 300), (0.01, 2.0, 200)]
    pld = get_accountant("pld").epsilon(segments, 1e-5)
    finer = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                            value_discretization_interval=1e-4)
    finer.compose(dp_accounting.ComposedDpEvent([acc_event(q, z, n) for q, z, n in segments]))
    assert finer.get_epsilon(1e-5) <= pld <= 1.001 * finer.get_epsilon(1e-5)
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                          value_discretization_interval=1e-3)
    for q, z, n in segments:
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), n)
    assert pld == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert pld < get_accountant("rdp").epsilon(segments, 1e-5)


def test_pld_calibration_and_budget_stop():
    from tfpriv.privacy.accounting import get_accountant
    z = get_accountant("pld").calibrate(0.5, 1e-5, 0.05, 40)
    assert 0.99 * 0.5 <= _independent_pld(0.05, z, 40, 1e-5) <= 0.5
    assert z < get_accountant("rdp").calibrate(0.5, 1e-5, 0.05, 40)   # less noise for the same epsilon
    n = get_accountant("pld").max_steps_within(0.5, 1e-5, 0.05, 3.0)
    assert _independent_pld(0.05, 3.0, n, 1e-5) <= 0.5 < _independent_pld(0.05, 3.0, n + 1, 1e-5)


def test_unknown_accountant_is_refused():
    from tfpriv.privacy.accounting import get_accountant
    with pytest.raises(ConfigError, match="^accountant: must be one of rdp, pld, got 'moments'$"):
        get_accountant("moments")


def test_a_noise_multiplier_too_small_for_pld_is_refused_naming_the_accountant():
    """Issue 31 (robustness): PLD cannot discretise a noise multiplier of 1e-30; that is one ConfigError
    naming the accountant (exit 2 on the command line), not a crash. RDP still gives its (huge) epsilon."""
    with pytest.raises(ConfigError, match="^accountant: pld cannot account noise multiplier 1e-30"):
        acc.get_accountant("pld").epsilon([(0.05, 1e-30, 10)], 1e-5)
    assert acc.RDP.epsilon([(0.05, 1e-30, 10)], 1e-5) > 1e30


def test_accounting_leaves_out_dp_accountings_non_converging_order_warnings(caplog):
    """At q = 0.25, z = 1 dp_accounting >= 0.6 warns once per non-converging fractional order (0.4.3,
    the legacy leg's, does not); tfpriv's epsilon and calibration (every epoch) do not print those
    lines, and the user's own calls still do."""
    import logging
    from importlib.metadata import version
    event = dp_accounting.PoissonSampledDpEvent(0.25, dp_accounting.GaussianDpEvent(1.0))

    def warned() -> list:
        return [r for r in caplog.records if acc.NON_CONVERGING_ORDER in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="absl"):
        acc.RDP.epsilon([(0.25, 1.0, 10)], 1e-5)
        acc.RDP.calibrate(20.0, 1e-5, q=0.25, steps=10)
        assert not warned()
        dp_accounting.rdp.RdpAccountant(list(acc.DEFAULT_ORDERS)).compose(event).get_epsilon(1e-5)
    newer = tuple(int(p) for p in version("dp-accounting").split(".")[:2]) >= (0, 6)
    assert bool(warned()) == newer


def test_calibration_on_a_history_ends_within_tolerance_from_below_and_is_remembered(monkeypatch):
    """Calibration searches on the accountant's own epsilon (cached RDP curves, bracketed by the
    Gaussian without subsampling) and ends at the smallest noise within its tolerance (1e-4) that meets
    the target; the same question (a resumed run's history given as lists) is answered from memory.
    A history that leaves too little for unsampled steps (their bracket) still calibrates."""
    history, q, steps, target = ((0.1, 6.0, 10),), 0.1, 10, 0.4
    z = acc.RDP.calibrate(target, 1e-3, q, steps, history)
    assert acc.RDP.epsilon([*history, (q, z, steps)], 1e-3) <= target
    assert acc.RDP.epsilon([*history, (q, z - 2e-4, steps)], 1e-3) > target

    class WrongBracket(acc.RdpAccounting):  # a lower end that already meets the target: the search widens
        def _bracket(self, *args):
            return 3 * z, 4 * z
    assert WrongBracket().calibrate(target, 1e-3, q, steps, history) == pytest.approx(z, abs=2e-4)

    nearly_spent = ((0.1, acc.RDP.calibrate(2.0, 1e-3, 0.1, 10), 10),)  # a first epoch that spent its target
    with pytest.raises(ConfigError, match="even an effective noise multiplier of 1000"):
        acc.RDP.calibrate(2.0, 1e-3, 1.0, 20, nearly_spent)  # what is left is too little for unsampled steps
    z_left = acc.RDP.calibrate(2.0, 1e-3, 0.1, 20, nearly_spent)
    assert acc.RDP.epsilon([*nearly_spent, (0.1, z_left, 20)], 1e-3) <= 2.0

    def recomputed(*args):
        raise AssertionError("calibration recomputed a question it has answered")
    monkeypatch.setattr(acc.RdpAccounting, "_epsilon", recomputed)
    assert acc.RDP.calibrate(target, 1e-3, q, steps, [list(h) for h in history]) == z
    assert acc.RDP.epsilon([*history, (q, z, steps)], 1e-3) <= target  # epsilon too is remembered


def test_a_release_composes_with_the_steps_but_is_not_a_step_and_survives_a_restore(tmp_path):
    """#47.8: a one-shot Gaussian before training is one event at rate 1, in `segments()`, the
    statement's rows and the budget, but not in the step count; its record is checkpointed."""
    ledger = acc.PrivacyLedger()
    ledger.release("class_means", 20.0)
    ledger.begin(0.01, 1.0)
    ledger.steps.assign(100)
    assert ledger.segments() == [(1.0, 20.0, 1), (0.01, 1.0, 100)] and ledger.total_steps == 100
    reference = dp_accounting.rdp.RdpAccountant(list(acc.DEFAULT_ORDERS))
    reference.compose(dp_accounting.GaussianDpEvent(20.0))
    reference.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100)
    assert ledger.epsilon(1e-5) == pytest.approx(reference.get_epsilon(1e-5), rel=1e-9)
    assert ledger.epsilon(1e-5) > acc.RDP.epsilon([(0.01, 1.0, 100)], 1e-5)
    first = ledger.raw_segments()[0]
    assert first["scheme"] == acc.RELEASE and first["name"] == "class_means" and first["steps"] == 0
    # the budget left counts the release: fewer steps fit than without it
    assert ledger.steps_within(2.0, 1e-5) == acc.RDP.max_steps_within(2.0, 1e-5, 0.01, 1.0,
                                                                      history=[(1.0, 20.0, 1)]) - 100
    path = tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "ckpt"))
    restored = acc.PrivacyLedger()
    tf.train.Checkpoint(ledger=restored).restore(path)
    assert restored.released == {"class_means": 20.0} and restored.segments() == ledger.segments()
    with pytest.raises(ConfigError, match="^name: the ledger already holds a release 'class_means'"):
        restored.release("class_means", 20.0)
    with pytest.raises(ConfigError, match="^noise: a release's noise multiplier must be positive"):
        restored.release("other", 0.0)
    old = acc._Record()
    old.deserialize('{"history": [[0.02, 1.5, 10]], "current": null}')  # written before releases existed
    assert old.releases == []
