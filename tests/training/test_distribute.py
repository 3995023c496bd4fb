"""Every family on two logical CPU devices trains as one device would; strategies and the chief
(tfpriv/training/distribute.py; what is guaranteed: docs/privacy.md; the command line and a
two-worker cluster: tests/cli/test_strategy.py)."""
import contextlib
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_ROOT, script_env
from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.training import distribute


def test_every_family_on_two_devices_matches_one_device():
    """4 Poisson steps without noise, same seeds: the weights agree to float tolerance, and the
    ledger counts 4 global steps on both (not 8 on two replicas). Includes a `make_private` LSTM,
    whose per-example gradients take `map_examples`' one-example-after-another path, and one through the
    LSTM rule with noise on (noise added once: the same weights as one device). The DP-WGAN-GP critic
    clips and sums its per-example gradients in chunks (`per_example_chunk`), each replica its own."""
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests/training/scripts/two_devices.py")],
                          capture_output=True, text=True, timeout=900,
                          env=script_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2
    for family in ("vae", "filter_stage1", "dpwgan_gp", "dpgan", "lstm_make_private", "lstm_rule"):
        assert out[family]["steps"] == [4, 4], family
        assert out[family]["max_diff"] < 1e-5 * max(1.0, out[family]["scale"]), (family, out[family])
    assert out["lstm_make_private"]["rule"] == [None, None] and out["lstm_rule"]["rule"] == ["lstm", "lstm"]


def test_strategy_names_and_cluster_are_checked(monkeypatch):
    assert distribute.make_strategy("default") is tf.distribute.get_strategy()
    with pytest.raises(UsageError, match="^strategy: must be one of default, mirrored, multi_worker"):
        distribute.make_strategy("tpu")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(UsageError, match="^strategy: multi_worker needs the cluster in the TF_CONFIG"):
        distribute.make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(UsageError, match="^strategy: TF_CONFIG is not valid JSON"):
        distribute.make_strategy("multi_worker")
    with pytest.raises(UsageError, match="^num_cpu_devices: must be >= 1"):
        distribute.split_cpu(0)


def test_the_chief_writes_the_run_folder(tmp_path):
    with distribute.worker_dir(str(tmp_path), tf.distribute.get_strategy(), "checkpoints") as folder:
        assert folder == str(tmp_path)


def _fit_tiny_vae(out_dir, strategy=None) -> tuple[float, list]:
    """A seeded tiny PriVAE (termwise b = 2, MMD; noise on), 4 Poisson steps through `fit_private`."""
    from tfpriv.audit.sweep import build_vae
    from tfpriv.privacy.config import DPConfig
    from tfpriv.training.runner import fit_private, plan_privacy
    x = (np.random.default_rng(0).random((64, 12)) > 0.5).astype(np.float32)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        vae = build_vae("sparse", "mmd", (12,), latent_dim=2, hidden=(8,), seed=0)
        config = DPConfig(aggregation="termwise", num_partitions=2, l2_norm_clip=1.0, batch_clip=0.5,
                          noise_multiplier=1.0, seed=3)
        plan = plan_privacy(config, vae.term_spec(), len(x), 16, 1)
        fit = fit_private(vae, x, plan, keras.optimizers.SGD(0.5), str(out_dir), seed=3, verbose=0)
    return fit["epsilon"], vae.get_weights()


def test_mirrored_on_one_device_trains_exactly_as_no_strategy(tmp_path):
    """One replica under MirroredStrategy: the same weights (bit for bit) and epsilon as without a
    strategy. Before, preparing the model crashed outside the replica context
    (`DistributedVariable.handle is not available outside the replica context`)."""
    epsilon, weights = _fit_tiny_vae(tmp_path / "none")
    mirrored_epsilon, mirrored = _fit_tiny_vae(tmp_path / "mirrored", tf.distribute.MirroredStrategy(["/cpu:0"]))
    assert mirrored_epsilon == epsilon > 0
    for a, b in zip(weights, mirrored):
        np.testing.assert_array_equal(a, b)
