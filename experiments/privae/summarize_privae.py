"""Tables and plots of a PriVAE sweep: mean ± std over seeds of the metrics against epsilon.

    python experiments/privae/summarize_privae.py RUNS_DIR OUT_PREFIX [pinwheel | hoyer]
reads RUNS_DIR/<config>-eps<e>-seed<s>/results.json and writes OUT_PREFIX.md (a markdown table,
`experiments/tools/aggregate.py`'s `table` of the same runs) and OUT_PREFIX.png (sparsity,
log-likelihood and MMD against epsilon). `pinwheel` switches to the clustering metrics and lists
purity run by run; `hoyer` lists the Hoyer sparsity run by run.
"""
from __future__ import annotations

import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from experiments.tools.aggregate import (ORDER, PINWHEEL_METRICS, SPARSITY_METRICS, sweep_groups,  # noqa: E402
                                         table_lines)

METRICS = SPARSITY_METRICS
PER_SEED = None  # a metric also listed run by run (the pinwheel and hoyer modes)


def load(runs_dir: str):
    """(config, eps) -> results records of RUNS_DIR/<config>-eps<e>-seed<s>/results.json."""
    paths = sorted(glob.glob(os.path.join(runs_dir, "*", "results.json")))
    return sweep_groups([(os.path.basename(os.path.dirname(p)), json.load(open(p))) for p in paths])


def main(runs_dir: str, prefix: str) -> None:
    groups = load(runs_dir)
    lines = table_lines(groups, METRICS, PER_SEED)
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 3.8))
    configs = [c for c in ORDER if any(k[0] == c for k in groups)]
    for ax, (metric, label) in zip(axes, METRICS):
        for c in configs:
            pts = sorted((float(k[1]), [r["metrics"][metric] for r in groups[k]]) for k in groups
                         if k[0] == c and k[1] != "inf")
            if pts:
                xs = [p[0] for p in pts]
                mu = np.array([np.mean(p[1]) for p in pts])
                sd = np.array([np.std(p[1]) for p in pts])
                ax.plot(xs, mu, marker="o", label=c)
                ax.fill_between(xs, mu - sd, mu + sd, alpha=0.2)
            elif (c, "inf") in groups:
                ax.axhline(np.mean([r["metrics"][metric] for r in groups[(c, "inf")]]), ls="--", lw=1,
                           label=f"{c} (non-private)", color="gray" if c == "vae" else "k")
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.set_title(label, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=110)
    print(f"written {prefix}.md and {prefix}.png")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[3] == "pinwheel":
        METRICS = PINWHEEL_METRICS
        PER_SEED = "cluster_purity"
    elif len(sys.argv) > 3 and sys.argv[3] == "hoyer":
        PER_SEED = "hoyer_sparsity"
    main(sys.argv[1], sys.argv[2])
