"""Training on several devices or machines: a run's `tf.distribute` strategy and who writes.

`make_strategy(name)`: "default" (one device), "mirrored" (every local device: the GPUs, else
the logical CPU devices made by `split_cpu`) or "multi_worker" (`MultiWorkerMirroredStrategy`
over the cluster in `TF_CONFIG`). `use_strategy(strategy)` makes it the strategy under which
the training pipeline builds, compiles and fits its model (`training_scope()`), while the
rest of a run (evaluation) is left outside it.

What the mechanism guarantees on R replicas is in docs/privacy.md ("Multiple devices"): the
batch of global step s is drawn from (seed, s) over the whole dataset on every worker and split
across the replicas (`tfpriv.data.sampling`), clipped sums are per replica, one noise is added
for the global batch (`DPGradientEngine._add_noise`), the ledger counts the global step once.

Only the chief writes a run folder (the usual Keras multi-worker pattern): another worker runs
the same program in a temporary copy of the folder's checkpoints (`worker_dir`), so every worker
resumes from the same state, and the copy is removed afterwards.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Iterator

import tensorflow as tf

from tfpriv.errors import UsageError

STRATEGIES = ("default", "mirrored", "multi_worker")

_current: list[tf.distribute.Strategy] = []


def split_cpu(num_devices: int) -> None:
    """Splits the host CPU into `num_devices` logical devices (for `mirrored` on a machine
    without GPUs, e.g. to test it). Must run before TensorFlow initialises its devices."""
    if num_devices < 1:
        raise UsageError(f"num_cpu_devices: must be >= 1, got {num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
    except RuntimeError as exc:  # TensorFlow already initialised its devices
        raise UsageError(f"num_cpu_devices: cannot split the CPU after TensorFlow started ({exc})") from None


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The strategy called `name` (one of STRATEGIES). Create it before any other TensorFlow work."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        cluster = _tf_config().get("cluster", {})
        if not cluster:
            raise UsageError("strategy: multi_worker needs the cluster in the TF_CONFIG environment variable "
                             "(README: More than one device or machine)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise UsageError(f"strategy: must be one of {', '.join(STRATEGIES)}, got {name!r}")


def _tf_config() -> dict:
    raw = os.environ.get("TF_CONFIG", "")
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise UsageError(f"strategy: TF_CONFIG is not valid JSON: {raw[:80]!r}") from None


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's results, checkpoints and exports."""
    return bool(strategy.extended.should_checkpoint)


@contextlib.contextmanager
def use_strategy(strategy: tf.distribute.Strategy) -> Iterator[tf.distribute.Strategy]:
    """Within the block, `training_scope()` is `strategy.scope()`."""
    _current.append(strategy)
    try:
        yield strategy
    finally:
        _current.pop()


def training_scope():
    """The scope the training pipeline builds, compiles and fits its model in (see `use_strategy`)."""
    return _current[-1].scope() if _current else contextlib.nullcontext()


@contextlib.contextmanager
def worker_dir(output_dir: str, strategy: tf.distribute.Strategy, checkpoints: str) -> Iterator[str]:
    """The folder this process writes: `output_dir` on the chief; on another worker a temporary
    folder holding a copy of `output_dir/checkpoints` (the subfolder `checkpoints`), removed on exit."""
    if is_chief(strategy):
        yield output_dir
        return
    tmp = tempfile.mkdtemp(prefix="tfpriv-worker-")
    try:
        source = os.path.join(output_dir, checkpoints)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(tmp, checkpoints))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
