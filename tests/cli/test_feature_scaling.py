"""`--model=privae --feature_scaling`: auto = public when the VAE is trained privately, train otherwise;
train with private training is one line on stderr, exit code 2 and no output folder."""
import json

import numpy as np
import pytest

from tests.cli.helpers import assert_one_line_error, train_py

# A small VAE (normal prior) for one epoch: what is checked is the scaling the run resolves and records.
FAST = ["--model=privae", "--epochs=1", "--batch_size=512", "--eval_importance_samples=5", "--eval_examples=50",
        "--verbose=0", "--seed=0", "--prior=normal"]
NO_BATCH_TERM = "--regularizer=none"  # a non-private run needs no batch-wise term (term-wise aggregation does)


@pytest.mark.parametrize("args,start", [
    (["--dataset=adult", "--feature_scaling=train"], "error: --feature_scaling: train scales adult's features"),
    (["--dataset=abalone", "--aggregation=micro", "--feature_scaling=train"],
     "error: --feature_scaling: train scales abalone's features"),
    (["--dataset=abalone", "--feature_scaling=minmax"], "error: --feature_scaling: must be one of auto, public, train"),
    (["--dataset=digits", "--feature_scaling=public"], "error: --feature_scaling: only applies to dataset=adult"),
], ids=["adult-termwise", "abalone-micro", "unknown", "digits"])
def test_refusals_are_one_line_exit_2_and_no_output_dir(tmp_path, capsys, data_dir, args, start):
    out = tmp_path / "run"
    line = assert_one_line_error(train_py(f"--output_dir={out}", f"--data_dir={data_dir}", *FAST, *args, capsys=capsys),
                                 "--feature_scaling", out)
    assert line.startswith(start)
    if "train scales" in start:
        assert "leak" in line and "epsilon" in line


@pytest.mark.parametrize("aggregation,expected", [("termwise", "public"), ("none", "train")])
def test_auto_scaling_is_public_when_private_and_recorded(tmp_path, capsys, data_dir, aggregation, expected):
    out = tmp_path / "run"
    small = [NO_BATCH_TERM] if aggregation == "none" else []
    proc = train_py(f"--output_dir={out}", f"--data_dir={data_dir}", *FAST, *small, "--dataset=abalone",
                    f"--aggregation={aggregation}", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.load(open(out / "results.json"))
    assert results["feature_scaling"] == expected and results["aggregation"] == aggregation
    assert np.isfinite(results["metrics"]["log_likelihood"])


def test_explicit_public_without_dp_and_non_uci_records_null(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", f"--data_dir={data_dir}", *FAST, NO_BATCH_TERM, "--dataset=abalone",
                    "--aggregation=none", "--feature_scaling=public", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.load(open(out / "results.json"))["feature_scaling"] == "public"
    out2 = tmp_path / "run2"
    proc = train_py(f"--output_dir={out2}", *FAST, NO_BATCH_TERM, "--dataset=digits", "--aggregation=none",
                    capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.load(open(out2 / "results.json"))["feature_scaling"] is None
