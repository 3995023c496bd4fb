"""Stage 1 trained with DP-SGD through the engine (`--aggregation=micro`): plan, engine, epsilon, refusals."""
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.helpers import assert_one_line_error, train_py
from tfpriv.errors import ConfigError, UsageError
from tfpriv.filter import job as filter_job
from tfpriv.compat import keras
from tfpriv.filter.stage1 import Stage1, build_stage1_vae, frozen, privacy_record
from tfpriv.cli.flags import flag_message
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.config import DPConfig
from tfpriv.training.runner import fit_private, plan_privacy

TINY = dict(filter_epochs=1, filter_eval_epochs=1, filter_plots=False, filter_eval_min_steps=20, budget=0.5,
            sweep_budgets=[], gaussian_baseline=False)



def _tiny_tabular(n=240, d=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return types.SimpleNamespace(name="abalone", x_train=x, x_test=x[:40], likelihood="gaussian", kind="tabular")


def _plan(vae, dp, num_examples, batch_size, epochs, **kwargs):
    return plan_privacy(dp, vae.term_spec(), num_examples, batch_size, epochs, **kwargs)


def _train(vae, ds, plan, directory, seed) -> Stage1:
    """Stage 1 as the command line trains it (FilterJob through tfpriv/cli/pipeline.py)."""
    fit = fit_private(vae, np.asarray(ds.x_train, np.float32), plan, keras.optimizers.Adam(1e-3), str(directory),
                      seed=seed, verbose=0)
    return frozen(vae, {"privacy": privacy_record(vae, plan, fit)})


def test_dp_run_records_the_accountants_epsilon(tmp_path, data_dir):
    out = tmp_path / "run"
    res = filter_job.run(filter_job.JOB.settings(vae_epochs=1, vae_batch_size=256, **TINY, dataset="abalone",
                                data_dir=str(data_dir), seed=0, verbose=0, aggregation="micro", noise_multiplier=1.1,
                                l2_norm_clip=1.0, delta=1e-4), str(out))
    stored = json.load(open(out / "results.json"))
    q = 256 / 3341
    steps = round(1 / q)  # Poisson sampling: round(1/q) steps per epoch, one epoch
    assert stored["aggregation"] == "micro" and stored["sampling"] == "poisson"
    assert stored["steps"] == steps and stored["sampling_rate"] == pytest.approx(q)
    assert stored["noise_multiplier"] == 1.1 and stored["effective_noise_multiplier"] == 1.1
    assert stored["delta"] == 1e-4
    assert stored["epsilon"] == pytest.approx(RDP.epsilon([(q, 1.1, steps)], 1e-4), rel=1e-9)
    assert res["epsilon"] == stored["epsilon"] and 0 < stored["epsilon"] < 10
    priv = stored["stage1"]["privacy"]
    assert priv["ledger_segments"] == [[pytest.approx(q), 1.1, steps]] and priv["sensitivity_in_clip_units"] == 1.0
    assert stored["stage1"]["private"] is True and "privacy_scope" in stored
    # the filter's own label-RDP is reported separately, unchanged
    assert stored["filter_rdp"][0]["order"] == 1.25 and stored["filter_delta"] == 1e-5
    plan = json.load(open(out / "privacy_plan.json"))
    assert plan["aggregation"] == "micro" and plan["planned_steps"] == steps and "privacy_scope" in plan
    assert (out / "stage1" / "checkpoints").is_dir() and (out / "stage1" / "logs").is_dir()
    assert (out / "vae" / "vae.json").is_file() and (out / "filter" / "filter.json").is_file()
    assert stored["epochs"] == stored["planned_epochs"] == 1 and stored["segments"][0]["epsilon"] == stored["epsilon"]


def test_engine_is_built_with_the_plans_clipping_and_noise(tmp_path):
    ds = _tiny_tabular()
    tf.random.set_seed(0)
    vae = build_stage1_vae(ds, 4)
    dp = DPConfig(aggregation="micro", l2_norm_clip=0.7, noise_multiplier=2.0, num_partitions=1, seed=1)
    plan = _plan(vae, dp, len(ds.x_train), 40, 2, delta=1e-3)
    st = _train(vae, ds, plan, tmp_path, seed=1)
    trained = st.info["vae"]
    assert trained.dp_config == plan.config and trained.engine.config == plan.config
    cfg = trained.engine.config
    assert (cfg.aggregation, cfg.l2_norm_clip, cfg.noise_multiplier, cfg.expected_batch_size) == ("micro", 0.7, 2.0, 40.0)
    assert cfg.noise_stddev(False) == pytest.approx(2.0 * 0.7 / 40)
    # the ledger only counts steps taken through the private train step
    assert trained.ledger.total_steps == plan.planned_steps == 2 * 6
    assert st.info["privacy"]["epsilon"] == pytest.approx(RDP.epsilon([(40 / 240, 2.0, 12)], 1e-3))
    codes, _ = st.encode(ds.x_test)
    assert codes.shape == (40, 4) and np.all(np.isfinite(codes))


def test_target_epsilon_calibrates_the_noise():
    ds = _tiny_tabular()
    vae = build_stage1_vae(ds, 4)
    plan = _plan(vae, DPConfig(aggregation="micro", num_partitions=1), 240, 24, 3,
                 delta=1e-3, target_epsilon=2.0)
    eps = RDP.epsilon([(plan.sampling_rate, plan.effective_noise_multiplier, plan.planned_steps)], 1e-3)
    assert 1.95 <= eps <= 2.0 + 1e-6


def test_robust_decoder_term_is_per_example_and_accepted(tmp_path):
    ds = _tiny_tabular()
    vae = build_stage1_vae(ds, 4, robust_decoder=1.0)
    assert "lipschitz_decoder" in vae.term_spec().sample and not vae.term_spec().has_batch_terms
    plan = _plan(vae, DPConfig(aggregation="micro", num_partitions=1, seed=0), 240, 40, 1, delta=1e-3)
    st = _train(vae, ds, plan, tmp_path, seed=0)
    assert st.info["privacy"]["steps"] == 6  # the engine's first-batch locality check passed


def test_a_term_that_mixes_examples_is_refused(tmp_path):
    """An extra per-example term that reads other examples (here the batch mean) would leak."""
    ds = _tiny_tabular()
    vae = build_stage1_vae(ds, 4)
    vae.extra_sample_terms["mixing"] = lambda v, x, z: tf.reduce_sum(tf.square(z - tf.reduce_mean(z, 0)), 1)
    plan = _plan(vae, DPConfig(aggregation="micro", num_partitions=1, seed=0), 240, 40, 1, delta=1e-3)
    with pytest.raises(ConfigError, match="depends on other examples"):
        _train(vae, ds, plan, tmp_path, seed=0)


@pytest.mark.parametrize("values,message", [
    ({"aggregation": "termwise"}, "--aggregation: termwise needs a batch-wise term"),
    ({"aggregation": "mean"}, "--aggregation: must be one of none, micro, batch, termwise, got 'mean'"),
    ({"epsilon": 1.0}, "--epsilon: only applies to private training, got --aggregation=none"),
    ({"aggregation": "none", "noise_multiplier": 1.0}, "--noise_multiplier: only applies to private training"),
    ({"aggregation": "micro", "vae_epochs": 0}, "--vae_epochs: must be >= 1, got 0"),
    ({"aggregation": "micro", "noise_multiplier": -1.0}, "--noise_multiplier: must be a finite number >= 0"),
    ({"aggregation": "micro", "l2_norm_clip": 0.0}, "--l2_norm_clip: must be a positive finite number"),
    # the library's `batch_size` of plan_privacy is the filter's --vae_batch_size
    ({"aggregation": "micro", "vae_batch_size": 100000}, "--vae_batch_size: must be between 1 and the dataset size 3341"),
    ({"aggregation": "micro", "delta": 0.01}, "--delta: must be in (0, 1/N)"),
    ({"aggregation": "micro", "epsilon": 1e-9}, "--epsilon: cannot reach epsilon=1e-09"),
])
def test_bad_dp_settings_raise_one_line_usage_error_and_write_nothing(tmp_path, data_dir, values, message):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as err:
        filter_job.run(filter_job.JOB.settings(dataset="abalone", data_dir=str(data_dir), seed=0, **values), str(out))
    shown = flag_message(err.value, filter_job.JOB)  # what train.py prints after "error: "
    assert shown.startswith(message) and "\n" not in str(err.value), str(err.value)
    assert not out.exists()


@pytest.mark.parametrize("args,flag", [
    (["--aggregation=termwise"], "--aggregation"),
    (["--aggregation=micro", "--vae_batch_size=100000"], "--vae_batch_size: must be between 1 and the dataset size"),
    (["--aggregation=none", "--epsilon=1"], "--epsilon"),
    (["--batch_size=64"], "--batch_size: does not apply to --model=filter; use --vae_batch_size"),
])
def test_train_py_exits_2_with_one_line_and_no_output_dir(tmp_path, capsys, data_dir, args, flag):
    out = tmp_path / "run"
    proc = train_py("--model=filter", "--dataset=abalone", f"--data_dir={data_dir}", f"--output_dir={out}", *args,
                    capsys=capsys)
    assert_one_line_error(proc, flag, out)


def test_batch_aggregation_is_accounted_with_sensitivity_two(tmp_path):
    ds = _tiny_tabular()
    vae = build_stage1_vae(ds, 4)
    plan = _plan(vae, DPConfig(aggregation="batch", noise_multiplier=3.0, num_partitions=1, seed=0),
                 240, 40, 1, delta=1e-3)
    assert plan.config.sensitivity(False) == 2.0 and plan.effective_noise_multiplier == pytest.approx(1.5)
    st = _train(vae, ds, plan, tmp_path, seed=0)
    assert st.info["vae"].engine.config.aggregation == "batch"
    assert st.info["privacy"]["epsilon"] == pytest.approx(RDP.epsilon([(40 / 240, 1.5, 6)], 1e-3))
