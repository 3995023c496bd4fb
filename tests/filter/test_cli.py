import json
import os

import pytest
from absl import flags
from absl.testing import flagsaver

from tfpriv.errors import UsageError
from tfpriv.filter import cli

FLAGS = flags.FLAGS


@pytest.fixture(autouse=True)
def _parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


@pytest.mark.parametrize("overrides,message", [
    ({"budget": -1.0}, "--budget: must be >= 0, got -1"),
    ({"sweep_budgets": ["0", "-2"]}, "--sweep_budgets: must be >= 0, got -2"),
    ({"divergence": "tv"}, "--divergence: must be one of kl, chi2, got 'tv'"),
    ({"filter_type": "conv"}, "--filter_type: must be linear or mlp, got 'conv'"),
    ({"repeats": 0}, "--repeats: must be >= 1, got 0"),
    ({"filter_ema": 1.0}, "--filter_ema: must be in [0, 1), got 1.0"),
    ({"num_users": 2, "filter_users": ["a:b"]}, "--filter_users: need 2 entries"),
])
def test_bad_flags_raise_one_line_usage_error_before_output(tmp_path, overrides, message):
    out = tmp_path / "run"
    with flagsaver.flagsaver(**overrides):
        with pytest.raises(UsageError) as err:
            cli.run(str(out), common={"dataset": "abalone", "data_dir": "/nonexistent"})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not out.exists()


def test_bad_label_raises_before_output(tmp_path, data_dir):
    out = tmp_path / "run"
    with flagsaver.flagsaver(private_label="gender"):
        with pytest.raises(UsageError, match=r"^--private_label: unknown label 'gender'"):
            cli.run(str(out), common={"dataset": "abalone", "data_dir": str(data_dir)})
    assert not out.exists()


def test_abalone_end_to_end_writes_results(tmp_path, data_dir):
    out = tmp_path / "run"
    with flagsaver.flagsaver(vae_epochs=1, filter_epochs=2, filter_eval_epochs=1, filter_plots=False, filter_eval_min_steps=100,
                             budget=0.5, sweep_budgets=[]):
        res = cli.run(str(out), common={"dataset": "abalone", "data_dir": str(data_dir), "seed": 0})
    stored = json.load(open(os.path.join(out, "results.json")))
    assert stored["model"] == "filter" and stored["dataset"] == "abalone"
    assert stored["aggregation"] == "none" and stored["epsilon"] == "inf"
    assert stored["labels"] == {"private": "sex", "utility": "rings_gt_10"}
    assert stored["num_classes"] == {"private": 3, "utility": 2}
    for key in ("private_accuracy", "private_auroc", "utility_accuracy", "utility_auroc", "mutual_information"):
        assert 0.0 <= stored["metrics"][key] <= (1.0 if "mutual" not in key else 2.0)
    assert [e["order"] for e in stored["filter_rdp"]][:3] == [1.25, 1.5, 1.75]
    # RDP is linear in the order and the ε matches the conversion of the stored curve
    r = stored["filter_rdp"]
    assert r[1]["rdp"] / r[1]["order"] == pytest.approx(r[0]["rdp"] / r[0]["order"])
    assert res["filter_epsilon"] == pytest.approx(min(e["rdp"] + 11.512925464970229 / (e["order"] - 1) for e in r))
    assert stored["sweep"][0]["gaussian"]["divergence_test"]["mean"] == pytest.approx(0.5, rel=0.2)


def test_budget_message_is_exact(tmp_path):
    with flagsaver.flagsaver(budget=-1.0):
        with pytest.raises(UsageError) as err:
            cli.run(str(tmp_path / "run"), common={"dataset": "abalone"})
    assert str(err.value) == "--budget: must be >= 0, got -1"


def test_sample_mode_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"^--mode: sample is not supported for --model=filter"):
        cli.sample(str(tmp_path))
