"""Interleaved timing rounds shared by the framework benchmarks (no TensorFlow or torch import here)."""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np


def quantiles(values) -> dict:
    """Median and interquartile range of `values`."""
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def load_average() -> float:
    """The 1-minute load average (the machine is shared: numbers are read next to it)."""
    return round(os.getloadavg()[0], 2)


def interleaved(runs: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Examples/s of each run per round, the runs taking turns within every round (so load that
    drifts hits all of them alike). A run trains once and returns the number of examples it saw."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            examples = run()
            rates[name].append(examples / (time.perf_counter() - start))
    return rates


def summary(framework: str, model: str, private: list[float], nonprivate: list[float], **extra) -> dict:
    """One result row: examples/s of both sides and the per-round ratio private / non-private."""
    ratios = [p / n for p, n in zip(private, nonprivate)]
    return {"framework": framework, "model": model, "rounds": len(ratios),
            "private_examples_per_s": quantiles(private), "nonprivate_examples_per_s": quantiles(nonprivate),
            "ratio": quantiles(ratios), **extra}


def print_row(row: dict) -> None:
    r, p, n = row["ratio"], row["private_examples_per_s"], row["nonprivate_examples_per_s"]
    print(f"{row['framework']:8s} {row['model']:12s} private {p['median']:8.1f} ex/s  non-private "
          f"{n['median']:8.1f} ex/s  ratio {r['median']:.3f} [IQR {r['q1']:.3f}, {r['q3']:.3f}]  "
          f"load {row['load_average_start']}-{row['load_average_end']}", flush=True)
