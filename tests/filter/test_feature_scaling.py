"""`--feature_scaling` in the filter: auto = public with a DP stage 1, train otherwise; train + DP is refused."""
import json

import numpy as np
import pytest

from tests.cli.helpers import assert_one_line_error, train_py
from tests.conftest import REPO_ROOT
from tfpriv.data import load_dataset
from tfpriv.errors import UsageError
from tfpriv.filter import job as filter_job
from tfpriv.jobs import pipeline

TINY = dict(vae_epochs=1, vae_batch_size=64, filter_epochs=1, filter_eval_epochs=1, filter_plots=False,
            filter_eval_min_steps=20, budget=0.5, sweep_budgets=[], gaussian_baseline=False)
DP = {"aggregation": "micro", "noise_multiplier": 1.1, "l2_norm_clip": 1.0, "delta": 1e-4}



@pytest.fixture
def validated():
    def check(values):
        return filter_job.validate(filter_job.JOB.settings(**values))["feature_scaling"]
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
    res = filter_job.run(filter_job.JOB.settings(**TINY, dataset="abalone", data_dir=str(data_dir), seed=0, verbose=0,
                                **DP), str(out))
    stored = json.load(open(out / "results.json"))
    assert stored["feature_scaling"] == res["feature_scaling"] == "public"
    assert json.load(open(out / "privacy_plan.json"))["feature_scaling"] == "public"
    assert "public constants only" in stored["privacy_scope"]


def test_stage1_trains_on_the_public_features(tmp_path, data_dir, monkeypatch):
    seen = {}

    def spy(built, *args, **kwargs):
        seen["x_train"] = built.arrays
        raise UsageError("--stop: spy")

    monkeypatch.setattr(pipeline, "train", spy)
    out = tmp_path / "run"
    with pytest.raises(UsageError, match="spy"):
        filter_job.run(filter_job.JOB.settings(**TINY, dataset="adult", data_dir=str(data_dir), seed=0,
                              **{**DP, "delta": 1e-5}), str(out))
    public = load_dataset("adult", data_dir, feature_scaling="public")
    assert seen["x_train"].shape == (30162, 102)
    np.testing.assert_array_equal(seen["x_train"], public.x_train)


def test_train_scaling_with_dp_is_refused_before_output(tmp_path, data_dir):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as err:
        filter_job.run(filter_job.JOB.settings(**TINY, dataset="adult", data_dir=str(data_dir), seed=0, **DP,
                              feature_scaling="train"), str(out))
    message = str(err.value)
    assert message.startswith("feature_scaling: train scales adult's features with statistics of the private "
                              "training split") and "\n" not in message and "epsilon" in message
    assert not out.exists()


def test_train_py_refuses_train_scaling_with_dp(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    proc = train_py(f"--flagfile={REPO_ROOT}/flags/filter_adult_dp.cfg", f"--data_dir={data_dir}",
                    f"--output_dir={out}", "--feature_scaling=train", capsys=capsys)
    line = assert_one_line_error(proc, "--feature_scaling: train", out)
    assert "leak" in line and proc.stdout == ""
