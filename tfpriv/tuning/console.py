"""Everything the process prints, sent to a file for a while: a tuning job's trials print to `private/`.

A trial's console output (Keras's progress bars with each epoch's ε, keras-tuner's "Search: Running
Trial #n" tables of every trial's values and score, TensorFlow's log lines) tells how many trials
ran and how each scored, which random search's ε does not cover. `console_to` redirects both
Python's `sys.stdout`/`sys.stderr` and the file descriptors 1 and 2 (what C++ and any handler
holding the original streams write), and restores them when the block ends, however it ends.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator


@contextlib.contextmanager
def console_to(path: str) -> Iterator[None]:
    """Appends everything written to stdout and stderr inside the block to the file `path`."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with open(path, "a") as log:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            for stream in (sys.stdout, sys.stderr, log):
                stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
