import json
import os

import numpy as np
import pytest

from tfpriv.errors import UsageError
from tfpriv.filter import job as filter_job
from tfpriv.filter.pipeline import load_filter
from tests.cli.helpers import assert_one_line_error, train_py

TINY = dict(vae_epochs=1, filter_epochs=2, filter_eval_epochs=1, filter_plots=False, filter_eval_min_steps=10,
            budget=0.5, sweep_budgets=[])



def settings(**values):
    return filter_job.JOB.settings(**values)


@pytest.mark.parametrize("overrides,message", [
    ({"budget": -1.0}, "--budget: must be >= 0, got -1"),
    ({"sweep_budgets": ["0", "-2"]}, "--sweep_budgets: must be >= 0, got -2"),
    ({"divergence": "tv"}, "--divergence: must be one of kl, chi2, got 'tv'"),
    ({"filter_type": "conv"}, "--filter_type: must be one of linear, mlp, got 'conv'"),
    ({"repeats": 0}, "--repeats: must be >= 1, got 0"),
    ({"filter_ema": 1.0}, "--filter_ema: must be in [0, 1), got 1.0"),
    ({"num_users": 2, "filter_users": ["a:b"]}, "--filter_users: need 2 entries"),
    ({"dataset": "digits"}, "--dataset: the filter supports mnist, adult, abalone, celeba, got 'digits'"),
    ({"label_epsilon": 0.0}, "--label_epsilon: must be finite and > 0.04515"),
    ({"label_epsilon": -3.0}, "--label_epsilon: must be finite and > 0.04515"),
    ({"label_epsilon": float("inf")}, "--label_epsilon: must be finite and > 0.04515"),
    ({"label_epsilon": 0.2, "filter_delta": 1e-300}, "--label_epsilon: must be finite and > 2.7"),
    ({"label_epsilon": 3.0, "filter_type": "mlp"}, "--label_epsilon: needs --filter_type=linear"),
])
def test_bad_settings_raise_one_line_usage_error_before_output(tmp_path, overrides, message):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as err:
        filter_job.run(settings(**{"dataset": "abalone", "data_dir": "/nonexistent", **overrides}), str(out))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not out.exists()


def test_the_default_dataset_is_one_the_filter_supports():
    s = settings()
    assert s.dataset == "mnist" and filter_job.validate(s)["feature_scaling"] is None


def test_bad_label_raises_before_output(tmp_path, data_dir):
    out = tmp_path / "run"
    with pytest.raises(UsageError, match=r"^--private_label: unknown label 'gender'"):
        filter_job.run(settings(dataset="abalone", data_dir=str(data_dir), private_label="gender"), str(out))
    assert not out.exists()


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory, data_dir):
    """Two runs with the same --seed (label noise on): [(output folder, what filter_job.run returned)] x 2."""
    runs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp("filter_seeded") / name
        runs.append((out, filter_job.run(settings(dataset="abalone", data_dir=str(data_dir), seed=3, verbose=0,
                                           label_epsilon=10.0, **TINY), str(out))))
    return runs


def test_abalone_end_to_end_writes_results_and_models(seeded_runs):
    out, res = seeded_runs[0]
    stored = json.load(open(os.path.join(out, "results.json")))
    assert stored["model"] == "filter" and stored["dataset"] == "abalone"
    assert stored["aggregation"] == "none" and stored["epsilon"] == "inf"
    assert stored["epochs"] == stored["planned_epochs"] == 1 and stored["stage1"]["sampling"] == "shuffle"
    assert len(stored["segments"]) == 1 and stored["segments"][0]["steps"] == stored["steps"] == 3341 // 128
    assert stored["labels"] == {"private": "sex", "utility": "rings_gt_10"}
    assert stored["num_classes"] == {"private": 3, "utility": 2}
    assert "knn_mutual_information" in stored["metrics_source"]
    for key in ("private_accuracy", "private_auroc", "utility_accuracy", "utility_auroc", "mutual_information"):
        assert 0.0 <= stored["metrics"][key] <= (1.0 if "mutual" not in key else 2.0)
    assert [e["order"] for e in stored["filter_rdp"]][:3] == [1.25, 1.5, 1.75]
    # RDP is linear in the order and the ε matches the conversion of the stored curve
    r = stored["filter_rdp"]
    assert r[1]["rdp"] / r[1]["order"] == pytest.approx(r[0]["rdp"] / r[0]["order"])
    assert res["filter_epsilon"] == pytest.approx(min(e["rdp"] + 11.512925464970229 / (e["order"] - 1) for e in r))
    assert res["filter_epsilon"] <= 10.0 and stored["sweep"][0]["filter"]["filter_label_epsilon_target"]["mean"] == 10.0
    assert stored["sweep"][0]["gaussian"]["divergence_test"]["mean"] == pytest.approx(0.5, rel=0.2)
    # the same artefacts as the other jobs: checkpoints, TensorBoard logs, the trained models
    assert (out / "stage1" / "checkpoints").is_dir() and (out / "stage1" / "logs").is_dir()
    assert (out / "vae" / "vae.json").is_file()
    layer = load_filter(str(out / "filter"))
    saved = json.load(open(out / "filter" / "filter.json"))
    assert saved["budget"] == 0.5 and saved["private_label"] == "sex" and saved["filter_type"] == "linear"
    assert saved["label_epsilon"] == 10.0
    assert layer.noise_matrix.shape == (4, 4) and layer.label_matrix.shape == (4, 3)
    z = np.zeros((5, 4), np.float32)
    assert layer(z, np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1]]).shape == (5, 4)
    assert not (out / "privacy_plan.json").exists()  # non-private: no guarantee to plan


