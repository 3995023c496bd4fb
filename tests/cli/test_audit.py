"""`train.py --audit`: the configured job's model audited instead of trained, audit.json written."""
import json

import pytest

from tests.cli.helpers import assert_one_line_error, train_py


def test_audit_alone_audits_the_main_jobs_model(tmp_path, capsys):
    out = tmp_path / "audit"
    proc = train_py("--audit", "--audit_batch_size=4", f"--output_dir={out}", capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "audit.json").read_text())
    assert record["settings"]["aggregation"] == "micro" and record["dataset"] == "mnist"  # the main job's flags
    assert record["passed"] and record["max_sensitivity_ratio"] <= 1 + record["tolerance"]
    # Its clip norm is below every per-example gradient norm at initialisation: removing an example
    # moves the clipped sum by exactly C, so the audit reaches the bound.
    assert abs(record["max_sensitivity_ratio"] - 1.0) < 1e-4
    config = record["configurations"][0]
    assert config["batch_size"] == 4 and config["neighbours"] >= 4 + 10
    assert f"max_sensitivity_ratio = {record['max_sensitivity_ratio']:.6f}" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["audit.json"]  # nothing trained


def test_audit_of_a_termwise_model_with_partitions(tmp_path, capsys):
    out = tmp_path / "tw"
    proc = train_py("--audit", "--audit_batch_size=4", "--model=privae", "--dataset=digits", "--aggregation=termwise",
                    "--num_partitions=2", "--prior=sparse", "--regularizer=mmd", "--seed=1", f"--output_dir={out}",
                    capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "audit.json").read_text())
    config = record["configurations"][0]
    assert config["declared_sensitivity"] == pytest.approx(5 ** 0.5)  # sqrt(C1^2/C1^2 + (2 C2)^2/C2^2): Lemma 2, add-or-remove
    assert 0 < record["max_sensitivity_ratio"] <= 1 + record["tolerance"]


def test_audit_refusals(tmp_path, capsys):
    assert_one_line_error(train_py("--audit", "--model=filter", f"--output_dir={tmp_path}/f", capsys=capsys),
                          "--aggregation", tmp_path / "f")
    assert_one_line_error(train_py("--audit", "--audit_batch_size=1", f"--output_dir={tmp_path}/b", capsys=capsys),
                          "--audit_batch_size", tmp_path / "b")
    assert_one_line_error(train_py("--audit", "--mode=sample", f"--output_dir={tmp_path}/s", capsys=capsys),
                          "--audit")
