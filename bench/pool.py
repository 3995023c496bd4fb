"""Pools the per-round ratios of several bench/throughput.py records of the same sections.

Each row's ratio is recomputed per round from `seconds_per_round` (reference seconds / the row's
seconds) and pooled over every record that holds the row, so the IQR also covers the spread
between runs; for each row it prints the pooled median [IQR], each run's own median, and whether
every run's median lies inside the pooled IQR. `--only_last=section,...` takes those sections
from the last record alone (for sections whose code changed between the runs).

    R=experiments/throughput
    python bench/pool.py $R/results_692b16e_a.json $R/results_692b16e_b.json $R/results.json --only_last=wgan_critic
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def pooled_rows(records: list[dict], only_last: set[str]) -> list[dict]:
    out = []
    for i, section in enumerate(records[-1]["sections"]):
        name = section["section"]
        use = [records[-1]] if name in only_last else records
        secs = [next(s for s in r["sections"] if s["section"] == name) for r in use]
        for row in section["rows"]:
            per_run = []
            for sec in secs:
                rows = {r["config"]: r for r in sec["rows"]}
                r = rows[row["config"]]
                per_run.append(np.array(rows[r["reference"]]["seconds_per_round"]) / np.array(r["seconds_per_round"]))
            q1, med, q3 = np.percentile(np.concatenate(per_run), [25, 50, 75])
            medians = [float(np.median(r)) for r in per_run]
            out.append({"section": name, "config": row["config"], "reference": row["reference"], "median": med,
                        "q1": q1, "q3": q3, "run_medians": medians, "runs_inside": sum(q1 <= m <= q3 for m in medians),
                        "rounds": int(sum(len(r) for r in per_run))})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--only_last", default="")
    args = parser.parse_args()
    records = [json.load(open(p)) for p in args.records]
    rows = pooled_rows(records, set(filter(None, args.only_last.split(","))))
    inside = total = 0
    for r in rows:
        d = 3 if r["median"] < 0.1 else 2
        runs = " ".join(f"{m:.{d}f}" for m in r["run_medians"])
        print(f"{r['section']:16s} {r['config'][:48]:48s} {r['median']:.{d}f} [{r['q1']:.{d}f}, {r['q3']:.{d}f}]  "
              f"{r['rounds']} rounds; run medians {runs}")
        if r["config"] != r["reference"]:
            inside += r["runs_inside"]
            total += len(r["run_medians"])
    print(f"{inside} of {total} run medians (rows other than the references) inside the pooled IQR")


if __name__ == "__main__":
    main()
