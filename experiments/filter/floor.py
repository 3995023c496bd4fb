"""Lowest private accuracy any release can have in MNIST case 2, given utility and non-target accuracy.

Idealisation: the three labels are functions of the digit (private: digit >= 5; utility: odd;
non-target: has a circle {0, 6, 8, 9}), the release may depend on the digit only through a
randomised map digit -> symbol, and every adversary is Bayes-optimal. Merging release symbols with
the same utility and non-target decisions keeps those accuracies and cannot raise the private
one, so four symbols (one per decision pair) suffice and the floor is a linear programme:
minimise sum_z max_y P(private = y, z) over P(digit, z) with the digit's marginal fixed and the
utility / non-target accuracies (with symbol z's fixed decisions) at least the targets.

    python experiments/filter/floor.py /work/shared/data > floor.json
(committed: the line mnist_case2_floor/floor of experiments/filter/runs.jsonl)
"""
import gzip
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

DIGITS = np.arange(10)
PRIVATE = (DIGITS >= 5).astype(int)
UTILITY = DIGITS % 2
NON_TARGET = np.isin(DIGITS, [0, 6, 8, 9]).astype(int)
SYMBOLS = [(u, n) for u in (0, 1) for n in (0, 1)]  # (utility decision, non-target decision)


def digit_frequencies(data_dir: str) -> np.ndarray:
    with gzip.open(Path(data_dir) / "mnist" / "t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return np.bincount(labels, minlength=10) / len(labels)


def floor(freq: np.ndarray, utility: float, non_target: float) -> tuple[float, np.ndarray]:
    """(min private accuracy, P(digit, symbol)) with utility / non-target accuracy >= the targets."""
    n_joint, n_sym = 10 * len(SYMBOLS), len(SYMBOLS)
    cost = np.r_[np.zeros(n_joint), np.ones(n_sym)]  # p(d, z) then t_z >= P(private = y, z) for both y
    a_ub, b_ub = [], []
    for z in range(n_sym):
        for y in (0, 1):
            row = np.zeros(n_joint + n_sym)
            row[[d * n_sym + z for d in DIGITS if PRIVATE[d] == y]] = 1
            row[n_joint + z] = -1
            a_ub.append(row), b_ub.append(0.0)
    for label, target, k in ((UTILITY, utility, 0), (NON_TARGET, non_target, 1)):
        row = np.zeros(n_joint + n_sym)
        for d in DIGITS:
            for z, sym in enumerate(SYMBOLS):
                row[d * n_sym + z] = -float(label[d] == sym[k])
        a_ub.append(row), b_ub.append(-target)
    a_eq = np.zeros((10, n_joint + n_sym))
    for d in DIGITS:
        a_eq[d, d * n_sym:(d + 1) * n_sym] = 1
    res = linprog(cost, A_ub=np.array(a_ub), b_ub=b_ub, A_eq=a_eq, b_eq=freq, bounds=(0, None))
    assert res.status == 0, res.message
    return float(res.fun), res.x[:n_joint].reshape(10, n_sym)


def main(data_dir: str) -> None:
    freq = digit_frequencies(data_dir)
    points = {"paper (0.899, 0.90)": (0.899, 0.90), "target (0.90, 0.90)": (0.90, 0.90),
              "tfpriv b = 10 (0.924, 0.823)": (0.924, 0.823), "tfpriv b = 3 (0.943, 0.867)": (0.943, 0.867),
              "tfpriv b = 1 (0.944, 0.902)": (0.944, 0.902), "labels kept (1, 1)": (1.0, 1.0)}
    out = {"test_digit_frequencies": freq.round(4).tolist(), "floors": {}, "curve_equal_targets": {}}
    for name, (u, n) in points.items():
        out["floors"][name] = round(floor(freq, u, n)[0], 4)
    for t in np.round(np.arange(0.80, 1.0001, 0.02), 2):
        out["curve_equal_targets"][f"{t:.2f}"] = round(floor(freq, t, t)[0], 4)
    _, joint = floor(freq, 0.90, 0.90)
    out["map_at_target"] = {f"digit {d}": {f"symbol u={u},n={n}": round(joint[d, z] / freq[d], 3)
                                           for z, (u, n) in enumerate(SYMBOLS) if joint[d, z] > 1e-9}
                            for d in DIGITS}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
