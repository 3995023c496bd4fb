"""`results.json`: the machine-readable record every run writes."""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

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


def write_results(output_dir: str, results: Mapping[str, Any]) -> str:
    """Writes `output_dir/results.json` atomically; refuses a record missing a required key."""
    missing = [k for k in REQUIRED_KEYS if k not in results]
    if missing:
        raise KeyError(f"results.json is missing required keys: {missing}")
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "results.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_jsonable(results), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path
