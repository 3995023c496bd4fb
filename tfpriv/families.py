"""The model families of train.py, `tfpriv.load`, the SavedModel export and `tfpriv.synthesizer`:
one registry (`tfpriv.jobs.job.register`), keyed by the `--model` name that results.json records.

Built in: privae (= vae), dpwgan_gp and dpgan, filter. Each family package registers its `Family`
(its job, the loader of its trained model, its serving signatures) when imported; the built-in
packages are imported on the first lookup, so `import tfpriv` stays cheap. A new family is its
package plus one line: `register(Family(JOB, load, serving))` in it, and, to be built in, its
import in `load_built_ins` (docs/ARCHITECTURE.md, "How to add a model family").

Example:
    >>> from tfpriv import families
    >>> families.family("vae").names
    ('privae', 'vae')
"""
from __future__ import annotations

import json
import os

from tfpriv.errors import UsageError
from tfpriv.jobs import job as _job
from tfpriv.jobs.job import Family, register, registered
from tfpriv.run_folder import RESULTS_FILE

__all__ = ["Family", "families", "family", "family_of_run", "load_built_ins", "register"]


def load_built_ins() -> None:
    """Imports the built-in family packages; each registers its `Family` (one line per family)."""
    from tfpriv.privae import job as _privae  # noqa: F401  privae (= vae)
    from tfpriv.gan import job as _gan  # noqa: F401  dpwgan_gp, dpgan
    from tfpriv.filter import job as _filter  # noqa: F401  filter


def families() -> dict[str, Family]:
    """Every family by `--model` name: the built-in ones, then the ones registered by other code."""
    load_built_ins()
    return registered()


def family(model: str) -> Family:
    """The family of `--model` name `model`."""
    load_built_ins()
    return _job.FAMILIES.get(model)  # the module's registry at call time (a test may swap it)


def family_of_run(run_dir: str) -> Family:
    """The family of the run in `run_dir`: the one named by the `model` of its results.json."""
    if not os.path.isdir(run_dir):
        raise UsageError(f"run_dir: {run_dir} is not a directory")
    path = os.path.join(run_dir, RESULTS_FILE)
    if not os.path.isfile(path):
        raise UsageError(f"run_dir: {run_dir} holds no trained model (no {RESULTS_FILE}: a run writes it when its "
                         "training and export are done)")
    try:
        with open(path) as f:
            model = json.load(f).get("model")
    except (OSError, ValueError, AttributeError) as exc:
        raise UsageError(f"run_dir: cannot read the model of {path} ({exc})") from None
    known = families()
    if model not in known:
        raise UsageError(f"run_dir: {path} names model {model!r}, which is not a registered family "
                         f"({', '.join(known)})")
    return known[model]
