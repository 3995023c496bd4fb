"""`--feature_scaling` in the filter: auto = public with a DP stage 1, train otherwise; train + DP is refused."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from tests.conftest import REPO_ROOT
from tfpriv.data import load_dataset
from tfpriv.errors import UsageError
from tfpriv.filter import cli

FLAGS = flags.FLAGS
TINY = dict(vae_epochs=1, vae_batch_size=64, filter_epochs=1, filter_eval_epochs=1, filter_plots=False,
            filter_eval_min_steps=20, budget=0.5, sweep_budgets=[], gaussian_baseline=False)
DP = {"aggregation": "micro", "noise_multiplier": 1.1, "l2_norm_clip": 1.0, "delta": 1e-4}


@pytest.fixture(autouse=True)
def _parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


@pytest.fixture
def validated():
    def check(common):
        cli._COMMON_OVERRIDES.clear()
        cli._COMMON_OVERRIDES.update(common)
        try:
            return cli.validate_flags()["feature_scaling"]
        finally:
            cli._COMMON_OVERRIDES.clear()
    return check


@pytest.mark.parametrize("dataset", ["adult", "abalone"])
def test_auto_is_public_under_dp_and_train_otherwise(validated, dataset):
    assert validated({"dataset": dataset, **DP}) == "public"
    assert validated({"dataset": dataset, **DP, "feature_scaling": "auto"}) == "public"
    assert validated({"dataset": dataset, "aggregation": "batch"}) == "public"
    assert validated({"dataset": dataset}) == "train"
    assert validated({"dataset": dataset, "aggregation": "none"}) == "train"
    assert validated({"dataset": dataset, "feature_scaling": "public"}) == "public"
    assert validated({"dataset": dataset, **DP, "feature_scaling": "public"}) == "public"
    assert validated({"dataset": "mnist", **DP}) is None  # no data-dependent preprocessing


def test_dp_run_uses_and_records_public_scaling(tmp_path, data_dir):
    out = tmp_path / "run"
    with flagsaver.flagsaver(**TINY):
        res = cli.run(str(out), common={"dataset": "abalone", "data_dir": str(data_dir), "seed": 0, **DP})
    stored = json.load(open(out / "results.json"))
    assert stored["feature_scaling"] == res["feature_scaling"] == "public"
    assert json.load(open(out / "privacy_plan.json"))["feature_scaling"] == "public"
    assert "public constants only" in stored["privacy_scope"]


def test_stage1_trains_on_the_public_features(tmp_path, data_dir, monkeypatch):
    seen = {}
    from tfpriv.filter import stage1

    def spy(ds, *args, **kwargs):
        seen["x_train"] = ds.x_train
        raise UsageError("--stop: spy")

    monkeypatch.setattr(stage1, "train_stage1", spy)
    out = tmp_path / "run"
    with flagsaver.flagsaver(**TINY), pytest.raises(UsageError, match="spy"):
        cli.run(str(out), common={"dataset": "adult", "data_dir": str(data_dir), "seed": 0, **DP, "delta": 1e-5})
    public = load_dataset("adult", data_dir, feature_scaling="public")
    assert seen["x_train"].shape == (30162, 102)
    np.testing.assert_array_equal(seen["x_train"], public.x_train)
    assert not out.exists()


def test_train_scaling_with_dp_is_refused_before_output(tmp_path, data_dir):
    out = tmp_path / "run"
    with flagsaver.flagsaver(**TINY):
        with pytest.raises(UsageError) as err:
            cli.run(str(out), common={"dataset": "adult", "data_dir": str(data_dir), "seed": 0, **DP,
                                      "feature_scaling": "train"})
    message = str(err.value)
    assert message.startswith("--feature_scaling: train scales adult's features with statistics of the private "
                              "training split") and "\n" not in message and "epsilon" in message
    assert not out.exists()


def test_train_py_refuses_train_scaling_with_dp(tmp_path, data_dir):
    out = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "train.py"), "--flagfile=flags/filter_adult_dp.cfg",
                           f"--data_dir={data_dir}", f"--output_dir={out}", "--feature_scaling=train"],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --feature_scaling: train"), proc.stderr[-2000:]
    assert "leak" in lines[0] and proc.stdout == ""
    assert not out.exists()
