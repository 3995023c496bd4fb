"""The job contract: the registry, settings from the schema and from flags, per-family defaults and the
error mapping."""
import dataclasses

import pytest

from tests.conftest import saved_flags
from tfpriv import families
from tfpriv.cli import main as cli_main
from tfpriv.errors import ConfigError, UsageError
from tfpriv.filter import job as filter_job
from tfpriv.gan import job as gan_job
from tfpriv.cli.flags import CONTROL_FLAGS, FLAGS, flag_message, settings_from_flags
from tfpriv.jobs.job import Family, Job
from tfpriv.jobs.pipeline import check_privacy_flags
from tfpriv.privae import job as privae_job


@pytest.fixture(autouse=True)
def _parsed():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()


def test_the_registry_holds_families_by_model_name():
    known = families.families()
    assert set(known) == {"privae", "vae", "dpwgan_gp", "dpgan", "filter"}
    assert all(isinstance(family, Family) and isinstance(family.job, Job) for family in known.values())
    assert known["vae"] is known["privae"] and cli_main.job_for("vae") is privae_job.JOB
    assert known["dpgan"] is known["dpwgan_gp"] and cli_main.job_for("dpgan") is gan_job.JOB
    assert cli_main.job_for("filter") is filter_job.JOB and filter_job.JOB.sample is None


def test_every_setting_is_a_flag_and_every_tfpriv_flag_is_read_by_a_job():
    defined = set(FLAGS)
    read = set()
    for job in cli_main.jobs():
        assert set(job.fields()) <= defined, job.name
        read |= set(job.fields())
    assert defined - read == set(CONTROL_FLAGS) & defined  # what train.py does (--model, --audit, --tune, ...)
    assert {"model", "mode", "output_dir", "tune", "max_trials"} <= defined - read


def test_family_defaults_apply_unless_the_user_sets_the_flag():
    s = gan_job.JOB.settings(model="dpwgan_gp")
    assert (s.critic_steps, s.batch_size, s.clipping, s.aggregation, s.dataset) == (1, 128, "per_example", "micro", "mnist")
    assert s.learning_rate == pytest.approx(128 * 3.125e-6)  # 004's lr = batch * 3.125e-6
    assert (s.epochs, s.noise_multiplier, s.num_samples, s.seed) == (40, 0.5, 10000, None)
    d = gan_job.JOB.settings(model="dpgan")
    assert (d.critic_steps, d.clipping, d.learning_rate, d.batch_size, d.epochs) == (5, "fast", 5e-5, 64, 20)
    with saved_flags(batch_size=64, seed=3, aggregation="none"):
        s = settings_from_flags(gan_job.JOB, FLAGS, model="dpwgan_gp")
    assert (s.batch_size, s.learning_rate, s.seed, s.aggregation) == (64, pytest.approx(64 * 3.125e-6), 3, "none")
    assert {"batch_size", "seed", "aggregation"} <= s.given and "learning_rate" not in s.given
    # the shared declaration's default where the family gives none
    assert privae_job.JOB.settings().aggregation == "termwise"
    f = filter_job.JOB.settings()
    assert (f.dataset, f.aggregation, f.vae_batch_size) == ("mnist", "none", 128)


def test_num_samples_default_is_per_family():
    assert privae_job.JOB.settings().num_samples == 64
    assert privae_job.JOB.settings(model="vae").num_samples == 64
    assert gan_job.JOB.settings(model="dpgan").num_samples == 10000
    with saved_flags(num_samples=30):
        assert settings_from_flags(privae_job.JOB).num_samples == 30
        assert settings_from_flags(gan_job.JOB).num_samples == 30


def test_explicit_values_win_and_count_as_given():
    s = filter_job.JOB.settings(dataset="abalone", vae_epochs=2)
    assert (s.dataset, s.vae_epochs, s.model) == ("abalone", 2, "filter") and s.given == {"dataset", "vae_epochs"}
    with pytest.raises(UsageError, match="^epochs: not a setting of --model=filter$"):
        filter_job.JOB.settings(epochs=2)


def test_a_flag_the_job_does_not_read_is_refused():
    with saved_flags(epochs=5):
        with pytest.raises(UsageError, match=r"^--epochs: does not apply to --model=filter; use --vae_epochs$"):
            settings_from_flags(filter_job.JOB)
    with saved_flags(capacity=8):
        with pytest.raises(UsageError, match=r"^--capacity: does not apply to --model=vae$"):
            settings_from_flags(privae_job.JOB, model="vae")
    with saved_flags(feature_scaling="public"):
        with pytest.raises(UsageError, match=r"^--feature_scaling: does not apply to --model=dpgan"):
            settings_from_flags(gan_job.JOB, model="dpgan")
    with pytest.raises(UsageError, match="^--model: "):
        gan_job.JOB.settings(model="filter")


