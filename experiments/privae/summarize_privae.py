"""Tables and plots of a PriVAE sweep: mean ± std over seeds of the metrics against epsilon.

    python experiments/privae/summarize_privae.py RUNS_DIR OUT_PREFIX [pinwheel | hoyer]
reads RUNS_DIR/<config>-eps<e>-seed<s>/results.json and writes OUT_PREFIX.md (a markdown
table) and OUT_PREFIX.png (sparsity, log-likelihood and MMD against epsilon). `pinwheel` switches to
the clustering metrics and lists purity run by run; `hoyer` lists the Hoyer sparsity run by run.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

SPARSITY_METRICS = (("hoyer_sparsity", "Hoyer sparsity"), ("log_likelihood", "test log-likelihood (nats)"),
                    ("mmd", "MMD(q(z), p(z))"))
PINWHEEL_METRICS = (("cluster_purity", "latent cluster purity"), ("reconstruction_error", "reconstruction MSE"),
                    ("log_likelihood", "test log-likelihood (nats)"))
METRICS = SPARSITY_METRICS
PER_SEED = None  # a metric also listed run by run (the pinwheel and hoyer modes)
ORDER = ("vae", "vae_mmd", "privae", "privae_mmd", "micro_mmd", "batch_mmd", "vae_laplace", "vae_mmd_laplace",
         "privae_laplace", "privae_mmd_laplace", "kl", "kl_paper", "nokl")


def load(runs_dir: str):
    groups = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(runs_dir, "*", "results.json"))):
        m = re.match(r"(.+)-eps([^-]+)-seed(\d+)$", os.path.basename(os.path.dirname(path)))
        if not m:
            continue
        r = json.load(open(path))
        groups[(m.group(1), m.group(2))].append(r)
    return groups


def fmt(values):
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{np.mean(values):.4g} ± {np.std(values, ddof=1):.2g}"


def main(runs_dir: str, prefix: str) -> None:
    groups = load(runs_dir)
    keys = sorted(groups, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99,
                                         float("inf") if k[1] == "inf" else float(k[1])))
    lines = ["| config | target ε | achieved ε | seeds | epochs | z (noise mult.) | z_eff | " +
             " | ".join(label for _, label in METRICS) + " | train s/run |" +
             (f" {PER_SEED} per seed (seed: value) |" if PER_SEED else ""),
             "|" + "---|" * (8 + len(METRICS) + bool(PER_SEED))]
    for key in keys:
        runs = groups[key]
        eps = [r["epsilon"] for r in runs]
        eps_s = "∞" if all(e == "inf" for e in eps) else fmt([float(e) for e in eps])
        cells = [key[0], key[1], eps_s, str(len(runs)), str(runs[0]["epochs"]),
                 f"{runs[0]['noise_multiplier']:.4g}", f"{runs[0]['effective_noise_multiplier']:.4g}"]
        cells += [fmt([r["metrics"].get(m) for r in runs]) for m, _ in METRICS]
        cells.append(fmt([r["metrics"].get("train_seconds") for r in runs]))
        if PER_SEED:
            per_seed = sorted((r.get("seed"), r["metrics"].get(PER_SEED)) for r in runs)
            cells.append(", ".join(f"{s}: {v:.3f}" for s, v in per_seed if isinstance(v, (int, float))))
        lines.append("| " + " | ".join(cells) + " |")
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
