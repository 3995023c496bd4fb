"""`train.py` as users run it: one-line errors with exit code 2, results.json, re-runs, Ctrl-C, --help.

Most tests run train.py's main() in-process (`train_py`: the same flag parsing, flag files
included); the real script runs in a subprocess for an end-to-end run (`fast_run`, shared) and Ctrl-C.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib

import pytest

from tests.cli.helpers import TRAIN, assert_one_line_error, error_lines, replace_job, subprocess_train_py, train_py
from tests.conftest import REPO_ROOT
from tfpriv.cli import main as cli_main
from tfpriv.errors import UsageError

FAST = ["--epochs=1", "--eval_importance_samples=5", "--eval_examples=50", "--verbose=0", "--seed=3"]


SHARED = [*FAST, "--noise_multiplier=1.5", "--accountant=rdp"]


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """`python train.py SHARED` (the real script), run once for the tests that read such a run: the
    end-to-end run, the RDP twin of the PLD run, the first segment of a re-run. A test that writes
    into the run folder works on its own copy."""
    out = tmp_path_factory.mktemp("fast_run") / "run"
    proc = subprocess_train_py(f"--output_dir={out}", *SHARED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def _copy(run, tmp_path):
    return shutil.copytree(run, tmp_path / "run")


@pytest.mark.parametrize("args,flag", [
    (["--l2_norm_clip=0"], "--l2_norm_clip"),
    (["--noise_multiplier=-1"], "--noise_multiplier"),
    (["--delta=0.5"], "--delta"),
    (["--num_partitions=100", "--batch_size=64"], "--num_partitions"),
    (["--model=transformer"], "--model"),
    (["--dataset=cifar"], "--dataset"),
    (["--dataset=fashion_mnist", "--data_dir=/nonexistent"], "--data_dir"),
    (["--epsilon=1e-9", "--epochs=50"], "--epsilon"),
    (["--aggregation=mean"], "--aggregation"),
    (["--accountant=gdp"], "--accountant"),
    (["--epochs=notanumber"], "--epochs: invalid value 'notanumber'"),
    (["--seed=-1"], "--seed: must be in [0, 4294967295], got -1"),
    (["--prior=laplace"], "--prior"),
    (["--prior_gamma=2"], "--prior_gamma"),  # the prior's `gamma` is --prior_gamma
    (["--num_samples_L=0"], "--num_samples_L"),
    (["--capacity=8"], "--capacity: does not apply to --model=privae"),
    (["positional"], "unexpected positional arguments"),
    (["--output_dir="], "--output_dir: is empty"),  # an unset shell variable; ran the job in runs/ before
    (["--flagfile=/nonexistent/job.cfg"], "--flagfile: cannot open '/nonexistent/job.cfg' (No such file"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_is_one_line_exit_2_and_no_output_dir(tmp_path, capsys, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)  # a default run folder (runs/...) would be made here
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", *FAST, *args, capsys=capsys)
    assert_one_line_error(proc, flag, out)


def test_a_corrupt_data_file_is_one_line_naming_data_dir_and_the_file(tmp_path, capsys, data_dir):
    (tmp_path / "data/abalone").mkdir(parents=True)
    target = tmp_path / "data/abalone/abalone.data"
    target.write_bytes((data_dir / "abalone/abalone.data").read_bytes()[:-100])  # truncated
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/run", *FAST, "--dataset=abalone",
                                          f"--data_dir={tmp_path}/data", capsys=capsys), "--data_dir", tmp_path / "run")
    assert line.startswith(f"error: --data_dir: {target}: md5 mismatch (got ")
    (tmp_path / "data/mnist").mkdir()
    target = tmp_path / "data/mnist/train-images-idx3-ubyte.gz"
    target.write_bytes(b"\x1f\x8b\x08")  # a truncated gzip
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/run", *FAST, "--dataset=mnist",
                                          f"--data_dir={tmp_path}/data", capsys=capsys), "--data_dir", tmp_path / "run")
    assert line == f"error: --data_dir: {tmp_path}/data has no mnist/train-labels-idx1-ubyte.gz"  # a partial copy
    for name in ("train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (tmp_path / "data/mnist" / name).symlink_to(data_dir / "mnist" / name)
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/run", *FAST, "--dataset=mnist",
                                          f"--data_dir={tmp_path}/data", capsys=capsys), "--data_dir", tmp_path / "run")
    assert line.startswith(f"error: --data_dir: {target}: md5 mismatch (got ")


def test_a_data_dir_without_the_files_is_refused_not_replaced_by_the_bundled_copy(tmp_path, capsys):
    (tmp_path / "data").mkdir()  # was: one INFO line, then training on the bundled MNIST
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/run", *FAST, "--dataset=mnist",
                                          f"--data_dir={tmp_path}/data", capsys=capsys), "--data_dir", tmp_path / "run")
    assert line.startswith(f"error: --data_dir: {tmp_path}/data has no mnist files (looked for "
                           "train-images-idx3-ubyte.gz, ") and f"in {tmp_path}/data/mnist/ and in {tmp_path}/data/)" in line


def test_epsilon_with_noise_multiplier_or_without_privacy_is_an_error(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    line = assert_one_line_error(train_py(f"--output_dir={out}", "--epsilon=3", "--noise_multiplier=1", capsys=capsys),
                                 "--noise_multiplier", out)
    assert "--epsilon" in line and "cannot be combined" in line
    line = assert_one_line_error(train_py(f"--output_dir={out}", "--epsilon=3", "--aggregation=none", capsys=capsys),
                                 "--epsilon", out)
    assert "--aggregation=none" in line
    # the same for the other families (flag files set --noise_multiplier; --epsilon then conflicts)
    assert_one_line_error(train_py(f"--output_dir={out}", f"--flagfile={REPO_ROOT}/flags/dpgan_mnist_cond.cfg",
                                   "--epsilon=3", capsys=capsys), "--noise_multiplier", out)
    assert_one_line_error(train_py(f"--output_dir={out}", "--model=filter", "--dataset=abalone",
                                   f"--data_dir={data_dir}", "--max_epsilon=3", capsys=capsys), "--max_epsilon", out)


def test_accountant_flag_is_used_and_recorded(tmp_path, capsys, fast_run):
    """--accountant=pld: the same events, a tighter epsilon, named in results.json; the RDP run of the
    same command (`fast_run`) gives the RDP value of the same events (checked against the accounting module)."""
    from tfpriv.privacy.accounting import get_accountant
    records = {"rdp": json.loads((fast_run[0] / "results.json").read_text())}
    proc = train_py(f"--output_dir={tmp_path / 'pld'}", *FAST, "--noise_multiplier=1.5", "--accountant=pld",
                    capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    records["pld"] = json.loads((tmp_path / "pld" / "results.json").read_text())
    for accountant in ("rdp", "pld"):
        assert records[accountant]["accountant"] == accountant
    rdp, pld = records["rdp"], records["pld"]
    events = [(rdp["sampling_rate"], rdp["effective_noise_multiplier"], rdp["steps"])]
    assert rdp["epsilon"] == pytest.approx(get_accountant("rdp").epsilon(events, rdp["delta"]), rel=1e-9)
    assert pld["epsilon"] == pytest.approx(get_accountant("pld").epsilon(events, pld["delta"]), rel=1e-6)
    assert pld["epsilon"] < rdp["epsilon"]
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/np", *FAST, "--aggregation=none",
                                          "--accountant=pld", capsys=capsys), "--accountant")
    assert "only applies to private training" in line


def test_unwritable_output_dir_is_one_line(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    line = assert_one_line_error(train_py(f"--output_dir={blocker}/run", *FAST, capsys=capsys), "--output_dir")
    assert "is not a directory" in line
    assert_one_line_error(train_py(f"--output_dir={blocker}", *FAST, capsys=capsys), "--output_dir")
    long_name = tmp_path / ("x" * 300) / "run"  # was an OSError traceback after loading and building
    line = assert_one_line_error(train_py(f"--output_dir={long_name}", *FAST, capsys=capsys), "--output_dir")
    assert line.endswith("a folder name longer than 255 bytes")
    monkeypatch.setattr(cli_main.os, "access", lambda path, mode: False)  # tests run as root
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/new/run", *FAST, capsys=capsys), "--output_dir")
    assert "permission denied" in line and not (tmp_path / "new").exists()


def test_output_dir_root_cannot_write_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    # /proc passes every permission check for root, yet nothing can be created there: was a traceback
    # after loading the data and building the model
    monkeypatch.setattr(cli_main, "execute", lambda *a: pytest.fail("work started"))
    line = assert_one_line_error(train_py("--output_dir=/proc/x/run", *FAST, capsys=capsys), "--output_dir", "/proc/x")
    assert line.startswith("error: --output_dir: cannot write to /proc/x/run (")
    # a writable folder passes, and the probe leaves nothing behind: neither new folders nor a file
    cli_main.check_writable(str(tmp_path / "new" / "run"))
    cli_main.check_writable(str(tmp_path))
    assert not any(tmp_path.iterdir())


def test_rerun_resumes_and_keeps_the_earlier_segments(tmp_path, capsys, fast_run):
    out = _copy(fast_run[0], tmp_path)  # the first run: SHARED, 1 epoch
    r1 = json.load(open(out / "results.json"))
    assert r1["epochs"] == r1["planned_epochs"] == 1 and len(r1["segments"]) == 1 and not r1["resumed"]
    second = train_py(f"--output_dir={out}", *SHARED, "--epochs=3", capsys=capsys)
    assert second.returncode == 0, second.stderr[-3000:]
    r2 = json.load(open(out / "results.json"))
    assert r2["resumed"] and r2["epochs"] == r2["planned_epochs"] == 3
    seg1, seg2 = r2["segments"]
    assert seg1 == r1["segments"][0]
    assert seg2["start_step"] == seg1["steps"] == r1["steps"] and seg2["steps"] == r2["steps"] - r1["steps"]
    assert seg2["start_epoch"] == 1 and seg2["epochs_completed"] == 3
    assert seg1["epsilon"] < seg2["epsilon"] == r2["epsilon"]  # epsilon continues, not restarts
    assert len(r2["history"]["loss"]) == 3 and r2["history"]["epsilon"][-1] == pytest.approx(r2["epsilon"])


# Tiny runs of each family, for re-running them once finished (the GAN's: stopped by --max_steps).
TINY_RUNS = {
    "privae": ["--model=privae", "--dataset=digits", "--architecture=mlp", "--latent_dim=2", "--batch_size=500",
               "--epochs=1", "--eval_examples=20", "--eval_importance_samples=2", "--regularizer=none"],
    "dpgan": ["--model=dpgan", "--dataset=fashion_mnist", "--data_dir={data_dir}", "--capacity=2", "--latent_size=4",
              "--batch_size=500", "--epochs=1", "--max_steps=2", "--eval_every=0", "--num_samples=20"],
    "filter": ["--model=filter", "--dataset=abalone", "--data_dir={data_dir}", "--vae_epochs=1", "--vae_batch_size=500",
               "--filter_epochs=1", "--filter_eval_epochs=1", "--filter_eval_min_steps=10", "--budget=0.5",
               "--nogaussian_baseline", "--nofilter_plots"],
}
NOISE_KEYS = ("noise_multiplier", "effective_noise_multiplier", "noise_stddev")


@pytest.mark.parametrize("family", list(TINY_RUNS))
def test_a_rerun_of_a_finished_run_records_the_noise_its_steps_used(tmp_path, capsys, monkeypatch, data_dir, family):
    """The same command again (--epsilon: before, the flag's default 3.5 was recorded), and then again with
    a --noise_multiplier of its own, take no step: results.json, every privacy_plan.json and the printed
    line keep the noise of the run's steps."""
    from tests.test_release_list import tiny_classifier
    from tfpriv.gan import job as gan_job
    monkeypatch.setattr(gan_job, "_classifier", lambda s: tiny_classifier())
    out = tmp_path / "run"
    args = [f"--output_dir={out}", "--verbose=0", "--aggregation=micro",
            *(a.format(data_dir=data_dir) for a in TINY_RUNS[family])]

    def records() -> list[dict]:
        results = json.load(open(out / "results.json"))
        plans = [json.load(open(p)) for p in sorted(out.rglob("privacy_plan.json"))]
        return [results, *([results["privacy"]] if "privacy" in results else []), *plans]

    first = train_py(*args, "--epsilon=3", capsys=capsys)
    assert first.returncode == 0, first.stderr[-3000:]
    before = records()
    assert before[0]["noise_multiplier"] != pytest.approx(3.5) and len(before) >= 2
    for rerun in ("--epsilon=3", "--noise_multiplier=0.7"):
        again = train_py(*args, rerun, capsys=capsys)
        assert again.returncode == 0, (rerun, again.stderr[-3000:])
        after = records()
        assert after[0]["resumed"] and after[0]["steps"] == before[0]["steps"] > 0, rerun  # no step taken
        assert len(after) == len(before), rerun
        for a, b in zip(after, before):
            for key in NOISE_KEYS:
                assert a[key] == pytest.approx(b[key], rel=1e-6), (rerun, key, a[key], b[key])
        if family != "filter":  # the filter prints each artefact's guarantee instead
            assert f"effective noise multiplier {before[0]['effective_noise_multiplier']:.4g}," in again.stdout


def test_max_epsilon_stop_is_printed(tmp_path, capsys):
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", *FAST, "--epochs=5", "--max_epsilon=1.0", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.load(open(out / "results.json"))
    assert results["budget_reached"] and results["epochs"] < results["planned_epochs"] == 5
    assert results["epsilon"] <= 1.0
    assert "stopped at --max_epsilon=1:" in proc.stdout and f"{results['epochs']} of 5 planned epochs" in proc.stdout


def test_ctrl_c_is_one_line_saying_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted_job(settings, output_dir):
        os.makedirs(os.path.join(output_dir, "checkpoints"))
        open(os.path.join(output_dir, "checkpoints", "checkpoint"), "w").close()
        raise KeyboardInterrupt

    replace_job(monkeypatch, "privae", run=interrupted_job)
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", capsys=capsys)
    assert proc.returncode == 130
    lines = error_lines(proc.stderr)
    assert lines == [f"interrupted: checkpoints are in {out}/checkpoints; run the same command again "
                     "(same --output_dir) to resume"]
    assert out.is_dir()  # left for the resume

    def interrupted_early(settings, output_dir):
        raise KeyboardInterrupt

    replace_job(monkeypatch, "privae", run=interrupted_early)
    proc = train_py(f"--output_dir={tmp_path}/early", capsys=capsys)
    assert proc.returncode == 130
    assert error_lines(proc.stderr) == [f"interrupted before the first checkpoint in {tmp_path}/early; run the same "
                                        "command again to start over"]


def test_an_error_after_training_keeps_the_checkpoints(tmp_path, capsys, monkeypatch):
    def fails_late(settings, output_dir):
        os.makedirs(os.path.join(output_dir, "checkpoints"))
        open(os.path.join(output_dir, "checkpoints", "checkpoint"), "w").close()
        raise UsageError("images: expected values in [0, 1]")

    replace_job(monkeypatch, "privae", run=fails_late)
    out = tmp_path / "run"
    assert_one_line_error(train_py(f"--output_dir={out}", capsys=capsys), "images: expected values")
    assert (out / "checkpoints" / "checkpoint").is_file()


def test_help_lists_tfprivs_flags_by_job(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main.parse_flags(["train.py", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    titles = ["shared flags (every model):", "--model=privae | vae (", "--model=dpwgan_gp | dpgan (", "--model=filter ("]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)
    for flag in ("--model:", "--epsilon:", "--prior:", "--capacity:", "--vae_epochs:"):
        assert flag in text
    for internal in ("--logtostderr", "--only_check_args", "--tt_check_filter", "--flagfile:"):
        assert internal not in text
    assert "--helpfull" in text
    assert text.startswith("usage: tfpriv [flags]")  # the console script (was tfpriv-train, its older name)


def test_sample_mode_needs_a_trained_run(tmp_path, capsys):
    assert_one_line_error(train_py("--mode=sample", f"--output_dir={tmp_path}", capsys=capsys), "--output_dir")
    assert_one_line_error(train_py("--mode=sample", capsys=capsys), "--output_dir")
    assert_one_line_error(train_py("--mode=sample", "--model=filter", f"--output_dir={tmp_path}", capsys=capsys),
                          "--mode")


def test_job_errors_name_library_parameters_and_the_cli_maps_them(tmp_path, capsys, monkeypatch):
    def fails(settings, output_dir):
        raise UsageError("batch_size: must be between 1 and the dataset size 3341, got 100000")

    for name in ("privae", "filter"):
        replace_job(monkeypatch, name, run=fails)
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/a", capsys=capsys), "--batch_size")
    assert line == "error: --batch_size: must be between 1 and the dataset size 3341, got 100000"
    line = assert_one_line_error(train_py(f"--output_dir={tmp_path}/b", "--model=filter", capsys=capsys),
                                 "--vae_batch_size")
    assert line == "error: --vae_batch_size: must be between 1 and the dataset size 3341, got 100000"


# -- the real script ---------------------------------------------------------------------------------
def test_a_run_writes_results_and_sample_mode_reads_it(tmp_path, capsys, fast_run):
    out = _copy(fast_run[0], tmp_path)
    assert "epsilon = " in fast_run[1].stdout
    results = json.load(open(out / "results.json"))
    for key in ("model", "dataset", "aggregation", "epsilon", "delta", "noise_multiplier",
                "effective_noise_multiplier", "sampling_rate", "steps", "epochs", "planned_epochs", "segments",
                "budget_reached", "metrics"):
        assert key in results
    assert results["aggregation"] == "termwise" and 0 < results["epsilon"] < 100
    for key in ("hoyer_sparsity", "log_likelihood", "mmd"):
        assert key in results["metrics"]
    assert (out / "checkpoints").is_dir() and (out / "logs").is_dir() and (out / "privacy_plan.json").is_file()
    proc = train_py("--mode=sample", f"--output_dir={out}", "--num_samples=10", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "samples.npz").exists() and (out / "samples_grid.png").exists()
    assert "10 samples written to" in proc.stdout


def loaded_tensorflow(pid: int) -> bool:
    """Whether the process has mapped TensorFlow's shared library (its import has started)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return "tensorflow" in maps.read()
    except FileNotFoundError:
        return False


# what pip's `tfpriv-train` script runs (pyproject.toml's [project.scripts])
CONSOLE_SCRIPT = "import sys; from tfpriv.cli.launch import entry_point; sys.exit(entry_point())"


def test_the_console_script_is_the_launcher():
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"tfpriv": "tfpriv.cli.launch:entry_point", "tfpriv-train": "tfpriv.cli.launch:entry_point"}


def interrupt_when(proc: subprocess.Popen, ready, wait: float, poll: float) -> tuple[str, str]:
    """Sends SIGINT to `proc` once `ready()` holds (within `wait` seconds); its (stdout, stderr)."""
    try:
        deadline = time.time() + wait
        while not ready() and time.time() < deadline and proc.poll() is None:
            time.sleep(poll)
        assert ready(), proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("command", [[TRAIN], ["-c", CONSOLE_SCRIPT]], ids=["train.py", "tfpriv-train"])
def test_ctrl_c_while_tensorflow_loads_is_one_line_exit_130(tmp_path, command):
    # was a KeyboardInterrupt traceback from inside `import tensorflow`
    out = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, *command, f"--output_dir={out}"], cwd=REPO_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = interrupt_when(proc, lambda: loaded_tensorflow(proc.pid), wait=120, poll=0.005)
    assert proc.returncode == 130, stderr[-2000:]
    assert error_lines(stderr) == ["interrupted while starting (nothing was written)"]
    assert stdout == "" and not out.exists()


def test_ctrl_c_during_training_stops_with_one_line_and_the_run_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    args = [f"--output_dir={out}", "--epochs=500", "--aggregation=micro", "--regularizer=none",
            "--eval_importance_samples=5", "--eval_examples=50", "--verbose=0", "--seed=1"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, TRAIN, *args], cwd=REPO_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = interrupt_when(proc, lambda: (out / "checkpoints" / "checkpoint").exists(), wait=240, poll=0.2)
    assert proc.returncode == 130, stderr[-2000:]
    assert error_lines(stderr) == [f"interrupted: checkpoints are in {out}/checkpoints; run the same command "
                                   "again (same --output_dir) to resume"], stderr[-2000:]
    # the same command resumes (here with fewer epochs than the checkpoint holds, so it finishes at once)
    done = train_py(*[a if a != "--epochs=500" else "--epochs=1" for a in args], capsys=capsys)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.load(open(out / "results.json"))["resumed"]