@pytest.mark.parametrize("job,values,flag", [
    (privae_job.JOB, {"epsilon": 3.0, "noise_multiplier": 1.0}, "--noise_multiplier: cannot be combined with --epsilon"),
    (privae_job.JOB, {"aggregation": "none", "epsilon": 3.0}, "--epsilon: only applies to private training"),
    (gan_job.JOB, {"aggregation": "none", "noise_multiplier": 1.0}, "--noise_multiplier: only applies to private"),
    (filter_job.JOB, {"max_epsilon": 2.0}, "--max_epsilon: only applies to private training, got --aggregation=none"),
    (filter_job.JOB, {"aggregation": "micro", "epsilon": 1.0, "noise_multiplier": 1.0}, "--noise_multiplier: cannot"),
])
def test_privacy_flag_conflicts(job, values, flag):
    with pytest.raises(UsageError) as err:
        check_privacy_flags(job.settings(**values))
    assert str(err.value).startswith(flag)


def test_privacy_flags_that_fit_together_pass():
    """No UsageError for combinations that make sense (the refusals are tested above)."""
    for settings in (privae_job.JOB.settings(epsilon=3.0),
                     privae_job.JOB.settings(noise_multiplier=1.0, max_epsilon=5.0),
                     gan_job.JOB.settings(aggregation="none"),  # family defaults are not "given"
                     filter_job.JOB.settings(aggregation="micro", epsilon=1.0, delta=1e-5)):
        assert check_privacy_flags(settings) is None


def test_library_parameters_are_shown_as_the_jobs_flags():
    exc = ConfigError("batch_size: must be between 1 and the dataset size 3341, got 100000")
    assert exc.param == "batch_size"
    assert flag_message(exc, filter_job.JOB) == "--vae_batch_size: must be between 1 and the dataset size 3341, got 100000"
    assert flag_message(exc, privae_job.JOB) == "--batch_size: must be between 1 and the dataset size 3341, got 100000"
    assert flag_message(ConfigError("epochs: must be >= 1, got 0"), filter_job.JOB) == "--vae_epochs: must be >= 1, got 0"
    assert flag_message(ConfigError("target_epsilon: 1 is already spent"), gan_job.JOB) == "--epsilon: 1 is already spent"
    assert flag_message(ConfigError("gamma: must be in [0, 1], got 2"), privae_job.JOB) == "--prior_gamma: must be in [0, 1], got 2"
    assert flag_message(ConfigError("num_samples: must be >= 1, got 0"), privae_job.JOB).startswith("--num_samples_L:")
    assert flag_message(UsageError("must be positive", param="delta"), gan_job.JOB) == "--delta: must be positive"
    # already a flag, or not a parameter of any flag: unchanged; only the first line
    assert flag_message(UsageError("--budget: must be >= 0"), filter_job.JOB) == "--budget: must be >= 0"
    assert flag_message(UsageError("x: has 3 examples\nmore"), filter_job.JOB) == "x: has 3 examples"
    assert flag_message(UsageError("architecture=conv: needs 28x28 images"), privae_job.JOB).startswith("--architecture=conv:")


def test_library_errors_name_parameters_not_flags():
    from tfpriv.privae.priors import make_prior
    from tfpriv.privacy.config import DPConfig
    from tfpriv.privacy.terms import TermSpec
    from tfpriv.training.runner import plan_privacy
    with pytest.raises(ConfigError) as err:
        DPConfig(aggregation="micro", l2_norm_clip=0.0)
    assert err.value.param == "l2_norm_clip" and not str(err.value).startswith("--")
    with pytest.raises(ConfigError) as err:
        plan_privacy(DPConfig(aggregation="micro", num_partitions=1), TermSpec(sample=("a",)), 100, 1000, 1)
    assert str(err.value).startswith("batch_size: ")
    with pytest.raises(ConfigError) as err:
        make_prior("sparse", 4, gamma=2.0)
    assert err.value.param == "gamma"


def test_settings_are_typed_and_recorded():
    s = privae_job.JOB.settings()
    assert isinstance(s, privae_job.PriVAESettings) and dataclasses.is_dataclass(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.epochs = 3
    record = s.record()
    assert record["epochs"] == 20 and "data_dir" not in record and "given" not in record
