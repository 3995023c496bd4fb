"""The MNIST warm-start progress table of README.md ("MNIST ε = 1: the 4,012-step recipe with and without
the warm start"), recomputed from runs.jsonl: w / IS / FD / label agreement per checkpoint for each seed
with and without the warm start (bold: better than the same seed without it), then the final
tfpriv-protocol row.

    python experiments/frontier/warm_start_table.py
"""
from __future__ import annotations

import json
import os

RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs.jsonl")
STEPS = (250, 500, 750, 1000, 1500, 2000, 2500, 3000, 3500, 4000)
WARM, WITHOUT = "mnist_eps1_4000steps_warm01_seed{}", "mnist_eps1_4000steps_seed{}"


def _records(path: str) -> dict[str, object]:
    with open(path) as f:
        return {line["run"]: line["record"] for line in map(json.loads, f)}


def _progress(records: dict, key: str) -> dict[int, dict]:
    return {row["critic_steps"]: row for row in records[key + "_progress"]}  # a repeated row is identical


def _cell(row: dict, other: dict, bold: bool) -> str:
    def mark(text: str, better: bool) -> str:
        return f"**{text}**" if bold and better else text
    return " / ".join([f"{row['w_distance']:.2f}".replace("-", "−"),
                       mark(f"{row['inception_score']:.2f}", row["inception_score"] > other["inception_score"]),
                       mark(f"{row['frechet_distance']:.0f}", row["frechet_distance"] < other["frechet_distance"]),
                       mark(f"{row['label_agreement']:.2f}", row["label_agreement"] > other["label_agreement"])])


def table(path: str = RUNS, seeds: tuple[int, ...] = (0, 1)) -> list[str]:
    records = _records(path)
    warm = [_progress(records, WARM.format(s)) for s in seeds]
    without = [_progress(records, WITHOUT.format(s)) for s in seeds]
    header = "| critic steps | ε with / without | " + " | ".join(
        f"seed {s}, warm start | seed {s}, without" for s in seeds) + " |"
    lines = [header, "|---:|---|" + "---|---|" * len(seeds)]
    for step in STEPS:
        cells = [f"{_cell(w[step], n[step], True)} | {_cell(n[step], w[step], False)}" for w, n in zip(warm, without)]
        lines.append(f"| {step:,} | {warm[0][step]['epsilon']:.2f} / {without[0][step]['epsilon']:.2f} | "
                     + " | ".join(cells) + " |")
    finals = []
    for s in seeds:
        m = records[WARM.format(s) + "_results"]["metrics"]
        n = records[WITHOUT.format(s) + "_results"]["metrics"]
        finals.append(f"**{100 * m['downstream_accuracy']:.1f} %**, IS {m['inception_score']:.2f}, "
                      f"FD {m['frechet_distance']:.1f}, agreement {m['label_agreement']:.2f} | "
                      f"{100 * n['downstream_accuracy']:.1f} %")
    lines.append("| **final**, tfpriv protocol | 1 | " + " | ".join(finals) + " |")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
