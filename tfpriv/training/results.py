"""`results.json`: the machine-readable record every run writes."""
from __future__ import annotations

import math
import os
from typing import Any, Mapping

from tfpriv.files import write_json
from tfpriv.run_folder import RESULTS_FILE

REQUIRED_KEYS = (
    "model", "dataset", "aggregation", "epsilon", "delta", "noise_multiplier",
    "effective_noise_multiplier", "sampling_rate", "steps", "epochs", "metrics",
)


def _jsonable(value: Any) -> Any:
    """Numpy/TF scalars to Python; non-finite floats to strings JSON can hold."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    return value


NOT_PRIVATE = "not private"


def guarantee(what: str, scope: str, epsilon: float | None = None, delta: float | None = None,
              caveat: str | None = None) -> dict:
    """One entry of results.json's `guarantees` (artefact -> entry): what the artefact is, its
    (epsilon, delta) with the adjacency and data they refer to (`scope`), or, with `epsilon=None`,
    "not private" and why (`scope`). `caveat`: a qualification of the epsilon (shuffled batches)."""
    entry = {"what": what, "epsilon": epsilon, "delta": delta if epsilon is not None else None,
             "guarantee": scope if epsilon is not None else f"{NOT_PRIVATE}: {scope}"}
    if caveat:
        entry["caveat"] = caveat
    return entry


def write_results(output_dir: str, results: Mapping[str, Any]) -> str:
    """Writes `output_dir/results.json` atomically; refuses a record missing a required key."""
    missing = [k for k in REQUIRED_KEYS if k not in results]
    if missing:
        raise KeyError(f"results.json is missing required keys: {missing}")
    return write_json(os.path.join(output_dir, RESULTS_FILE), _jsonable(results), sort_keys=True, default=None)
