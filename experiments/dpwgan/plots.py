"""Privacy-utility figures from GAN runs: inception score against epsilon (004's Figs. 1-3).

    python experiments/dpwgan/plots.py OUT.png TITLE LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Each run contributes its `progress.json` (scores during training) and, if present, the final
score of `results.json` (10,000 samples) as a marker. Non-private runs (epsilon = inf) are
drawn as a horizontal dashed line at their best score, as in 004.
"""
from __future__ import annotations

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from tfpriv.run_folder import PROGRESS_FILE, RESULTS_FILE  # noqa: E402


def load_curve(run_dir: str) -> tuple[list[float], list[float], list[int], dict | None]:
    """(epsilons, inception scores, critic steps) from progress.json, and results.json if finished."""
    with open(os.path.join(run_dir, PROGRESS_FILE)) as f:
        records = json.load(f)
    eps = [float(r["epsilon"]) if r["epsilon"] not in ("inf", "Infinity", None) else math.inf for r in records]
    scores = [float(r["inception_score"]) for r in records]
    steps = [int(r["critic_steps"]) for r in records]
    results = None
    path = os.path.join(run_dir, RESULTS_FILE)
    if os.path.isfile(path):
        with open(path) as f:
            results = json.load(f)
    return eps, scores, steps, results


def plot_is_vs_epsilon(runs: dict[str, str], path: str, title: str = "") -> str:
    """Left: IS against epsilon (stars: final 10,000-sample scores); right: IS against critic steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for label, run_dir in runs.items():
        eps, scores, steps, results = load_curve(run_dir)
        final = results["metrics"].get("inception_score") if results else None
        if all(math.isinf(e) for e in eps):
            (line,) = ax2.plot(steps, scores, ls="--", color="gray", label=label)
            ax.axhline(max(scores), ls="--", color="gray", label=f"{label} (best)")
            continue
        (line,) = ax.plot(eps, scores, marker=".", label=label)
        ax2.plot(steps, scores, marker=".", color=line.get_color(), label=label)
        if final is not None:
            ax.plot([float(results["epsilon"])], [final], marker="*", ms=10, color=line.get_color())
            ax2.plot([steps[-1]], [final], marker="*", ms=10, color=line.get_color())
    ax.set_xlabel("epsilon (delta = 1e-5)")
    ax2.set_xlabel("critic steps")
    for a in (ax, ax2):
        a.set_ylabel("inception score")
        a.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, title, pairs = argv[0], argv[1], argv[2:]
    runs = dict(p.rsplit("=", 1) for p in pairs)  # labels may contain "="
    print(plot_is_vs_epsilon(runs, out, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
