"""`results.json`: the machine-readable record every run writes, and the atomic JSON writer of every record."""
from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
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


def write_json(path: str, record: Any, **dump_options) -> str:
    """Writes `record` as JSON to `path` atomically: a reader (or a restart after a crash) sees the
    old file or the complete new one, never a partial file.

    The JSON goes to a uniquely named temporary file in the same folder, is flushed to disk and
    renamed over `path`; if anything fails (a value JSON cannot hold, a full disk) the temporary
    file is removed and `path` is unchanged. `dump_options` go to `json.dump` (default: indent=2,
    non-JSON values as strings).
    """
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    # unique per writer (process, call), created with the usual permissions (umask), never reused
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "x") as f:
            json.dump(record, f, **{"indent": 2, "default": str, **dump_options})
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_results(output_dir: str, results: Mapping[str, Any]) -> str:
    """Writes `output_dir/results.json` atomically; refuses a record missing a required key."""
    missing = [k for k in REQUIRED_KEYS if k not in results]
    if missing:
        raise KeyError(f"results.json is missing required keys: {missing}")
    return write_json(os.path.join(output_dir, "results.json"), _jsonable(results), sort_keys=True, default=None)
