"""Evidence that the printed epsilon holds: a sensitivity audit and empirical epsilon lower bounds.

- `sensitivity.audit_sensitivity`: the largest whitened change of the clipped sums between a
  batch and its add-or-remove neighbours, divided by the sensitivity the accountant uses
  (`max_sensitivity_ratio`, must be <= 1); `sweep.sweep` runs it over model x mode x divergence x
  partitioning; `coupling` holds the loss randomness fixed between a batch and its neighbour.
- `bounds`: the one-run (Steinke, Nasr & Jagielski 2023) and many-run (Clopper-Pearson)
  epsilon lower bounds; `canary`: planted canaries in real private training runs.
- `run.run_audit(output_dir, ...)`: any of the above into `output_dir/audit.json`.

Method, settings and results: docs/audit.md.
"""
from tfpriv.audit.bounds import (many_run_epsilon_lower_bound, one_run_audit, one_run_epsilon_lower_bound,
                                 one_run_p_value)
from tfpriv.audit.run import run_audit
from tfpriv.audit.sensitivity import audit_sensitivity, passes
from tfpriv.audit.sweep import Case, DeclaredSensitivity, sweep, with_declared_sensitivity

__all__ = ["audit_sensitivity", "passes", "sweep", "Case", "DeclaredSensitivity", "with_declared_sensitivity",
           "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_audit", "many_run_epsilon_lower_bound",
           "run_audit"]
