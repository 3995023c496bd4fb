"""The privacy cost of a hyperparameter-tuning job with a random number of trials.

Papernot & Steinke (ICLR 2022), "Hyperparameter tuning with Renyi differential privacy": a job
that draws the number of trials K from a suitable distribution, trains one model per trial and
releases only the best one (by any score) is (λ, ε')-RDP with ε' a little above one trial's ε(λ),
instead of K·ε(λ). Theorem 2 covers the truncated negative binomial D_{η,γ} (η = 0 logarithmic,
η = 1 geometric):

    ε'(λ) = ε(λ) + (1 + η)·(1 − 1/λ̂)·ε(λ̂) + (1 + η)·log(1/γ)/λ̂ + log E[K]/(λ − 1),  any λ̂ ≥ 1,

and Theorem 6 the Poisson distribution with mean μ: ε'(λ) = ε(λ) + μ·δ̂ + log μ/(λ − 1), where a
trial is (ε̂, δ̂)-DP with e^ε̂ = 1 + 1/(λ − 1). dp_accounting 0.4.3 (the version TF Privacy 0.9.0
pins) implements both as `RepeatAndSelectDpEvent(event, mean, shape)` in its RDP accountant; this
module supplies the trial-count distributions (the tuner must *draw* K: a fixed number of trials
does not satisfy the theorems) and the cost of capping K; the tuner (`tfpriv.tuning.tuner`)
computes the job's epsilon from the RDP curve of the least private trial. The guarantee needs
every trial to be the same mechanism (same event) or a mechanism no less private.

A cap on the number of trials (run min(K, cap) trials) is not one of the theorems' distributions.
It is accounted exactly as a change of δ: run the capped and the uncapped job with the same K and
the same trials; their outputs differ only when K > cap, so for every output set S
P[capped(x) ∈ S] ≤ P[A(x) ∈ S] + p ≤ e^ε P[A(x') ∈ S] + δ' + p ≤ e^ε P[capped(x') ∈ S] + δ' + (1 + e^ε)·p
with p = P(K > cap) and A (ε, δ')-DP: the capped job is (ε, δ' + (1 + e^ε)·p)-DP (`capped_job_epsilon`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats

from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DEFAULT_ORDERS

DISTRIBUTIONS = ("poisson", "geometric", "logarithmic", "negative_binomial")


@dataclasses.dataclass(frozen=True)
class TrialCount:
    """The distribution of the number of trials K, by its mean (and the negative binomial's shape η)."""

    distribution: str
    mean: float
    shape: float = 1.0

    def __post_init__(self):
        if self.distribution not in DISTRIBUTIONS:
            raise ConfigError(f"distribution: must be one of {', '.join(DISTRIBUTIONS)}, got {self.distribution!r}")
        if not (math.isfinite(self.mean) and self.mean >= 1):
            raise ConfigError(f"mean: the expected number of trials must be a finite number >= 1, got {self.mean}")
        if self.distribution == "negative_binomial" and not (math.isfinite(self.shape) and self.shape > 0):
            raise ConfigError(f"shape: the negative binomial's shape eta must be > 0, got {self.shape}")

    @property
    def dp_shape(self) -> float:
        """dp_accounting's shape: inf (Poisson), 1 (geometric), 0 (logarithmic), eta."""
        return {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}.get(self.distribution, self.shape)

    @property
    def gamma(self) -> float:
        """The truncated negative binomial's success probability γ for this mean (not for Poisson)."""
        if self.distribution == "poisson":
            raise ConfigError("gamma: the Poisson distribution has no gamma parameter")
        return rdp_privacy_accountant._gamma_truncated_negative_binomial(self.dp_shape, self.mean)

    def tail(self, cap: int) -> float:
        """P(K > cap)."""
        if self.distribution == "poisson":
            return float(stats.poisson(self.mean).sf(cap))
        if self.distribution == "logarithmic":
            return float(stats.logser(1.0 - self.gamma).sf(cap))
        nb = stats.nbinom(self.dp_shape, self.gamma)  # D_{η,γ} = NB(η, γ) conditioned on K >= 1
        above_zero = nb.sf(0)
        return float(nb.sf(cap) / above_zero) if above_zero > 0 else 0.0  # γ = 1 (mean 1): K = 1

    def sample(self, rng: np.random.Generator) -> int:
        """Draws K. Poisson may give 0 (the job then releases nothing); the others give K >= 1."""
        if self.distribution == "poisson":
            return int(rng.poisson(self.mean))
        gamma = self.gamma
        if gamma >= 1:  # mean 1: K = 1 (NB(η, 1) is always 0)
            return 1
        if self.distribution == "logarithmic":
            return int(rng.logseries(1.0 - gamma))
        while True:  # NB(η, γ) conditioned on K >= 1 is D_{η,γ}
            k = int(rng.negative_binomial(self.dp_shape, gamma))
            if k >= 1:
                return k


# Fractions of the job's δ tried for the uncapped bound; the rest pays for P(K > cap).
CAP_DELTA_FRACTIONS = (0.999, 0.99, 0.9, 0.75, 0.5, 0.25, 0.1)


def capped_job_epsilon(rdp: np.ndarray, count: TrialCount, cap: int, delta: float,
                       orders: Sequence[float] = DEFAULT_ORDERS) -> tuple[float, float]:
    """(ε, δ') of a job running min(K, cap) trials of a mechanism with RDP curve `rdp`, at the job's δ.

    The uncapped bound is taken at δ' = f·δ for the fraction f in `CAP_DELTA_FRACTIONS` with the
    smallest ε such that δ' + (1 + e^ε)·P(K > cap) ≤ δ. Raises ConfigError naming `max_trials` when
    no fraction fits (the cap cuts off too much of K's distribution for this δ); the message gives
    the smallest cap that fits and, if there is one, the largest mean that fits this cap."""
    if cap < 1:
        raise ConfigError(f"max_trials: must be >= 1, got {cap}")
    best = _capped_fit(rdp, count, cap, delta, orders)
    if best is None:
        fixes = [f"max_trials={smallest_cap(rdp, count, cap, delta, orders)}"]
        mean = largest_mean(rdp, count, cap, delta, orders)
        if mean is not None:
            fixes.append(f"mean={mean:.3g}")
        raise ConfigError(f"max_trials: P(K > {cap}) = {count.tail(cap):.3g} for K ~ {count.distribution} with mean "
                          f"{count.mean:g} does not fit in delta = {delta:g}; use {' or '.join(fixes)}")
    return best


def _capped_fit(rdp: np.ndarray, count: TrialCount, cap: int, delta: float,
                orders: Sequence[float]) -> tuple[float, float] | None:
    """`capped_job_epsilon`'s (ε, δ'), or None when no fraction of δ fits."""
    p = count.tail(cap)
    job = rdp_privacy_accountant._compute_rdp_repeat_and_select(list(orders), rdp, count.mean, count.dp_shape)
    best = None
    for fraction in CAP_DELTA_FRACTIONS:
        eps = float(rdp_privacy_accountant.compute_epsilon(list(orders), job, fraction * delta)[0])
        if fraction * delta + (1 + math.exp(min(eps, 700.0))) * p <= delta and (best is None or eps < best[0]):
            best = (eps, fraction * delta)
    return best


def smallest_cap(rdp: np.ndarray, count: TrialCount, cap: int, delta: float,
                 orders: Sequence[float] = DEFAULT_ORDERS) -> int:
    """The smallest cap above `cap` that fits in δ (P(K > cap) falls to 0, so one exists)."""
    low, high = cap, max(2 * cap, cap + 1)
    while _capped_fit(rdp, count, high, delta, orders) is None:
        low, high = high, 2 * high
    while high - low > 1:  # fits at high, not at low; fitting is monotone in the cap
        mid = (low + high) // 2
        low, high = (low, mid) if _capped_fit(rdp, count, mid, delta, orders) is not None else (mid, high)
    return high


def largest_mean(rdp: np.ndarray, count: TrialCount, cap: int, delta: float,
                 orders: Sequence[float] = DEFAULT_ORDERS, steps: int = 30) -> float | None:
    """The largest E[K] in [1, count.mean] (to 1e-9 of it) whose distribution fits `cap` in δ, rounded
    down to 3 significant digits; None if E[K] = 1 does not fit (e.g. Poisson: P(K > cap) > 0)."""
    def fits(mean: float) -> bool:
        return _capped_fit(rdp, dataclasses.replace(count, mean=mean), cap, delta, orders) is not None

    if not fits(1.0):
        return None
    low, high = 1.0, count.mean
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    digits = 2 - math.floor(math.log10(low))
    return math.floor(low * 10 ** digits) / 10 ** digits
