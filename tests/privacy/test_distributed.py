"""Under MirroredStrategy the all-reduced gradient carries one noise of the documented std, the
numbers one device would draw."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def _run_script(name: str, stderr: list | None = None) -> dict:
    """Runs tests/privacy/scripts/NAME in a fresh process (2 logical CPUs) and returns its JSON line
    (its stderr lines appended to `stderr` if given)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests/privacy/scripts" / name)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if stderr is not None:
        stderr.extend(proc.stderr.splitlines())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_mirrored_strategy_adds_the_noise_once_for_the_global_batch():
    out = _run_script("mirrored_noise.py")
    assert out["replicas"] == 2
    assert out["steps"] == 1                      # one global step, not one per replica
    # 8200 coordinates: the sample std is within 4% of the truth with overwhelming probability;
    # noise added in full on each replica would give sqrt(2) times the std.
    assert out["noise_std"] == pytest.approx(out["expected"], rel=0.04)
    # The same noise as one device (drawn once from the shared stream, added by one replica).
    assert out["max_diff_to_one_device"] < 1e-4 * out["noise_scale"]


def test_modes_with_groups_of_examples_are_refused_on_two_replicas():
    """Keras splits a batch across replicas by position: batch clipping, micro's psi(batch) and
    multi-example partitions would be computed per replica (audit: sensitivity ratio 1.59 / 1.42)."""
    out = _run_script("mirrored_refusals.py")
    assert out["replicas"] == 2
    for refused in ("batch", "micro_with_batch_term", "termwise_b4"):
        assert out[refused].startswith("refused: DP engine:"), out[refused]
        assert "2 replicas" in out[refused]
    assert out["termwise_singleton"] == "accepted"
    assert out["termwise_no_batch_clip"] == "accepted"


def test_clipping_auto_names_its_paths_once_on_two_replicas():
    """Every replica verifies the model; the stderr line saying which path each layer takes is one."""
    stderr = []
    assert _run_script("mirrored_auto_line.py", stderr)["replicas"] == 2
    lines = [line for line in stderr if line.startswith("tfpriv: clipping auto:")]
    assert lines == ["tfpriv: clipping auto: fast for dense"]
