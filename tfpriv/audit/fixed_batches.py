"""The "fixed" sampling scheme's bound, audited: one record inserted into a positionally batched data set.

docs/privacy.md ("Sampling schemes"): on batches tfpriv did not sample, a record added to the data set
can shift every later batch boundary, so a batch changes by one record in and one out, and the
accountant charges each step a Gaussian at half the effective noise multiplier (sensitivity 2Δ, Δ the
add-or-remove sensitivity). This audit takes n rows, inserts a crafted record at a position, batches
both data sets positionally (`Dataset.batch`: rows [kB, (k+1)B)), and measures for every batch index the
whitened change of the engine's un-noised clipped sums (`SensitivityAuditor.blocks`). The ratio of the
largest change to 2Δ must be at most 1 (else the fixed scheme's ε does not hold); its ratio to Δ shows
whether the factor 2 is needed (above 1 when a shifted batch loses one record and gains another).
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfpriv.audit.sensitivity import DEFAULT_SCALES, TOLERANCE, SensitivityAuditor, _batch_size, _rows
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import BatchLayout


def _insert(inputs, row, position: int):
    """`inputs` with the one-row `row` inserted before row `position`."""
    return tf.nest.map_structure(
        lambda t, r: tf.concat([t[:position], tf.cast(r, t.dtype), t[position:]], axis=0), inputs, row)


def audit_fixed_batches(model, config: DPConfig, x, batch_size: int, positions=(0,),
                        scales=DEFAULT_SCALES, seed: int = 0) -> dict:
    """Audits the fixed scheme's sensitivity 2Δ for `model` under `config` on the rows `x` (as `fit`
    passes a batch), batched positionally by `batch_size` with a crafted record inserted at each of
    `positions`. Returns `max_sensitivity_ratio` (largest whitened change / 2Δ: at most 1),
    `max_change_over_add_remove` (the same over Δ), the worst insertion and the settings."""
    if config.aggregation not in ("micro", "batch") or model.term_spec().has_batch_terms:
        raise ConfigError("config: the fixed-batch audit covers sample-wise losses (micro or batch, no batch-wise "
                          f"term), got {config.aggregation!r}")
    data = tf.nest.map_structure(tf.convert_to_tensor, x)
    inputs = model.private_inputs(data)
    n = _batch_size(inputs)
    if not 1 <= batch_size < n:
        raise ConfigError(f"batch_size: must be between 1 and the {n} rows minus one, got {batch_size}")
    model.loss_terms(inputs, BatchLayout.single(n), training=False)  # builds variables
    first = _rows(inputs, range(batch_size))
    auditor = SensitivityAuditor(model, config.replace(expected_batch_size=float(batch_size)), first, seed=seed,
                                 coupling="none")
    declared = auditor.declared
    worst = {"change": 0.0}
    with auditor.coupling.installed():
        for kind, detail, row in auditor.crafted(scales):
            for position in positions:
                neighbour = _insert(inputs, row, position)
                for k in range(math.ceil(n / batch_size)):
                    idx = range(k * batch_size, min((k + 1) * batch_size, n))
                    idx_neighbour = range(k * batch_size, min((k + 1) * batch_size, n + 1))
                    a, b = _rows(inputs, idx), _rows(neighbour, idx_neighbour)
                    change = float(auditor.whitened(auditor.blocks(a, np.zeros(len(idx), np.int64)),
                                                    auditor.blocks(b, np.zeros(len(idx_neighbour), np.int64))))
                    if change > worst["change"]:
                        worst = {"change": change, "kind": kind, "detail": detail, "position": position, "batch": k}
    return {
        "max_sensitivity_ratio": worst["change"] / (2 * declared),
        "max_change_over_add_remove": worst["change"] / declared,
        "declared_sensitivity": 2 * declared,
        "passes": worst["change"] / (2 * declared) <= 1 + TOLERANCE,
        "worst": worst, "rows": n, "batch_size": batch_size, "positions": list(positions),
    }
