"""One JSONL per study instead of one file per run: every run's records, whole, on one line.

    python experiments/tools/aggregate.py OUT.jsonl ROOT PATH [PATH ...]   # PATHs relative to ROOT
    python experiments/tools/aggregate.py show RUNS.jsonl KEY [FIELD]       # one run's line (or one record)

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
Plain Python on purpose: no TensorFlow, so it runs anywhere.
"""
from __future__ import annotations

import json
import os
import sys


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


def main(argv: list[str]) -> None:
    if argv[:1] == ["show"] and len(argv) in (3, 4):
        line = show(argv[1], argv[2])
        if len(argv) == 4 and argv[3] not in line:
            raise SystemExit(f"aggregate: run {argv[2]!r} has no {argv[3]!r}; it has {sorted(line)}")
        print(json.dumps(line[argv[3]] if len(argv) == 4 else line, indent=1, sort_keys=True))
    elif len(argv) >= 3:
        runs = collect(argv[1], argv[2:])
        write(argv[0], runs)
        print(f"{argv[0]}: {len(runs)} runs")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
