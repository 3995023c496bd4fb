"""`run_audit(output_dir, ...)`: the audit as one call that writes `output_dir/audit.json`.

Used by `train.py --audit` (tfpriv/cli/audit.py) and by users: audit the configuration being trained
(`model`, `config`, a batch `x`), the built-in sweep, and/or canary audits, in one record:

    {"max_sensitivity_ratio": ..., "passed": ..., "tolerance": 1e-4,
     "configurations": [{"case": ..., "max_sensitivity_ratio": ..., ...}, ...],
     "canaries": [{"family": ..., "private": ..., "reported_epsilon": ..., "epsilon_lower_bound": ...}, ...]}

`passed`: every audited configuration has ratio <= 1 + tolerance and every private canary
audit has lower bound <= reported epsilon.
"""
from __future__ import annotations

import math
import os
import time
from typing import Sequence

from tfpriv.audit.sensitivity import TOLERANCE, audit_sensitivity, passes
from tfpriv.audit.sweep import Case, default_cases, known_seed_cases, screening_cases, sweep
from tfpriv.privacy.config import DPConfig
from tfpriv.run_folder import AUDIT_FILE


def quick_cases() -> list[Case]:
    """A representative subset of the sweep: every mode and divergence once, the GAN critic, the
    fixed-batch insertion, the screening cases, the known-seed coupling cases."""
    return [
        Case("vae", "termwise", 2, "sparse", "mmd"),
        Case("vae", "termwise", 0, "normal", "kl_pq"),
        Case("vae", "micro", None, "sparse", "kl_pq"),
        Case("vae", "batch", None, "normal", "mmd"),
        Case("vae", "termwise", 4, "normal", "none"),
        Case("dpwgan_gp", "micro"),
        Case("make_private", "micro"),
        Case("make_private", "micro", fixed_batches=True),
        *screening_cases(),
        *known_seed_cases(),
    ]


def quick_canaries(seed: int = 0) -> list[dict]:
    """One-run gradient-canary audits of make_private, private (epsilon 2) and non-private."""
    from tfpriv.audit.canary import classifier_canary_run
    kwargs = dict(m=400, epochs=5, n_real=400, seed=seed)
    return [classifier_canary_run(private=True, **kwargs), classifier_canary_run(private=False, **kwargs)]


def run_audit(output_dir: str, model=None, config: DPConfig | None = None, x=None, *,
              sweep_cases: str | Sequence[Case] | None = None, canaries: str | None = None,
              seed: int = 0, tolerance: float = TOLERANCE, log=None, extra: dict | None = None,
              **audit_kwargs) -> dict:
    """Runs the requested audits and writes `output_dir/audit.json`; returns the record.

    Args:
      model, config, x: audit this configuration on the batch x (`audit_sensitivity`).
      sweep_cases: "quick" (`quick_cases`), "full" (`default_cases`), or a list of `Case`s.
      canaries: "quick" (`quick_canaries`) or None.
      extra: more keys for the record (e.g. the job's settings).
      audit_kwargs: passed to `audit_sensitivity` for the given model (e.g. coupling, scales).
    """
    from tfpriv.files import write_json
    start = time.time()
    configurations = []
    if model is not None:
        if config is None or x is None:
            raise ValueError("run_audit: auditing a model needs its config and a batch x")
        result = audit_sensitivity(model, config, x, seed=seed, **audit_kwargs)
        configurations.append({"case": getattr(model, "name", type(model).__name__), **result,
                               "passed": passes(result, tolerance)})
    if sweep_cases is not None:
        cases = {"quick": quick_cases, "full": default_cases}[sweep_cases]() if isinstance(sweep_cases, str) \
            else list(sweep_cases)
        configurations += sweep(cases, seed=seed, log=log)["cases"]
    canary_results = []
    if canaries == "quick":
        canary_results = quick_canaries(seed)
    elif canaries is not None:
        raise ValueError(f"canaries: must be 'quick' or None, got {canaries!r}")
    for r in canary_results:
        r.pop("grid", None)
        r["within_reported"] = bool(r["epsilon_lower_bound"] <= r["reported_epsilon"])
    ratios = [c["max_sensitivity_ratio"] for c in configurations]
    record = {
        **(extra or {}),
        "max_sensitivity_ratio": (max(ratios) if ratios and not any(math.isnan(v) for v in ratios)
                                  else (math.nan if ratios else None)),
        "passed": all(c["passed"] for c in configurations) and all(
            r["within_reported"] for r in canary_results if r["private"]),
        "tolerance": tolerance,
        "configurations": configurations,
        "canaries": canary_results,
        "seconds": round(time.time() - start, 1),
    }
    write_json(os.path.join(output_dir, AUDIT_FILE), record)
    return record
