"""Privacy-utility figures from GAN runs: inception score against epsilon (004's Figs. 1-3).

    python -m tfpriv.gan.plots OUT.png TITLE LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Each run contributes its `progress.json` (scores during training) and, if present, the final
score of `results.json` (10,000 samples) as a marker. Non-private runs (epsilon = inf) are
drawn as a horizontal dashed line at their best score, as in 004.
"""
from __future__ import annotations

import json
import math
import os
import sys


def load_curve(run_dir: str) -> tuple[list[float], list[float], dict | None]:
    """(epsilons, inception scores) from progress.json, and results.json if the run finished."""
    with open(os.path.join(run_dir, "progress.json")) as f:
        records = json.load(f)
    eps = [float(r["epsilon"]) if r["epsilon"] not in ("inf", None) else math.inf for r in records]
    scores = [float(r["inception_score"]) for r in records]
    results = None
    path = os.path.join(run_dir, "results.json")
    if os.path.isfile(path):
        with open(path) as f:
            results = json.load(f)
    return eps, scores, results


def plot_is_vs_epsilon(runs: dict[str, str], path: str, title: str = "") -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for label, run_dir in runs.items():
        eps, scores, results = load_curve(run_dir)
        if all(math.isinf(e) for e in eps):
            ax.axhline(max(scores), ls="--", color="gray", label=f"{label} (non-private, best)")
            continue
        (line,) = ax.plot(eps, scores, marker=".", label=label)
        if results is not None and "inception_score" in results.get("metrics", {}):
            ax.plot([float(results["epsilon"])], [results["metrics"]["inception_score"]], marker="*",
                    ms=10, color=line.get_color())
    ax.set_xlabel("epsilon (delta = 1e-5)")
    ax.set_ylabel("inception score")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, title, pairs = argv[0], argv[1], argv[2:]
    runs = dict(p.split("=", 1) for p in pairs)
    print(plot_is_vs_epsilon(runs, out, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
