"""The fixed sampling scheme's sensitivity 2Δ (docs/privacy.md, "Sampling schemes"), audited on
make_private's linear classifier: a record inserted into positionally batched rows moves a batch's
clipped sum by more than Δ (so the factor 2 is needed) and never by more than 2Δ."""
import pytest

from tfpriv.audit.fixed_batches import audit_fixed_batches
from tfpriv.audit.sweep import Case, case_setup
from tfpriv.errors import ConfigError


def test_an_insertion_moves_a_batch_by_more_than_delta_and_at_most_twice_delta():
    model, config, x, _ = case_setup(Case("make_private", "micro"), batch_size=12)
    report = audit_fixed_batches(model, config.replace(l2_norm_clip=0.1), x, batch_size=4, positions=(0, 5))
    assert report["passes"] and report["max_sensitivity_ratio"] <= 1 + 1e-4
    assert report["max_change_over_add_remove"] > 1.2, report["worst"]   # Δ alone would not hold


def test_a_batch_wise_term_is_refused():
    model, config, x = case_setup(Case("vae", "termwise", 2, "normal", "mmd"))[:3]
    with pytest.raises(ConfigError, match="^config: the fixed-batch audit covers sample-wise losses"):
        audit_fixed_batches(model, config, x, batch_size=4)


def test_the_sweep_runs_the_fixed_batches_case():
    from tfpriv.audit.sweep import run_case
    result = run_case(Case("make_private", "micro", fixed_batches=True), batch_size=8, clips={"l2_norm_clip": 0.1})
    assert result["case"] == "make_private/micro/fixed_batches" and result["passed"]
    assert 0.5 < result["max_sensitivity_ratio"] <= 1 + 1e-4
