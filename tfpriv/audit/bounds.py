"""Statistical lower bounds on epsilon from membership guesses.

One run (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run"): m
canaries, each included in the training set independently with probability 1/2. The auditor
scores every canary, guesses "included" for the k+ highest scores and "excluded" for the k-
lowest (abstaining on the rest), r = k+ + k- guesses of which v are correct. If training is
(epsilon, delta)-DP, the number of correct guesses W satisfies (their Theorem 5.2, computed by
their Algorithm 2)

    P[W >= v] <= P[Bin(r, q) >= v] + 2 m delta * max_{i=1..v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps),

so observing v correct guesses rejects (eps, delta)-DP at level beta when the right side is
< beta. The lower bound (confidence 1 - beta) is the largest such eps (the p-value increases
with eps; found by bisection).

Many runs (the classic audit, Jagielski et al. 2020): R models trained with a canary and R
without, a score per model and a threshold t (guess "trained with the canary" when score > t). With false positive and false negative rates
FPR, FNR, (eps, delta)-DP implies FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta;
Clopper-Pearson upper confidence bounds on both rates give
    eps_lb = max(log((1 - delta - FNR_ub) / FPR_ub), log((1 - delta - FPR_ub) / FNR_ub)).
The confidence is split (Bonferroni) over the two rates and over the candidate thresholds, so
choosing the best threshold after seeing the scores keeps the stated confidence.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import scipy.stats

MAX_EPSILON = 100.0


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P-value of >= v correct guesses out of r (m canaries) under (epsilon, delta)-DP."""
    if not (0 <= v <= r <= m):
        raise ValueError(f"one-run audit: need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"one-run audit: need epsilon >= 0 and delta in [0, 1], got {epsilon}, {delta}")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of epsilon-DP randomized response
    tail = float(scipy.stats.binom.sf(v - 1, r, q))  # P[Bin(r, q) >= v]
    if delta == 0:
        return min(tail, 1.0)
    pmf = scipy.stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
    window = np.cumsum(pmf)                                      # i-th entry: P[v - i <= Bin < v]
    alpha = float(np.max(window / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * alpha, 1.0)


def one_run_epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95,
                                iterations: int = 60) -> float:
    """Largest epsilon that v correct guesses out of r (m canaries) reject at `confidence` (0 if none)."""
    beta = 1.0 - confidence
    if not 0 < beta < 1:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence}")
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > MAX_EPSILON:
            return MAX_EPSILON
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def guesses(scores: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int) -> tuple[int, int]:
    """(r, v): guess 'included' for the k+ highest scores and 'excluded' for the k- lowest."""
    scores, included = np.asarray(scores, np.float64), np.asarray(included, bool)
    m = len(scores)
    if k_plus + k_minus > m or k_plus < 0 or k_minus < 0:
        raise ValueError(f"guesses: need k+ + k- <= m, got k+={k_plus}, k-={k_minus}, m={m}")
    order = np.argsort(-scores, kind="stable")
    correct = int(np.sum(included[order[:k_plus]])) + int(np.sum(~included[order[m - k_minus:]]))
    return k_plus + k_minus, correct


def one_run_audit(scores, included, delta: float, confidence: float = 0.95,
                  fractions: Sequence[float] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5)) -> dict:
    """The one-run epsilon lower bound, best over k+ = k- = fraction * m (Bonferroni over the grid).

    Each grid point is tested at level (1 - confidence) / len(grid), so the reported maximum
    holds at `confidence`.
    """
    scores, included = np.asarray(scores, np.float64), np.asarray(included, bool)
    m = len(scores)
    ks = sorted({max(1, int(round(f * m))) for f in fractions if 2 * max(1, int(round(f * m))) <= m})
    if not ks:
        raise ValueError(f"one-run audit: too few canaries ({m})")
    per_test = 1.0 - (1.0 - confidence) / len(ks)
    rows = []
    for k in ks:
        r, v = guesses(scores, included, k, k)
        rows.append({"k_plus": k, "k_minus": k, "guesses": r, "correct": v,
                     "epsilon_lower_bound": one_run_epsilon_lower_bound(m, r, v, delta, per_test)})
    best = max(rows, key=lambda row: row["epsilon_lower_bound"])
    return {"epsilon_lower_bound": best["epsilon_lower_bound"], "confidence": confidence, "delta": delta,
            "canaries": m, "included": int(np.sum(included)), "best": best, "grid": rows}


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) upper confidence bound on a binomial proportion."""
    if successes >= trials:
        return 1.0
    return float(scipy.stats.beta.ppf(1.0 - alpha, successes + 1, trials - successes))


def many_run_epsilon_lower_bound(scores_in, scores_out, delta: float, confidence: float = 0.95,
                                 thresholds: Sequence[float] | None = None, max_thresholds: int = 20) -> dict:
    """Classic audit: R scores of models trained with the canary, R without; guess 'in' when score > t.

    thresholds: candidates (default: up to `max_thresholds` quantiles of the pooled scores);
    Bonferroni over 2 rates x len(thresholds).
    """
    s_in, s_out = np.asarray(scores_in, np.float64), np.asarray(scores_out, np.float64)
    if thresholds is None:
        pooled = np.concatenate([s_in, s_out])
        thresholds = np.unique(np.quantile(pooled, np.linspace(0, 1, max_thresholds + 2)[1:-1]))
    thresholds = list(thresholds)
    alpha = (1.0 - confidence) / (2 * len(thresholds))
    best = {"epsilon_lower_bound": 0.0}
    for t in thresholds:
        fp, fn = int(np.sum(s_out > t)), int(np.sum(s_in <= t))
        fpr = clopper_pearson_upper(fp, len(s_out), alpha)
        fnr = clopper_pearson_upper(fn, len(s_in), alpha)
        candidates = [0.0]
        for a, b in ((fnr, fpr), (fpr, fnr)):
            if 1.0 - delta - a > 0 and b > 0:
                candidates.append(math.log((1.0 - delta - a) / b))
        eps = max(candidates)
        if eps > best["epsilon_lower_bound"]:
            best = {"epsilon_lower_bound": eps, "threshold": float(t), "false_positives": fp, "false_negatives": fn,
                    "fpr_upper": fpr, "fnr_upper": fnr}
    return {**best, "confidence": confidence, "delta": delta, "runs_in": len(s_in), "runs_out": len(s_out),
            "thresholds": len(thresholds)}
