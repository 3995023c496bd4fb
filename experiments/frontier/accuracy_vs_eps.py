"""Downstream accuracy against ε for the DP-WGAN-GP generators of issue #36, beside DPImageBench's numbers.

Every tfpriv point is read from a run's record (a `results.json`, a `rescore_dpimagebench.json`, or a
line of a `runs.jsonl`); none is typed in here. The reference points are DPImageBench's published table
(../shared/references/dpimagebench.md). Two scales are drawn, and they are not the same protocol:
the project's small CNN (`--eval_protocol=tfpriv`) and DPImageBench's recipe reduced to ResNet-8 for
5 epochs (`matches_dpimagebench: false`: one classifier of the source's three, at a reduced depth).

    python experiments/frontier/accuracy_vs_eps.py   # writes experiments/frontier/accuracy_vs_eps.png
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
EXPERIMENTS = HERE.parent

# (dataset, label, record): a record is a JSON file, or "<runs.jsonl>#<run name>".
TFPRIV = [
    ("mnist", "1,001 steps", "dpwgan/mnist_eps1_c16_b1024_z2354_ema_results.json"),
    ("mnist", "2,006 steps", "frontier/generators/mnist_eps1_2000steps_seed0/results.json"),
    ("mnist", "4,012 steps", "frontier/generators/mnist_eps1_4000steps_seed0/results.json"),
    ("mnist", "4,012 steps", "frontier/generators/mnist_eps1_4000steps_seed1/results.json"),
    ("mnist", "2,006 steps, K = 4", "frontier/generators/mnist_eps1_2000steps_k4_seed0/results.json"),
    ("mnist", "2,006 steps, critic 8", "frontier/runs.jsonl#mnist_eps1_2000steps_critic8_seed0_results"),
    ("mnist", "986 steps, B = 2,048", "frontier/runs.jsonl#mnist_eps1_b2048_seed0_results"),
    ("mnist", "4,017 steps", "dpwgan/main_c32_b512_z0656_ema_results.json"),
    ("mnist", "4,017 steps", "dpwgan/runs.jsonl#main_c32_b512_z0656_ema_seed1_results"),
    ("mnist", "4,001 steps", "frontier/generators/mnist_eps10_tf221_seed1/results.json"),
    ("fashion_mnist", "1,001 steps", "dpwgan/fashion_eps1_c16_b1024_z2354_ema_results.json"),
    ("fashion_mnist", "4,017 steps + mode-seeking", "dpwgan/runs.jsonl#fashion_c32_div05_b512_z0656_ema_results"),
    ("fashion_mnist", "4,017 steps + mode-seeking",
     "dpwgan/runs.jsonl#fashion_c32_div05_b512_z0656_ema_seed1_results"),
    ("fashion_mnist", "2,006 steps + mode-seeking", "frontier/generators/fashion_eps1_2000steps_div05_seed0/results.json"),
    ("fashion_mnist", "2,006 steps + mode-seeking", "frontier/generators/fashion_eps1_2000steps_div05_seed1/results.json"),
]
REDUCED = [
    ("mnist", "2,006 steps", "frontier/generators/mnist_eps1_2000steps_seed0/rescore_dpimagebench.json"),
    ("mnist", "4,012 steps", "frontier/generators/mnist_eps1_4000steps_seed0/rescore_dpimagebench.json"),
    ("mnist", "4,012 steps", "frontier/generators/mnist_eps1_4000steps_seed1/rescore_dpimagebench.json"),
    ("mnist", "2,006 steps, K = 4", "frontier/generators/mnist_eps1_2000steps_k4_seed0/rescore_dpimagebench.json"),
    ("mnist", "4,001 steps", "frontier/generators/mnist_eps10_tf221_seed1/rescore_dpimagebench.json"),
    ("fashion_mnist", "2,006 steps + mode-seeking",
     "frontier/generators/fashion_eps1_2000steps_div05_seed0/rescore_dpimagebench.json"),
    ("fashion_mnist", "2,006 steps + mode-seeking",
     "frontier/generators/fashion_eps1_2000steps_div05_seed1/rescore_dpimagebench.json"),
]
# DPImageBench (CCS 2025), without public data, accuracy at ε = 1 / 10 under its full protocol.
REFERENCES = {
    "mnist": {"DP-GAN": (92.4, 92.7), "DPDM": (89.2, 97.7), "DP-FETA": (95.6, 98.1)},
    "fashion_mnist": {"DP-GAN": (71.8, 70.3), "DPDM": (76.4, 85.6), "DP-FETA": (81.7, 87.3)},
}
TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}


def load(record: str) -> dict | None:
    """The record named by `record`, or None when it is not in the repository (yet)."""
    name, _, run = record.partition("#")
    path = EXPERIMENTS / name
    if not path.exists():
        return None
    if not run:
        return json.loads(path.read_text())
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry["run"] == run:
            return entry["record"]
    raise KeyError(f"{run} is not in {path}")


def points() -> list[dict]:
    """One row per plotted point: dataset, protocol, label, seed, ε and accuracy (%)."""
    rows = []
    for dataset, label, record in TFPRIV:
        r = load(record)
        if r is not None:
            rows.append({"dataset": dataset, "protocol": "tfpriv", "label": label, "seed": r["seed"],
                         "epsilon": r["epsilon"], "accuracy": 100 * r["metrics"]["downstream_accuracy"]})
    for dataset, label, record in REDUCED:
        r = load(record)
        if r is not None:
            seed = load(str(Path(record).parent / "results.json"))["seed"]
            rows.append({"dataset": dataset, "protocol": "reduced", "label": label, "seed": seed,
                         "epsilon": r["epsilon_total"], "accuracy": 100 * r["accuracy"]})
    return rows


def main() -> None:
    rows = points()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, dataset in zip(axes, TITLES):
        for (method, (acc1, acc10)), color in zip(REFERENCES[dataset].items(), ("0.25", "0.5", "0.7")):
            ax.plot([1, 10], [acc1, acc10], "--", marker="s", color=color, label=f"DPImageBench {method} (full protocol)")
        for protocol, marker, color, name in (("tfpriv", "o", "tab:blue", "tfpriv CNN, 3 epochs"),
                                              ("reduced", "^", "tab:red", "DPImageBench recipe, ResNet-8, 5 epochs")):
            mine = [r for r in rows if r["dataset"] == dataset and r["protocol"] == protocol]
            if not mine:
                continue
            ax.scatter([r["epsilon"] for r in mine], [r["accuracy"] for r in mine], marker=marker, s=40, zorder=3, color=color,
                       label=f"tfpriv DP-WGAN-GP ({name})")
            for r in mine:
                ax.annotate(f"{r['label']}, s{r['seed']}", (r["epsilon"], r["accuracy"]), fontsize=6,
                            xytext=(4, -3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xticks([1, 10], ["1", "10"])
        ax.set_xlim(0.7, 14)
        ax.set_xlabel("ε (δ = 1e-5)")
        ax.set_ylabel("downstream accuracy on the real test set (%)")
        ax.set_title(TITLES[dataset])
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    out = HERE / "accuracy_vs_eps.png"
    fig.savefig(out, dpi=130)
    for r in rows:
        print(f"{r['dataset']:>13} {r['protocol']:>7} ε={r['epsilon']:.4f} seed {r['seed']} {r['label']:<28} "
              f"{r['accuracy']:.1f} %")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
