"""One JSONL per study instead of one file per run: every run's records, whole, on one line.

    python experiments/tools/aggregate.py OUT.jsonl ROOT PATH [PATH ...]   # PATHs relative to ROOT
    python experiments/tools/aggregate.py show RUNS.jsonl KEY [FIELD]       # one run's line (or one record)
    python experiments/tools/aggregate.py table RUNS.jsonl SWEEP [MODE [CONFIG ...]]  # a sweep's table
    python experiments/tools/aggregate.py seeds RUNS.jsonl PATTERN [PATTERN ...]    # one row per pattern

Each PATH is a JSON file, a JSONL file or a folder searched recursively for both. The run key
(`run` on each line) is the file's path relative to ROOT without `.json`, except:
  * a folder holding `results.json` is one run (key: the folder); each JSON file directly in it
    is stored under its name without `.json` (`results`, `progress`, `tuning_trial`, ...);
  * each line of a JSONL file is one run, keyed `<file without .jsonl>/<basename of its "run"
    field>` (or its line number when it has none).
A plain JSON file is stored whole under `record`. Nothing is summarised or rounded: every number
a study README cites from a run can be read back from its line with `show`; `show ... KEY record`
(or `results`, `progress`, ...) prints that record alone, as the original file held it, for the
scripts that read a run's files. Lines are sorted by key.
`table` and `seeds` make the study READMEs' tables from these lines, so every table is recomputed
from its records (tests/experiments/test_tables.py checks one per study): `table` groups the runs
`SWEEP/<config>-eps<e>-seed<s>` by (config, e) (only the CONFIGs named, if any), mean ± sample std
over seeds, with MODE `sparsity` (Hoyer, log-likelihood, MMD), `hoyer` (the same and Hoyer per seed)
or `pinwheel` (purity, reconstruction MSE, log-likelihood; purity per seed)
(`experiments/privae/summarize_privae.py` writes the same table from run folders); `seeds` gives,
per fnmatch pattern over run keys, the metric per seed, its mean ± sample std, how many seeds reach
the threshold and the mean reconstruction MSE.
Plain Python on purpose: no TensorFlow, so it runs anywhere.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import statistics
import sys

SPARSITY_METRICS = (("hoyer_sparsity", "Hoyer sparsity"), ("log_likelihood", "test log-likelihood (nats)"),
                    ("mmd", "MMD(q(z), p(z))"))
PINWHEEL_METRICS = (("cluster_purity", "latent cluster purity"), ("reconstruction_error", "reconstruction MSE"),
                    ("log_likelihood", "test log-likelihood (nats)"))
ORDER = ("vae", "vae_mmd", "privae", "privae_mmd", "micro_mmd", "batch_mmd", "vae_laplace", "vae_mmd_laplace",
         "privae_laplace", "privae_mmd_laplace", "kl", "kl_paper", "nokl")
RUN_NAME = re.compile(r"(.+)-eps([^-]+)-seed(\d+)$")


def _load(path: str):
    with open(path) as f:
        return json.load(f)


def _json_files(root: str, path: str) -> list[str]:
    full = os.path.join(root, path)
    if os.path.isfile(full):
        return [full]
    if not os.path.isdir(full):
        raise SystemExit(f"aggregate: {full} is neither a file nor a folder")
    found = []
    for folder, _, names in os.walk(full):
        found += [os.path.join(folder, n) for n in names if n.endswith((".json", ".jsonl"))]
    return sorted(found)


def collect(root: str, paths: list[str]) -> dict[str, dict]:
    """Run key -> line, for every JSON/JSONL file under `paths` (relative to `root`)."""
    runs: dict[str, dict] = {}

    def add(key: str, field: str, value) -> None:
        line = runs.setdefault(key, {"run": key})
        if field in line:
            raise SystemExit(f"aggregate: run {key!r} has two {field!r} records")
        line[field] = value

    for path in paths:
        for file in _json_files(root, path):
            rel = os.path.relpath(file, root)
            folder = os.path.dirname(file)
            if file.endswith(".jsonl"):
                stem = rel[: -len(".jsonl")]
                with open(file) as f:
                    rows = [json.loads(s) for s in f if s.strip()]
                for i, row in enumerate(rows):
                    name = os.path.basename(str(row["run"])) if "run" in row else str(i)
                    add(f"{stem}/{name}", "record", row)
            elif os.path.isfile(os.path.join(folder, "results.json")):
                add(os.path.relpath(folder, root), os.path.basename(file)[: -len(".json")], _load(file))
            else:
                add(rel[: -len(".json")], "record", _load(file))
    return runs


def write(out: str, runs: dict[str, dict]) -> None:
    with open(out, "w") as f:
        for key in sorted(runs):
            f.write(json.dumps(runs[key], sort_keys=True) + "\n")


def show(runs_file: str, key: str) -> dict:
    with open(runs_file) as f:
        for s in f:
            line = json.loads(s)
            if line["run"] == key:
                return line
    raise SystemExit(f"aggregate: no run {key!r} in {runs_file}")


def read(runs_file: str) -> dict[str, dict]:
    """Run key -> line of a runs.jsonl."""
    with open(runs_file) as f:
        return {line["run"]: line for line in map(json.loads, f) if line}


def fmt(values: list) -> str:
    """Mean ± sample std to 4 and 2 significant digits (one value: the value; none: a dash)."""
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g}"


def sweep_groups(records: list[tuple[str, dict]]) -> dict[tuple[str, str], list[dict]]:
    """(config, eps) -> results records, from (run name, record) pairs named `<config>-eps<e>-seed<s>`."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for name, record in sorted(records):
        m = RUN_NAME.match(name)
        if m:
            groups.setdefault((m.group(1), m.group(2)), []).append(record)
    return groups


