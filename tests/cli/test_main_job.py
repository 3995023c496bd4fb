"""`python train.py` with no flags runs the main job: a DP-SGD VAE on the bundled MNIST (main_job.cfg)."""
import json

import pytest

from tests.cli.helpers import replace_job, train_py
from tests.conftest import saved_flags
from tfpriv import families
from tfpriv.cli import main as cli_main
from tfpriv.cli.flags import FLAGS
from tfpriv.privae import job as privae_job



def test_no_flags_means_the_main_job_flag_file(capsys):
    main_job = f"--flagfile={cli_main.MAIN_JOB_FLAGFILE}"
    assert cli_main.with_main_job(["train.py"]) == ["train.py", main_job, "--output_dir=runs/main_job"]
    assert cli_main.with_main_job(["train.py", "--output_dir=x"]) == ["train.py", main_job, "--output_dir=x"]
    assert cli_main.with_main_job(["train.py", "--epochs=1"]) == ["train.py", "--epochs=1"]
    with saved_flags():
        cli_main.parse_flags(["train.py"])
        assert (FLAGS.model, FLAGS.dataset, FLAGS.data_dir, FLAGS.aggregation, FLAGS.epsilon) == (
            "privae", "mnist", None, "micro", 8.0)
        # a stable folder, so that running it again resumes (was runs/privae-mnist-<time>, new every run)
        assert FLAGS.output_dir == "runs/main_job"
    assert "main job" in capsys.readouterr().out


def test_the_main_job_says_where_it_writes_and_an_empty_output_dir_is_an_error(tmp_path, capsys, monkeypatch):
    for name in families.families():
        replace_job(monkeypatch, name, run=lambda s, o: {"metrics": {}})
    monkeypatch.chdir(tmp_path)
    proc = train_py(capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    assert "writing to runs/main_job (running it again resumes there)" in proc.stdout.splitlines()[0]
    proc = train_py("--output_dir=", capsys=capsys)  # an unset shell variable: ran the main job in runs/ before
    assert proc.returncode == 2 and proc.stderr.startswith("error: --output_dir: is empty")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("extra", [[], ["--output_dir=somewhere"]], ids=["no flags", "--output_dir"])
def test_the_main_job_is_seeded_so_two_runs_agree(extra, capsys):
    seeds = []
    for _ in range(2):  # what two runs of `python train.py` parse
        with saved_flags():
            cli_main.parse_flags(["train.py", *extra])
            seeds.append(FLAGS.seed)
    assert seeds == [0, 0]  # was [None, None]: a seed from the OS, different every run


def test_help_describes_the_main_job_and_what_other_flags_do(capsys):
    with pytest.raises(SystemExit):
        cli_main.parse_flags(["train.py", "--help"])
    header = capsys.readouterr().out.split("shared flags (every model):")[0]
    assert "term-wise PriVAE on digits" not in header  # the old main job
    assert "the main job, a DP-SGD VAE on MNIST" in header and cli_main.MAIN_JOB_FLAGFILE in header
    assert "Any other flag replaces the main job" in header and "--model=privae,\n--dataset=digits" in header
    # what the header says the main job is, is what its flag file sets
    with saved_flags():
        cli_main.parse_flags(["train.py"])
        assert (FLAGS.model, FLAGS.dataset, FLAGS.aggregation, FLAGS.epsilon, FLAGS.delta, FLAGS.seed) == (
            "privae", "mnist", "micro", 8.0, 1e-5, 0)
    assert FLAGS["model"].default == "privae" and privae_job.JOB.settings().dataset == "digits"


@pytest.mark.parametrize("args,first_line", [
    (["--epochs=1"], "model privae on digits, because flags other than --output_dir replace the main job "
                     "(a DP-SGD VAE on MNIST) with the defaults of --model and --dataset (--help)"),
    (["--dataset=pinwheel"], "model privae on pinwheel, because flags other than --output_dir replace the main job "
                             "(a DP-SGD VAE on MNIST) with the defaults of --model (--help)"),
    (["--model=dpgan"], "model dpgan on mnist, because mnist is the default --dataset of --model=dpgan"),
    (["--model=privae", "--dataset=digits"], None),
    ([], "running the main job, a DP-SGD VAE on MNIST"),
], ids=["defaults", "model default", "dataset default", "both given", "main job"])
def test_the_first_line_says_which_model_on_which_data_and_why(tmp_path, capsys, monkeypatch, args, first_line):
    for name in families.families():
        replace_job(monkeypatch, name, run=lambda s, o: {"metrics": {}})
    proc = train_py(f"--output_dir={tmp_path}/run", *args, capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    if first_line is None:
        assert not any(line.startswith(("model ", "running the main job")) for line in lines)
    else:
        assert lines[0].startswith(first_line)


def test_the_main_job_runs_on_the_bundled_data_and_prints_epsilon_and_utility(tmp_path, capsys):
    out = train_py(f"--flagfile={cli_main.MAIN_JOB_FLAGFILE}", "--epochs=1", "--eval_examples=50",
                   "--eval_importance_samples=5", "--verbose=0", f"--output_dir={tmp_path}", capsys=capsys)
    assert out.returncode == 0, out.stderr
    assert "epsilon = " in out.stdout and "log_likelihood" in out.stdout
    assert (tmp_path / "samples.png").is_file() and (tmp_path / "results.json").is_file()
    assert json.loads((tmp_path / "results.json").read_text())["seed"] == 0
