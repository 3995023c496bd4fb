"""The sensitivity audit: ratio <= 1 on a representative subset of the sweep, leaky controls flagged."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tfpriv.audit.coupling import CoupledRandomness
from tfpriv.audit.sensitivity import TOLERANCE, audit_sensitivity, passes
from tfpriv.audit.sweep import TEXT_MODELS, Case, build_vae, digits_batch, run_case, with_declared_sensitivity
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import BatchLayout

# A linear VAE (no hidden layer: half the ops of each evaluation of the sums) on a batch of 4 (each removal
# is two evaluations); the bound does not depend on the model's depth or the batch size.
FAST = dict(batch_size=4, vae_hidden=(), scales=(1000.0,), ascent_steps=3, ascent_starts=1)


# micro with a batch-wise term (sparse, mmd): test_leaky_micro_step_is_flagged_and_within_2b_max_minus_1
@pytest.mark.parametrize("case", [
    Case("vae", "micro", None, "normal", "kl_pq", at_cap=True),
    Case("vae", "batch", None, "normal", "mmd"),
    Case("vae", "termwise", 2, "normal", "kl_pq", prior_samples=8),  # a fixed number of prior draws per partition
], ids=lambda c: c.name)
def test_ratio_at_most_one(case):
    result = run_case(case, **FAST)
    assert result["max_sensitivity_ratio"] <= 1 + TOLERANCE, result["worst_neighbour"]
    assert result["passed"]
    # neighbours of every kind were evaluated and moved the sums
    assert {"remove", "scaled", "random", "optimised"} <= set(result["max_ratio_by_kind"])
    assert result["max_sensitivity_ratio"] > 0.05


def test_singleton_partitions_reach_the_bound_exactly():
    """Every group clipped: an added example moves each block by exactly its clip norm, sqrt(2) whitened."""
    result = run_case(Case("vae", "termwise", 0, "normal", "kl_pq"), clips={"l2_norm_clip": 1e-3, "batch_clip": 1e-3},
                      **FAST)
    assert result["declared_sensitivity"] == pytest.approx(math.sqrt(2))
    assert result["max_sensitivity_ratio"] == pytest.approx(1.0, abs=TOLERANCE)


def test_make_private_added_example_moves_the_sum_by_c():
    result = run_case(Case("make_private", "micro"), clips={"l2_norm_clip": 1e-3}, **FAST)
    assert result["declared_sensitivity"] == 1.0
    assert result["max_sensitivity_ratio"] == pytest.approx(1.0, abs=TOLERANCE)
    assert "flipped" in result["max_ratio_by_kind"]


@pytest.mark.parametrize("model", TEXT_MODELS)
def test_token_classifiers_added_example_moves_the_sum_by_c(model):
    """Embedding (repeated token ids), attention and LayerNorm, an LSTM and a GRU (their rules) on the fast path:
    every example clipped, an added one moves the sum by exactly C (an underestimated norm would move it by
    more, ratio > 1). A batch of 4: each neighbour is one more evaluation of the (per-example) sums."""
    result = run_case(Case(model, "micro"), clips={"l2_norm_clip": 1e-3}, **FAST)
    assert result["declared_sensitivity"] == 1.0
    assert result["max_sensitivity_ratio"] == pytest.approx(1.0, abs=TOLERANCE)
    assert {"remove", "copy", "flipped", "out_of_range"} <= set(result["max_ratio_by_kind"])


def test_float_labels_of_a_plain_loss_crafted_out_of_range_are_dropped_within_c():
    """Issue 46 items 1 and 5: scaled copies carry float labels far outside [0, 10) into a plain-function
    sparse loss; they used to abort the step, now they are dropped and the sum moves by at most C."""
    result = run_case(Case("float_label", "micro"), clips={"l2_norm_clip": 1e-3}, **FAST)
    assert result["max_sensitivity_ratio"] == pytest.approx(1.0, abs=TOLERANCE) and result["passed"]
    assert "scaled" in result["max_ratio_by_kind"]


def test_a_loss_mixing_integer_input_examples_is_refused_and_would_leak_unverified():
    """Issue 46 items 2 and 5: the engine's verification refuses Embedding -> batch-centring (training
    never starts); audited without it, one added example moves the clipped sum by more than C."""
    refused = run_case(Case("embedding_mixing", "micro", verify=True), clips={"l2_norm_clip": 1e-3}, **FAST)
    assert refused["passed"] and refused["refused"].startswith(
        "DP engine: a sample-wise loss term depends on other examples")
    leaky = run_case(Case("embedding_mixing", "micro"), clips={"l2_norm_clip": 1e-3}, **FAST)
    assert leaky["max_sensitivity_ratio"] > 1 + 1e-3 and not leaky["passed"]


@pytest.mark.parametrize("chunk", [None, 3])
def test_gan_critic_ratio_at_most_one(chunk):
    """Also with the per-example gradients clipped and summed 3 examples at a time (4 and 5 examples)."""
    result = run_case(Case("dpwgan_gp", "micro", per_example_chunk=chunk), batch_size=4, scales=(1000.0,),
                      ascent_steps=0)
    assert result["clipping"] == "per_example"
    assert result["max_sensitivity_ratio"] <= 1 + TOLERANCE


def test_leaky_micro_step_is_flagged_and_within_2b_max_minus_1():
    """micro with a batch-wise term but noise set for C (declared 1, not 2*B_max - 1) is flagged; the same
    clipped sums, correctly accounted (2*B_max - 1), have ratio <= 1 as in test_ratio_at_most_one. One audit:
    the declared value changes no sum, only what the largest change is divided by."""
    configs = []

    def leaky(config):
        configs.append(config)
        return with_declared_sensitivity(config, 1.0)

    result = run_case(Case("vae", "micro", None, "sparse", "mmd"), config_override=leaky, **FAST)
    assert result["declared_sensitivity"] == 1.0
    assert result["max_sensitivity_ratio"] > 1.5, "the leaky step is flagged"
    assert not result["passed"]
    declared = configs[0].sensitivity(result["batch_terms"])
    assert (result["max_batch_size"], declared) == (5, 9.0), "correctly accounted: 2 * 5 - 1"
    correct = dict(result, max_sensitivity_ratio=result["max_whitened_change"] / declared)
    assert passes(correct), result["worst_neighbour"]
    # neighbours of every kind were evaluated and moved the sums
    assert {"remove", "scaled", "random", "optimised"} <= set(result["max_ratio_by_kind"])
    assert correct["max_sensitivity_ratio"] > 0.05


def test_termwise_within_sqrt5_but_beyond_the_singleton_sensitivity():
    """b = 2 partitions of a batch of 4 (sizes 1 and 3): the change stays within sqrt(5) (ratio <= 1) but
    exceeds sqrt(2) (1.537, an N(0, 1) example joining the partition of 1): multi-example partitions move by
    more than C2, so accounting them as singletons (one C2) would under-noise."""
    result = run_case(Case("vae", "termwise", 2, "sparse", "mmd"), **FAST)
    assert result["declared_sensitivity"] == pytest.approx(math.sqrt(5))
    assert result["max_sensitivity_ratio"] <= 1 + TOLERANCE, result["worst_neighbour"]
    assert {"remove", "scaled", "random", "optimised"} <= set(result["max_ratio_by_kind"])
    assert result["max_whitened_change"] > math.sqrt(2)


def test_batch_wise_noise_left_off_a_reached_variable_is_flagged(monkeypatch):
    """Leaky control for the reach-restricted noise: an engine that gives the encoder (which the MMD reaches)
    only the sample-wise noise. The audit counts a psi sum released there as part of the sample-wise block.
    The same case with the honest engine passes: test_termwise_within_sqrt5_but_beyond_the_singleton_sensitivity."""
    from tfpriv.privacy.engine import DPGradientEngine
    case = Case("vae", "termwise", 2, "sparse", "mmd")
    monkeypatch.setattr(DPGradientEngine, "_fix_psi_reaches",
                        lambda self, reaches: setattr(self, "psi_reaches", tuple(False for _ in reaches)))
    leaky = run_case(case, **FAST)
    assert leaky["max_sensitivity_ratio"] > 1.5
    assert not leaky["passed"]


def test_coupling_keeps_untouched_partitions_prior_samples():
    """With the audit's coupling, adding an example to partition 0 leaves partition 1's MMD term unchanged;
    resetting one generator (the naive 'stream' reset) changes it."""
    x, _ = digits_batch(9)
    vae = build_vae("sparse", "mmd", x.shape[1:], hidden=(16,))
    vae.loss_terms(tf.constant(x), BatchLayout.single(9), training=False)
    ids = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0])  # partition 0 holds 4 (largest after the addition: 5), 1 holds 4

    def reg(coupling, n):
        values = []
        with coupling.installed():
            for rows in (n - 1, n):
                layout = BatchLayout(tf.constant(ids[:rows]), 2)
                coupling.begin(layout)
                values.append(vae.loss_terms(tf.constant(x[:rows]), layout).batch["reg"].numpy())
        return values

    before, after = reg(CoupledRandomness(vae, seed=3, mode="example"), 9)
    np.testing.assert_allclose(after[1], before[1], rtol=1e-6)
    assert abs(after[0] - before[0]) > 1e-3 * abs(before[0])
    before, after = reg(CoupledRandomness(vae, seed=3, mode="stream"), 9)
    assert abs(after[1] - before[1]) > 1e-3 * abs(before[1])


def test_audit_refuses_non_private_config():
    x, _ = digits_batch(4)
    vae = build_vae("normal", "none", x.shape[1:], hidden=(4,))
    with pytest.raises(Exception, match="no sensitivity"):
        audit_sensitivity(vae, DPConfig(aggregation="none"), x)
