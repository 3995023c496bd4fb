"""Entry point of `train.py`: parse flags, dispatch to a job, turn bad input into exit code 2.

Bad input (a flag, a file, a shape) prints one line `error: <what> <why>` on stderr and
exits with code 2; an output directory this run created is removed, so nothing
half-written is left behind.
"""
from __future__ import annotations

import datetime
import importlib
import math
import os
import shutil
import sys

from absl import app, flags

from tfpriv.cli import flags as common_flags  # noqa: F401  (defines the shared flags)
from tfpriv.errors import UsageError

FLAGS = flags.FLAGS

# Jobs by --model; each module defines its own flags at import and has run(output_dir[, model]).
JOB_MODULES = {
    "privae": "tfpriv.cli.privae_job",
    "vae": "tfpriv.cli.privae_job",
    "filter": "tfpriv.filter.cli",
    "dpwgan_gp": "tfpriv.gan.cli",
    "dpgan": "tfpriv.gan.cli",
}
for _module in ("tfpriv.gan.cli", "tfpriv.filter.cli", "tfpriv.cli.privae_job"):
    try:
        importlib.import_module(_module)
    except ModuleNotFoundError as exc:  # a job package that is not part of this build
        if exc.name is None or not _module.startswith(exc.name):
            raise


def _default_output_dir() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{FLAGS.model}-{FLAGS.dataset.replace(':', '_')}-{stamp}")


def _run_job(output_dir: str) -> dict:
    module_name = JOB_MODULES.get(FLAGS.model)
    if module_name is None:
        raise UsageError(f"--model: must be one of {', '.join(JOB_MODULES)}, got {FLAGS.model!r}")
    if FLAGS.mode not in common_flags.MODES:
        raise UsageError(f"--mode: must be one of {', '.join(common_flags.MODES)}, got {FLAGS.mode!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise UsageError(f"--model: {FLAGS.model} is not available in this build") from None
    if FLAGS.mode == "sample":
        if not FLAGS.output_dir:
            raise UsageError("--output_dir: --mode=sample needs the folder of a trained run")
        return module.sample(output_dir)
    if FLAGS.model in ("dpwgan_gp", "dpgan"):
        return module.run(output_dir, FLAGS.model)
    return module.run(output_dir)


def _report(results: dict, output_dir: str) -> None:
    eps = results.get("epsilon")
    if FLAGS.mode == "sample":
        print(f"samples written to {output_dir}")
        return
    if eps is None or (isinstance(eps, float) and math.isinf(eps)):
        print(f"non-private run: no privacy guarantee (epsilon = inf). Results: {output_dir}/results.json")
    else:
        print(f"epsilon = {eps:.4g} at delta = {results.get('delta'):.3g} "
              f"({results.get('aggregation')}, effective noise multiplier "
              f"{results.get('effective_noise_multiplier', float('nan')):.4g}, {results.get('steps')} steps). "
              f"Results: {output_dir}/results.json")
    metrics = results.get("metrics", {})
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not k.endswith("seconds")}
    if shown:
        print("metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items())))


def main(argv) -> None:
    if len(argv) > 1:
        _fail(f"unexpected positional arguments: {' '.join(argv[1:])}", None, True)
    output_dir = FLAGS.output_dir or _default_output_dir()
    existed = os.path.exists(output_dir)
    try:
        results = _run_job(output_dir)
    except UsageError as exc:
        _fail(str(exc), output_dir, existed)
    _report(results, output_dir)


def _fail(message: str, output_dir: str | None, existed: bool) -> None:
    if output_dir and not existed:
        shutil.rmtree(output_dir, ignore_errors=True)
    print(f"error: {message.splitlines()[0] if message else 'invalid input'}", file=sys.stderr)
    sys.exit(2)


def _parse_flags(argv):
    try:
        return FLAGS(argv)
    except flags.Error as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)


def entry_point() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    app.run(main, flags_parser=_parse_flags)
