"""`train.py` as users run it: bad input is one line and exit code 2, runs write results.json."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, shared_data_dir

TRAIN = str(REPO_ROOT / "train.py")


def run(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO_ROOT, env=env)


@pytest.mark.parametrize("args,flag", [
    (["--l2_norm_clip=0"], "--l2_norm_clip"),
    (["--noise_multiplier=-1"], "--noise_multiplier"),
    (["--delta=0.5"], "--delta"),
    (["--num_partitions=100", "--batch_size=64"], "--num_partitions"),
    (["--model=transformer"], "--model"),
    (["--dataset=cifar"], "--dataset"),
    (["--dataset=mnist", "--data_dir=/nonexistent"], "--data_dir"),
    (["--epsilon=1e-9", "--epochs=50"], "--epsilon"),
    (["--aggregation=mean"], "--aggregation"),
    (["--epochs=notanumber"], "epochs"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_is_one_line_exit_2_and_no_output_dir(tmp_path, args, flag):
    out = tmp_path / "run"
    proc = run(f"--output_dir={out}", *args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and flag in lines[0], proc.stderr[-2000:]
    assert not out.exists()


def test_a_run_writes_results_and_sample_mode_reads_it(tmp_path):
    out = tmp_path / "run"
    proc = run(f"--output_dir={out}", "--epochs=1", "--eval_importance_samples=5", "--eval_examples=50",
               "--verbose=0", "--seed=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epsilon = " in proc.stdout
    results = json.load(open(out / "results.json"))
    for key in ("model", "dataset", "aggregation", "epsilon", "delta", "noise_multiplier",
                "effective_noise_multiplier", "sampling_rate", "steps", "epochs", "metrics"):
        assert key in results
    assert results["aggregation"] == "termwise" and 0 < results["epsilon"] < 100
    for key in ("hoyer_sparsity", "log_likelihood", "mmd"):
        assert key in results["metrics"]
    assert (out / "checkpoints").is_dir() and (out / "logs").is_dir()
    proc = run("--mode=sample", f"--output_dir={out}", "--num_samples=10")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "samples.npz").exists()


def test_sample_mode_needs_a_trained_run(tmp_path):
    proc = run("--mode=sample", f"--output_dir={tmp_path}")
    assert proc.returncode == 2 and "--output_dir" in proc.stderr
