"""Epsilon of every committed private result under the RDP and the PLD accountant (same events).

    python experiments/accounting/pld_savings.py experiments > experiments/accounting/pld_savings.json

Reads each results.json-like record under the folder that records a private run (sampling_rate,
effective_noise_multiplier, steps, delta): JSON files, and the records on each line of a study's
runs.jsonl (named "<runs.jsonl>: <run key>"); recomputes its epsilon with both accountants and
prints JSON rows sorted by file. The committed pld_savings.json predates the aggregation into
runs.jsonl: its docs/results/<study>/<key>.json files are the lines <key> of experiments/<study>/runs.jsonl
(docs/results/privae/<key> of experiments/privae/runs.jsonl).
"""
import glob
import json
import os
import sys

from tfpriv.privacy.accounting import get_accountant


def records(folder: str):
    """(name, record) for every JSON file and every record on a runs.jsonl line under `folder`."""
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)):
        try:
            with open(path) as f:
                yield path, json.load(f)
        except (OSError, ValueError):
            continue
    for path in sorted(glob.glob(os.path.join(folder, "**", "runs.jsonl"), recursive=True)):
        with open(path) as f:
            for line in map(json.loads, f):
                for field in ("record", "results"):
                    if field in line:
                        yield f"{path}: {line['run']}", line[field]


def rows(folder: str):
    for path, record in sorted(records(folder), key=lambda item: item[0]):
        if not isinstance(record, dict):
            continue
        privacy = record.get("privacy") if isinstance(record.get("privacy"), dict) else record
        privacy = privacy.get("privacy", privacy) if isinstance(privacy.get("privacy"), dict) else privacy
        q, z = privacy.get("sampling_rate"), privacy.get("effective_noise_multiplier")
        steps, delta = privacy.get("steps", record.get("steps")), privacy.get("delta", record.get("delta"))
        if "aggregation" not in privacy or not all(isinstance(v, (int, float)) for v in (q, z, steps, delta)) \
                or z <= 0 or steps <= 0:
            continue  # not the record of a private run
        rdp = get_accountant("rdp").epsilon([(q, z, int(steps))], delta)
        pld = get_accountant("pld").epsilon([(q, z, int(steps))], delta)
        yield {"file": path, "sampling_rate": q, "effective_noise_multiplier": z, "steps": int(steps),
               "delta": delta, "epsilon_reported": record.get("epsilon", privacy.get("epsilon")),
               "epsilon_rdp": rdp, "epsilon_pld": pld, "saving": 1 - pld / rdp}


if __name__ == "__main__":
    print(json.dumps(list(rows(sys.argv[1] if len(sys.argv) > 1 else "experiments")), indent=1))