def table_lines(groups: dict[tuple[str, str], list[dict]], metrics=SPARSITY_METRICS,
                per_seed: str | None = None) -> list[str]:
    """A sweep's markdown table: one row per (config, eps), metrics as mean ± sample std over seeds."""
    keys = sorted(groups, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99,
                                         float("inf") if k[1] == "inf" else float(k[1])))
    lines = ["| config | target ε | achieved ε | seeds | epochs | z (noise mult.) | z_eff | " +
             " | ".join(label for _, label in metrics) + " | train s/run |" +
             (f" {per_seed} per seed (seed: value) |" if per_seed else ""),
             "|" + "---|" * (8 + len(metrics) + bool(per_seed))]
    for key in keys:
        runs = groups[key]
        eps = [r["epsilon"] for r in runs]
        eps_s = "∞" if all(e == "inf" for e in eps) else fmt([float(e) for e in eps])
        cells = [key[0], key[1], eps_s, str(len(runs)), str(runs[0]["epochs"]),
                 f"{runs[0]['noise_multiplier']:.4g}", f"{runs[0]['effective_noise_multiplier']:.4g}"]
        cells += [fmt([r["metrics"].get(m) for r in runs]) for m, _ in metrics]
        cells.append(fmt([r["metrics"].get("train_seconds") for r in runs]))
        if per_seed:
            values = sorted((r.get("seed"), r["metrics"].get(per_seed)) for r in runs)
            cells.append(", ".join(f"{s}: {v:.3f}" for s, v in values if isinstance(v, (int, float))))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


MODES = {"sparsity": (SPARSITY_METRICS, None), "hoyer": (SPARSITY_METRICS, "hoyer_sparsity"),
         "pinwheel": (PINWHEEL_METRICS, "cluster_purity")}


def table(runs_file: str, sweep: str, mode: str = "sparsity", configs: tuple[str, ...] = ()) -> list[str]:
    """The table of the runs `sweep/<config>-eps<e>-seed<s>` of a runs.jsonl (all configs, or those named)."""
    if mode not in MODES:
        raise SystemExit(f"aggregate: the table mode must be one of {', '.join(MODES)}, got {mode!r}")
    runs = read(runs_file)
    records = [(key[len(sweep) + 1:], line["record"]) for key, line in runs.items()
               if key.startswith(sweep + "/") and "record" in line]
    groups = {k: v for k, v in sweep_groups(records).items() if not configs or k[0] in configs}
    if not groups:
        raise SystemExit(f"aggregate: no run under {sweep!r} in {runs_file}" + (f" of {list(configs)}" if configs else ""))
    return table_lines(groups, *MODES[mode])


def seeds_row(runs_file: str, pattern: str, metric: str = "cluster_purity", threshold: float = 0.90) -> dict:
    """The runs whose key matches `pattern` (fnmatch), by seed: the metric per seed (3 decimals), its
    mean ± sample std, how many reach `threshold`, and the mean reconstruction MSE."""
    runs = sorted((line["record"]["seed"], line["record"]["metrics"]) for key, line in read(runs_file).items()
                  if fnmatch.fnmatchcase(key, pattern) and "record" in line)
    if not runs:
        raise SystemExit(f"aggregate: no run matches {pattern!r} in {runs_file}")
    values = [m[metric] for _, m in runs]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"pattern": pattern, "seeds": [s for s, _ in runs], "per_seed": ", ".join(f"{v:.3f}" for v in values),
            "mean_sd": f"{statistics.mean(values):.3f} ± {sd:.3f}",
            "reached": f"{sum(v >= threshold for v in values)}/{len(values)}",
            "mse": f"{statistics.mean(m['reconstruction_error'] for _, m in runs):.3f}"}


def main(argv: list[str]) -> None:
    if argv[:1] == ["show"] and len(argv) in (3, 4):
        line = show(argv[1], argv[2])
        if len(argv) == 4 and argv[3] not in line:
            raise SystemExit(f"aggregate: run {argv[2]!r} has no {argv[3]!r}; it has {sorted(line)}")
        print(json.dumps(line[argv[3]] if len(argv) == 4 else line, indent=1, sort_keys=True))
    elif argv[:1] == ["table"] and len(argv) >= 3:
        print("\n".join(table(argv[1], argv[2], *(argv[3:4] or ["sparsity"]), tuple(argv[4:]))))
    elif argv[:1] == ["seeds"] and len(argv) >= 3:
        print("| runs | seeds | per seed | mean ± sd | ≥ 0.90 | MSE |\n|---|---|---|---|---|---|")
        for pattern in argv[2:]:
            r = seeds_row(argv[1], pattern)
            seeds = f"{r['seeds'][0]}–{r['seeds'][-1]}" if len(r["seeds"]) > 1 else str(r["seeds"][0])
            print(f"| `{pattern}` | {seeds} | {r['per_seed']} | {r['mean_sd']} | {r['reached']} | {r['mse']} |")
    elif len(argv) >= 3:
        runs = collect(argv[1], argv[2:])
        write(argv[0], runs)
        print(f"{argv[0]}: {len(runs)} runs")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
