"""`python train.py` with no flags runs the main job: a DP-SGD VAE on the bundled MNIST (main_job.cfg)."""
from absl import flags
from absl.testing import flagsaver

from tests.cli.helpers import train_py
from tfpriv.cli import main as cli_main

FLAGS = flags.FLAGS


def test_no_flags_means_the_main_job_flag_file(capsys):
    assert cli_main.with_main_job(["train.py"]) == ["train.py", f"--flagfile={cli_main.MAIN_JOB_FLAGFILE}"]
    assert cli_main.with_main_job(["train.py", "--epochs=1"]) == ["train.py", "--epochs=1"]
    with flagsaver.flagsaver():
        cli_main.parse_flags(["train.py"])
        assert (FLAGS.model, FLAGS.dataset, FLAGS.data_dir, FLAGS.aggregation, FLAGS.epsilon) == (
            "privae", "mnist", None, "micro", 8.0)
    assert "main job" in capsys.readouterr().out


def test_the_main_job_runs_on_the_bundled_data_and_prints_epsilon_and_utility(tmp_path, capsys):
    out = train_py(f"--flagfile={cli_main.MAIN_JOB_FLAGFILE}", "--epochs=1", "--eval_examples=50",
                   "--eval_importance_samples=5", "--verbose=0", f"--output_dir={tmp_path}", capsys=capsys)
    assert out.returncode == 0, out.stderr
    assert "epsilon = " in out.stdout and "log_likelihood" in out.stdout
    assert (tmp_path / "samples.png").is_file() and (tmp_path / "results.json").is_file()
