"""experiments/modern_stack/rdp_orders.py: the exact A_α it integrates, and the README's account of the
ε difference between dp-accounting 0.4.3 and 0.6.0 (issue #47: the orders are the same; 0.6.0 bounds
fractional orders more loosely)."""
import json
import re

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from experiments.modern_stack import rdp_orders
from tests.conftest import REPO_ROOT

STUDY = REPO_ROOT / "experiments" / "modern_stack"
Q, Z, STEPS = 512 / 60000, 0.656, 4017  # flags/dpwgan_gp_mnist_eps10.cfg's run on TF 2.15 (dp-accounting 0.4.3)
ORDERS = (2.5, 2.6, 2.7, 2.8, 2.9, 3.0, 3.1)  # around the optimal order 2.8


@pytest.mark.parametrize("alpha", [3, 10])
def test_the_integration_is_the_closed_form_at_integer_orders(alpha):
    closed = rdp_lib._compute_log_a_int(Q, Z, alpha)
    assert rdp_orders.log_a_exact(Q, Z, alpha) == pytest.approx(closed, rel=1e-6)


def test_the_exact_fractional_orders_give_the_legacy_stacks_epsilon_and_0_6_0_a_larger_one():
    legacy = json.loads((REPO_ROOT / "experiments" / "dpwgan" / "main_c32_b512_z0656_ema_results.json").read_text())
    assert (legacy["steps"], legacy["noise_multiplier"]) == (STEPS, Z)
    exact = rdp_orders.epsilon(ORDERS, rdp_orders.rdp_curve(Q, Z, ORDERS, exact=True), STEPS)
    loose = rdp_orders.epsilon(ORDERS, rdp_orders.rdp_curve(Q, Z, ORDERS, exact=False), STEPS)
    assert exact == pytest.approx(legacy["epsilon"], rel=1e-6)
    assert loose > 10.01 > legacy["epsilon"]
    assert rdp_orders.steps_within(ORDERS, rdp_orders.rdp_curve(Q, Z, ORDERS, exact=False), 10.0) == 4001


def test_the_readme_gives_the_scripts_output_and_not_the_old_explanation():
    readme = (STUDY / "README.md").read_text()
    output = (STUDY / "rdp_orders.txt").read_text()
    for eps, order in re.findall(r"eps (\d+\.\d{6}) \(order ([\d.]+)\)", output):
        assert f"{eps} (order {order})" in readme
    assert "4th digit" not in readme and "RDP orders give" not in readme
    assert np.isclose(float(re.search(r"exact, DEFAULT_ORDERS\s+eps (\S+)", output).group(1)), 9.999917)
