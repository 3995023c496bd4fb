"""Under MirroredStrategy the all-reduced gradient carries one noise of the documented std, the
numbers one device would draw."""
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, script_env


@pytest.fixture(scope="module")
def mirrored() -> dict:
    """tests/privacy/scripts/mirrored.py run once in a fresh process (2 logical CPUs): its JSON line,
    with its stderr lines under "stderr"."""
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests/privacy/scripts/mirrored.py")],
                          capture_output=True, text=True, timeout=600, env=script_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr.splitlines()}


def test_mirrored_strategy_adds_the_noise_once_for_the_global_batch(mirrored):
    out = mirrored["noise"]
    assert out["replicas"] == 2
    assert out["steps"] == 1                      # one global step, not one per replica
    # 8200 coordinates: the sample std is within 4% of the truth with overwhelming probability;
    # noise added in full on each replica would give sqrt(2) times the std.
    assert out["noise_std"] == pytest.approx(out["expected"], rel=0.04)
    # The same noise as one device (drawn once from the shared stream, added by one replica).
    assert out["max_diff_to_one_device"] < 1e-4 * out["noise_scale"]


def test_modes_with_groups_of_examples_are_refused_on_two_replicas(mirrored):
    """Keras splits a batch across replicas by position: batch clipping, micro's psi(batch) and
    multi-example partitions would be computed per replica (audit: sensitivity ratio 1.59 / 1.42)."""
    out = mirrored["refusals"]
    assert out["replicas"] == 2
    for refused in ("batch", "micro_with_batch_term", "termwise_b4"):
        assert out[refused].startswith("refused: DP engine:"), out[refused]
        assert "2 replicas" in out[refused]
    assert out["termwise_singleton"] == "accepted"
    assert out["termwise_no_batch_clip"] == "accepted"


def test_clipping_auto_names_its_paths_once_on_two_replicas(mirrored):
    """Every replica verifies the model; the stderr line saying which path each layer takes is one."""
    assert mirrored["auto"]["replicas"] == 2
    lines = [line for line in mirrored["stderr"] if line.startswith("tfpriv: clipping auto:")]
    # Each model of the script prints its own line (its layers have distinct names), once.
    assert lines.count("tfpriv: clipping auto: fast for probe") == 1
    assert len(lines) == len(set(lines)) >= 2
