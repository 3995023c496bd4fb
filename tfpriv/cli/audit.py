"""`train.py --audit`: the sensitivity audit of the configured job's model instead of training it.

The job builds its model, data and privacy plan exactly as a training run would (`TrainingRun.setup`),
then `tfpriv.audit.run_audit` compares the un-noised clipped sums on `--audit_batch_size` training
examples with those of every add-or-remove neighbour (each example removed; crafted and
gradient-ascent-optimised examples added) and divides the largest whitened change by the
sensitivity the accountant uses. The result, `max_sensitivity_ratio`, must be <= 1; it is printed
and written to OUTPUT_DIR/audit.json. The model is audited at its (seeded) initialisation: the
bound must hold for every value of the weights, and nothing is trained. With no other flags
(`python train.py --audit`) the main job's model is audited. Method: docs/audit.md.
"""
from __future__ import annotations

import numpy as np

from tfpriv.errors import UsageError
from tfpriv.cli.flags import DEFINE_boolean, DEFINE_integer  # on tfpriv's FLAGS, not absl's

DEFINE_boolean("audit", False, "Audit the sensitivity of the configured model and aggregation instead of training: "
               "writes OUTPUT_DIR/audit.json with max_sensitivity_ratio (must be <= 1; exit code 1 if not). "
               "Alone, audits the main job's model.")
DEFINE_integer("audit_batch_size", 8, "--audit: training examples in the audited batch (each is removed once; "
               "crafted examples are added to it).")


def first_rows(arrays, n: int):
    """The first `n` examples of an array or a tuple of arrays."""
    if isinstance(arrays, (tuple, list)):
        return tuple(np.asarray(a[:n]) for a in arrays)
    return np.asarray(arrays[:n])


def audit(job, settings, output_dir: str, batch_size: int) -> dict:
    """Builds the job's model and privacy plan, audits it on `batch_size` examples, writes audit.json."""
    from tfpriv.audit import run_audit
    if job.training_run is None:
        raise UsageError(f"--audit: not available for --model={settings.model}")
    run = job.training_run(settings, output_dir)
    plan = run.setup()
    if not plan.config.private:
        raise UsageError("--aggregation: --audit needs private training (micro, batch or termwise); "
                         f"--model={settings.model} is configured with aggregation none")
    n = len(run.built.arrays[0] if isinstance(run.built.arrays, (tuple, list)) else run.built.arrays)
    if not 2 <= batch_size <= n:
        raise UsageError(f"--audit_batch_size: must be between 2 and the dataset size {n}, got {batch_size}")
    model = run.built.model
    job_record = {"model": settings.model, "dataset": settings.dataset, "settings": settings.record(),
                  "privacy_plan": plan.summary()}
    return run_audit(output_dir, model, plan.config, first_rows(run.built.arrays, batch_size),
                     seed=settings.seed or 0, extra=job_record, **model.audit_options())


def report(output_dir: str, record: dict) -> str:
    """The line `train.py --audit` prints."""
    config = record["configurations"][0]
    worst = config["worst_neighbour"]
    verdict = "within the declared sensitivity" if record["passed"] else "EXCEEDS the declared sensitivity"
    return (f"max_sensitivity_ratio = {record['max_sensitivity_ratio']:.6f} ({verdict} "
            f"{config['declared_sensitivity']:.4g}; {config['neighbours']} neighbours, worst: {worst['kind']}, "
            f"{worst['detail']}). Audit: {output_dir}/audit.json")
