"""End-to-end canary audits: the private lower bound stays below the reported epsilon, the
non-private one exceeds it; run_audit writes audit.json."""
import json
import math

import pytest

from tfpriv.audit.canary import classifier_canary_run
from tfpriv.audit.run import run_audit
from tfpriv.audit.sweep import build_vae, digits_batch
from tfpriv.privacy.config import DPConfig

SMALL = dict(m=400, n_real=400, epochs=5, batch_size=64, seed=0)


def test_one_run_gradient_canaries_private_vs_non_private():
    private = classifier_canary_run(private=True, target_epsilon=2.0, **SMALL)
    assert private["reported_epsilon"] == pytest.approx(2.0, rel=0.01)
    assert private["epsilon_lower_bound"] <= private["reported_epsilon"]
    non_private = classifier_canary_run(private=False, **SMALL)
    assert math.isinf(non_private["reported_epsilon"])
    # excluded canaries' rows never move without noise: (almost) every guess is right
    assert non_private["best"]["correct"] >= 0.98 * non_private["best"]["guesses"]
    assert non_private["epsilon_lower_bound"] > 3.0 > private["reported_epsilon"]


def test_run_audit_writes_audit_json(tmp_path):
    x, _ = digits_batch(5)
    vae = build_vae("sparse", "mmd", x.shape[1:], hidden=(4,))
    config = DPConfig(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, num_partitions=2)
    record = run_audit(str(tmp_path), vae, config, x, scales=(100.0,), ascent_steps=0)
    saved = json.loads((tmp_path / "audit.json").read_text())
    assert saved["max_sensitivity_ratio"] == record["max_sensitivity_ratio"] <= 1 + saved["tolerance"]
    assert saved["passed"] is True
    (case,) = saved["configurations"]
    assert case["declared_sensitivity"] == math.sqrt(5)
    assert case["aggregation"] == "termwise" and case["num_partitions"] == 2
