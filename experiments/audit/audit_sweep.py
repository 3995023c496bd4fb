"""The audit behind docs/audit.md: sensitivity sweep, leaky controls, coupling comparison, canaries.

    python experiments/audit/audit_sweep.py                       # everything (about 10 min of CPU)
    python experiments/audit/audit_sweep.py --parts=sensitivity   # one part: sensitivity|controls|coupling|canaries

Writes under experiments/audit/ (or --out):
  audit.json          run_audit(sweep_cases="full"): max_sensitivity_ratio per configuration
  controls.json       leaky configurations the audit must flag (ratio > 1)
  coupling_stream.json the same audit with the naive generator reset instead of the coupling
  canaries.json       one-run and many-run epsilon lower bounds vs the reported epsilon
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

from experiments.audit.canaries import gan_canary_run, many_run_audit, vae_canary_run  # noqa: E402
from tfpriv.audit.canary import classifier_canary_run  # noqa: E402
from tfpriv.audit.run import run_audit  # noqa: E402
from tfpriv.audit.sweep import Case, run_case, with_declared_sensitivity  # noqa: E402
from tfpriv.training.runner import write_json  # noqa: E402

PARTS = ("sensitivity", "controls", "coupling", "canaries")


def sensitivity(out: str) -> None:
    record = run_audit(out, sweep_cases="full", log=print)
    print(f"max_sensitivity_ratio over {len(record['configurations'])} configurations: "
          f"{record['max_sensitivity_ratio']:.6f} (passed: {record['passed']})")


def controls(out: str) -> None:
    runs = []
    for div in ("mmd", "kl_pq"):
        runs.append(("micro with a batch-wise term, noise set for C (declared 1 instead of 2*B_max - 1)",
                     Case("vae", "micro", None, "sparse", div), 1.0))
    for b in (2, 4):
        runs.append(("termwise, multi-example partitions accounted as moving by C2 (declared sqrt 2 instead of sqrt 5)",
                     Case("vae", "termwise", b, "sparse", "mmd"), math.sqrt(2)))
    results = []
    for what, case, declared in runs:
        r = run_case(case, config_override=lambda c, d=declared: with_declared_sensitivity(c, d))
        r.update(control=what, flagged=r["max_sensitivity_ratio"] > 1.0)
        print(f"{case.name:40s} declared {declared:.4f}: ratio {r['max_sensitivity_ratio']:.4f} flagged {r['flagged']}")
        results.append(r)
    write_json(os.path.join(out, "controls.json"), {"controls": results})


def coupling(out: str) -> None:
    cases = [Case("vae", mode, b, "sparse", div) for div in ("mmd", "kl_pq")
             for mode, b in (("termwise", 2), ("termwise", 4), ("termwise", 0), ("micro", None))]
    results = []
    for case in cases:
        r = run_case(case, coupling="stream")
        print(f"{case.name:40s} stream reset: ratio {r['max_sensitivity_ratio']:.4f}")
        results.append(r)
    write_json(os.path.join(out, "coupling_stream.json"), {"coupling": "stream", "cases": results})


def canaries(out: str) -> None:
    results = []

    def add(r):
        r.pop("grid", None)
        r["within_reported"] = bool(r["epsilon_lower_bound"] <= r["reported_epsilon"])
        print(f"{r['family'][:45]:45s} {r['canary'][:34]:34s} private={r['private']!s:5s} "
              f"reported {r['reported_epsilon']:.3f} lower bound {r['epsilon_lower_bound']:.3f} ({r['seconds']}s)")
        results.append(r)

    for private, eps in ((True, 2.0), (True, 8.0), (False, None)):
        add(classifier_canary_run(m=1000, private=private, target_epsilon=eps or 2.0, epochs=10, kind="gradient"))
    for private in (True, False):
        add(classifier_canary_run(m=1000, private=private, epochs=10, kind="input"))
    for private in (True, False):
        add(vae_canary_run(m=500, private=private, epochs=20, kind="marker"))
    for private in (True, False):
        add(vae_canary_run(m=500, private=private, epochs=300, n_real=300, kind="input"))
    for private in (True, False):
        add(gan_canary_run(m=200, private=private, epochs=10))
    for private in (True, False):
        add(many_run_audit(runs=100, private=private, epochs=5))
    write_json(os.path.join(out, "canaries.json"), {"audits": results})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("experiments", "audit"))
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for part in args.parts.split(","):
        start = time.time()
        {"sensitivity": sensitivity, "controls": controls, "coupling": coupling, "canaries": canaries}[part](args.out)
        print(f"[{part}: {time.time() - start:.0f}s]")


if __name__ == "__main__":
    main()
