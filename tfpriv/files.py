"""The atomic JSON writer of every record a run writes (a leaf: imports nothing of tfpriv)."""
from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any


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
