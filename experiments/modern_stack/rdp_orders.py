"""What dp-accounting 0.6.0's bound on fractional RDP orders costs, at the project's ε ≈ 1 and ε ≈ 10 recipes.

dp-accounting 0.6.0 bounds log A_α at a fractional order α by a series over |binom(α, i)| (absolute
values: the signs of the binomial coefficients of a fractional α alternate, so the bound is loose;
0.4.3 summed the signed series). tfpriv's accountant uses TF Privacy's orders (`DEFAULT_ORDERS`, 99 of
them fractional). For each case (q, z, steps) this prints ε at δ = 1e-5 three ways:

  * `0.6.0, DEFAULT_ORDERS`: what tfpriv reports on the default stack;
  * `integer orders`: the same accountant restricted to the integer orders of DEFAULT_ORDERS (2..63,
    128, 256, 512), where A_α is a finite sum of positive terms (exact);
  * `exact, DEFAULT_ORDERS`: A_α at every order by numerical integration of
    E_{x~N(0,σ²)}[((1 − q) + q·exp((2x − 1)/(2σ²)))^α] (Mironov, Talwar, Zhang 2019, Sec. 3.3), the
    value the fractional orders would have with a tight computation;

and the critic steps each allows before ε reaches the case's target (RDP is linear in the steps).
The integration is checked against the closed form at the integer orders (largest relative
difference of log A_α printed). Output: rdp_orders.txt beside this file.

    python experiments/modern_stack/rdp_orders.py > experiments/modern_stack/rdp_orders.txt
"""
from __future__ import annotations

import math
import os
import sys
from importlib import metadata

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import special

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from tfpriv.privacy.accounting import DEFAULT_ORDERS  # noqa: E402

DELTA = 1e-5
# (name, q, z, steps, target ε): the records' recipes (experiments/modern_stack, experiments/frontier).
CASES = (
    ("DP-WGAN-GP MNIST eps 10, TF 2.15 run's steps", 512 / 60000, 0.656, 4017, 10.0),
    ("DP-WGAN-GP MNIST eps 10, TF 2.21 run's steps", 512 / 60000, 0.656, 4001, 10.0),
    ("DP-WGAN-GP MNIST eps 1, 4,012 steps (frontier)", 1024 / 60000, 4.460330567108603, 4012, 1.0),
    ("DP-WGAN-GP MNIST eps 1, 2,006 steps (frontier)", 1024 / 60000, 3.2146484312044312, 2006, 1.0),
)
INTEGER_ORDERS = tuple(o for o in DEFAULT_ORDERS if float(o).is_integer())


def log_a_exact(q: float, sigma: float, alpha: float, points: int = 400_001) -> float:
    """log A_α by the trapezoid rule in log space over x in [-60σ, α + 60σ] (the integrand peaks
    near x = 0 and, for large α, near x = α)."""
    x = np.linspace(-60 * sigma, alpha + 60 * sigma, points)
    log_mu0 = -x**2 / (2 * sigma**2) - math.log(sigma * math.sqrt(2 * math.pi))
    log_ratio = np.logaddexp(math.log1p(-q), math.log(q) + (2 * x - 1) / (2 * sigma**2))
    f = log_mu0 + alpha * log_ratio
    weights = np.full(points, math.log(x[1] - x[0]))
    weights[[0, -1]] -= math.log(2)
    return float(special.logsumexp(f + weights))


def rdp_curve(q: float, sigma: float, orders, exact: bool) -> np.ndarray:
    if not exact:
        return rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    return np.array([log_a_exact(q, sigma, a) / (a - 1) for a in orders])


def epsilon(orders, rdp_per_step: np.ndarray, steps: int) -> float:
    return rdp_lib.compute_epsilon(orders, rdp_per_step * steps, DELTA)[0]


def steps_within(orders, rdp_per_step: np.ndarray, target: float) -> int:
    lo, hi = 1, 1
    while epsilon(orders, rdp_per_step, hi) <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if epsilon(orders, rdp_per_step, mid) <= target else (lo, mid)
    return lo


def main() -> None:
    print(f"dp-accounting {metadata.version('dp-accounting')} at delta = {DELTA}; orders: {len(DEFAULT_ORDERS)} default, "
          f"{len(INTEGER_ORDERS)} integer")
    for name, q, z, steps, target in CASES:
        ways = {
            "0.6.0, DEFAULT_ORDERS": (DEFAULT_ORDERS, rdp_curve(q, z, DEFAULT_ORDERS, exact=False)),
            "integer orders only": (INTEGER_ORDERS, rdp_curve(q, z, INTEGER_ORDERS, exact=False)),
            "exact, DEFAULT_ORDERS": (DEFAULT_ORDERS, rdp_curve(q, z, DEFAULT_ORDERS, exact=True)),
        }
        closed = ways["integer orders only"][1]
        integrated = rdp_curve(q, z, INTEGER_ORDERS, exact=True)
        finite = np.isfinite(closed) & (closed > 0)
        check = float(np.max(np.abs(integrated[finite] / closed[finite] - 1)))
        print(f"\n{name}: q = {q:.6g}, z = {z:.6g}, {steps} steps, target eps {target:g}"
              f" (integration vs closed form at integer orders: max relative difference {check:.1e})")
        for way, (orders, curve) in ways.items():
            eps, order = rdp_lib.compute_epsilon(orders, curve * steps, DELTA)
            print(f"  {way:24s} eps {eps:.6f} (order {order:g}), steps within eps {target:g}: "
                  f"{steps_within(orders, curve, target)}")


if __name__ == "__main__":
    main()