def test_the_same_seed_repeats_the_run_exactly(seeded_runs):
    """--seed fixes every Keras initialiser too (stage-1 VAE, filter, adversaries, evaluation classifiers),
    not only TF's op seeds, and the release noise (and the label noise): two runs give the same stage-1
    losses, metrics and filter weights."""
    (a, fa), (b, fb) = [(json.load(open(out / "results.json")), load_filter(str(out / "filter")))
                        for out, _ in seeded_runs]
    assert a["stage1"]["history"] == b["stage1"]["history"]
    assert a["metrics"] == b["metrics"]  # the released codes too: --seed asked for a reproducible release
    assert a["filter_config"]["release_seed"] == 3 + 7
    np.testing.assert_array_equal(fa.noise_matrix, fb.noise_matrix)
    np.testing.assert_array_equal(fa.label_matrix, fb.label_matrix)


@pytest.mark.parametrize("value", ["0", "0.01", "nan", "ten"])
def test_train_py_refuses_bad_label_epsilon_with_exit_2(tmp_path, capsys, data_dir, value):
    out = tmp_path / "run"
    proc = train_py("--model=filter", "--dataset=abalone", f"--data_dir={data_dir}", f"--output_dir={out}",
                    f"--label_epsilon={value}", capsys=capsys)
    assert_one_line_error(proc, "--label_epsilon", out)


def test_budget_message_is_exact(tmp_path):
    with pytest.raises(UsageError) as err:
        filter_job.run(settings(dataset="abalone", budget=-1.0), str(tmp_path / "run"))
    assert str(err.value) == "--budget: must be >= 0, got -1"


def test_sample_mode_is_not_a_filter_job():
    assert filter_job.JOB.sample is None  # train.py refuses --mode=sample for --model=filter (tests/cli)


def test_guarantees_name_each_artefact_and_only_the_private_ones_carry_an_epsilon():
    single = filter_job.guarantees(True, 2.178, 1e-5, None, [0.9], 1e-5, 3341, multiuser=False)
    assert (single["vae/"]["epsilon"], single["vae/"]["delta"]) == (2.178, 1e-5)
    assert single["filter/"]["epsilon"] is None and single["filter/"]["guarantee"].startswith("not private")
    assert "3341 training records" in single["filter/"]["guarantee"]
    assert single["released codes"]["epsilon"] == 0.9 and "label-change" in single["released codes"]["guarantee"]
    assert single["saved_model/"]["epsilon"] is None and single["metrics"]["epsilon"] is None
    multi = filter_job.guarantees(False, float("inf"), 1e-5, None, [0.5, None], 1e-5, 3341, multiuser=True)
    assert multi["vae/"]["epsilon"] is None and "--aggregation=none" in multi["vae/"]["guarantee"]
    assert "that user's part" in multi["filter/"]["guarantee"]
    assert multi["released codes"]["epsilon"] is None  # one user's mlp filter has no bound: none for the release
    assert filter_job.guarantees(True, 1.0, 1e-5, None, [0.5, 2.0], 1e-5, 10, True)["released codes"]["epsilon"] == 2.0
    assert "never recorded" in single["released codes"]["guarantee"]
    seeded = filter_job.guarantees(True, 2.178, 1e-5, None, [0.9], 1e-5, 3341, False, release_seed=10)["released codes"]
    assert seeded["epsilon"] is None and "reproducible from --seed (release seed 10)" in seeded["guarantee"]
    # the scope no longer tells a single-user run that its filter saw only "that user's own codes"
    assert "own codes" not in filter_job.PRIVACY_SCOPE and "without DP" in filter_job.PRIVACY_SCOPE


def test_a_run_without_seed_prints_each_guarantee_and_records_no_release_seed(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    proc = train_py("--model=filter", "--dataset=abalone", f"--data_dir={data_dir}", f"--output_dir={out}",
                    "--aggregation=micro", "--noise_multiplier=1.0", "--vae_batch_size=500", "--vae_epochs=1",
                    "--filter_epochs=2", "--filter_eval_epochs=1", "--filter_eval_min_steps=10", "--budget=0.5",
                    "--nofilter_plots", "--nogaussian_baseline", "--verbose=0", capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    stored = json.load(open(out / "results.json"))
    g = stored["guarantees"]
    assert g["vae/"]["epsilon"] == stored["epsilon"] == stored["stage1"]["privacy"]["epsilon"]
    assert g["vae/"]["delta"] == stored["delta"] and g["filter/"]["guarantee"].startswith("not private")
    assert g["released codes"]["epsilon"] == stored["filter_epsilon"]
    assert "OS entropy, never recorded" in g["released codes"]["guarantee"]
    lines = proc.stdout.splitlines()
    assert f"  vae/ stage-1 VAE (encoder, decoder): epsilon = {stored['epsilon']:.4g}" in proc.stdout
    assert any(l.startswith("  filter/ the filter: not private") for l in lines)
    assert any(l.startswith("  released codes") and "never recorded" in l for l in lines)
    # the release noise came from OS entropy: no seed of it anywhere in what the run wrote
    assert stored["seed"] is None and stored["filter_config"]["release_seed"] is None
    assert json.load(open(out / "filter" / "filter.json"))["release_seed"] is None
