"""`train.py --tune`: a tuning job whose trials are normal runs; what it releases and the job's epsilon.

The job's epsilon is checked against an independent computation (Papernot & Steinke's bound,
via dp_accounting, for the worst of the space's batch sizes; naive composition of the trials);
bad tuning flags are one line on stderr, exit code 2 and no output folder.
"""
import json
import os
import re
import socket
import subprocess
import sys
import zipfile

import dp_accounting
import numpy as np
import pytest

from tests.cli.helpers import TRAIN, assert_one_line_error, subprocess_train_py, train_py
from tests.conftest import REPO_ROOT, saved_flags
from tests.privacy.reference import composed_epsilon, repeat_and_select_epsilon
import tfpriv
from tfpriv.cli.tuning import TrialPlanner, report
from tfpriv.data.sampling import sampling_rate_and_steps
from tfpriv.cli.flags import FLAGS, settings_from_flags
from tfpriv.gan import job as gan_job
from tfpriv.privae import job as privae_job
from tfpriv.privacy.accounting import training_event
from tfpriv.privacy.tuning import TrialCount


# A tiny private VAE on the generated pinwheel data: one epoch of a few steps per trial.
TINY = ["--model=privae", "--dataset=pinwheel", "--pinwheel_hidden=4", "--latent_dim=2", "--regularizer=none",
        "--prior=normal", "--aggregation=micro", "--epochs=1", "--eval_importance_samples=2", "--eval_examples=50",
        "--noise_multiplier=1.5", "--verbose=0"]
SPACE = '{"batch_size": {"type": "choice", "values": [100, 200]}, "l2_norm_clip": null}'


def check_job_epsilon(record: dict, results: list[dict], count: TrialCount) -> None:
    """tuning.json's privacy against an independent computation: one trial's event for each batch
    size of SPACE (the other hyperparameters do not change it); the job is the worst of them."""
    privacy, first = record["privacy"], results[0]
    n, delta, z = first["num_examples"], first["delta"], first["effective_noise_multiplier"]
    events = [training_event([(q, z, steps)]) for q, steps in
              (sampling_rate_and_steps(n, b, "poisson") for b in (100, 200))]
    k = privacy["trials_run"]
    assert privacy["delta"] == delta and privacy["accountant"] == "rdp" and "Papernot & Steinke" in privacy["analysis"]
    assert privacy["epsilon"] == pytest.approx(max(repeat_and_select_epsilon(e, count, delta) for e in events),
                                               rel=1e-6)
    assert privacy["epsilon_naive_composition"] == pytest.approx(max(composed_epsilon(e, k, delta) for e in events),
                                                                 rel=1e-6)
    assert privacy["epsilon"] > privacy["epsilon_one_trial"] >= max(r["epsilon"] for r in results)


def trial_results(record: dict, out) -> list[dict]:
    """Each trial's results.json, checked against its record in tuning.json."""
    results = []
    for trial in record["trials"]:
        assert trial["status"] == "COMPLETED" and trial["values"]["batch_size"] in (100, 200)
        assert os.path.dirname(trial["results"]) == str(out / "private" / "trials" / trial["trial_id"])
        results.append(json.loads(open(trial["results"]).read()))
        assert results[-1]["batch_size"] == trial["values"]["batch_size"]
        assert trial["objective"] == pytest.approx(results[-1]["metrics"][record["objective"]["name"]])
    return results


def test_random_search_job_writes_trials_the_jobs_epsilon_and_a_console_of_only_what_it_releases(tmp_path):
    """A random-search job (the real script, at the default verbosity): the drawn K trials, each a
    run whose results.json matches its record, and the job's epsilon against the independent
    computation. Issue 46.6: the job's whole console output (stdout and stderr of the process) is the
    released report (the job's epsilon, the best trial's values and score), nothing of K or the other
    trials; what the trials printed (keras-tuner's "Search: Running Trial #n" tables, Keras's progress
    with each trial's epsilon) is in private/."""
    out = tmp_path / "tune"
    count, seed = TrialCount("geometric", 2.0), 0
    k = count.sample(np.random.default_rng(seed))  # the job draws K from --seed: 1 here
    proc = subprocess_train_py(f"--output_dir={out}", *(a for a in TINY if a != "--verbose=0"), "--tune",
                               "--tuner=random", "--trial_count=geometric", "--mean_trials=2",
                               f"--search_space={SPACE}", "--objective=reconstruction_error", f"--seed={seed}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "private" / "tuning.json").read_text())
    assert record["trials_drawn"] == k == len(record["trials"]) == 1
    assert json.loads((out / "private" / "tuning_plan.json").read_text())["trials_drawn"] == k  # before the trials
    results = trial_results(record, out)
    assert record["best"]["trial_id"] == record["trials"][0]["trial_id"]
    check_job_epsilon(record, results, count)
    released = json.loads((out / "tuning.json").read_text())
    assert released["best"]["values"] == record["best"]["values"] and (out / "best" / "results.json").is_file()
    assert f"epsilon of the whole job = {record['privacy']['epsilon']:.4g}" in proc.stdout
    assert "trials (K =" not in proc.stdout and "naive composition" not in proc.stdout  # K stays private
    assert proc.stdout == report(str(out), released) + "\n" and proc.stderr == "", "the console is the report only"
    console = (out / "private" / "console-tuner0.log").read_text()
    assert "Search: Running Trial #1" in console and "epsilon:" in console, "the trials' output is in private/"


def released_strings(value, where=""):
    """(where, key or string) for every key and string value of a JSON record."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key}", key
            yield from released_strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from released_strings(item, f"{where}[{i}]")
    elif isinstance(value, str):
        yield where, value


def test_nothing_under_best_names_a_trial_a_count_or_a_private_path(tmp_path, capsys, monkeypatch):
    """Issue 46.3: every file under best/ (its JSON keys and strings, its file names, its bytes and the
    members of its archives) names no trial, no count of trials and no path into private/; what
    names a path names the released copy. K = 2 without --seed (a release: trial seeds from OS
    entropy); the best trial is the second, whose position bounds K from below."""
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng: 2)
    out = tmp_path / "tune"
    proc = train_py(f"--output_dir={out}", *TINY, "--tune", "--mean_trials=2", f"--search_space={SPACE}",
                    "--objective=reconstruction_error", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "private" / "tuning.json").read_text())
    assert len(record["trials"]) == 2
    trial = out / "private" / "trials" / record["best"]["trial_id"]
    forbidden = [b"private", b"trial", os.fsencode(trial)]
    files = sorted(p for p in (out / "best").rglob("*") if p.is_file())
    assert files and {p.name for p in files} >= {"results.json", "privacy_plan.json", "saved_model.pb"}
    for path in files:
        where = str(path.relative_to(out / "best"))
        assert not any(f.decode() in where for f in forbidden), where
        if path.name.startswith("events.out.tfevents."):  # no process-wide writer counter (one per trial)
            assert re.fullmatch(r"events\.out\.tfevents\.\d+\.v2", path.name), where
        data = path.read_bytes()
        members = ([zipfile.ZipFile(path).read(m) for m in zipfile.ZipFile(path).namelist()]
                   if zipfile.is_zipfile(path) else [])
        assert not any(f in blob for f in forbidden for blob in [data, *members]), where
        if path.suffix == ".json":
            for key, text in released_strings(json.loads(data)):
                assert not any(f.decode() in text.lower() for f in forbidden), (where, key, text)
    released = json.loads((out / "best" / "results.json").read_text())
    original = json.loads((trial / "results.json").read_text())
    assert released["saved_model"]["path"] == str(out / "best" / "saved_model") and released["seed"] is None
    statement = released["privacy_statement"]
    assert {k: v for k, v in statement.items() if k != "tuning"} == original["privacy_statement"]
    assert statement["tuning"]["job_epsilon"] > statement["epsilon"]["rdp"]    # the job's budget is added
    assert {**released, "saved_model": None, "privacy_statement": None} == \
        {**original, "saved_model": None, "privacy_statement": None}
    assert tfpriv.load(str(out / "best")) is not None


@pytest.mark.parametrize("args,flag", [
    (["--tune", "--tuner=grid"], "--tuner"),
    (["--tune", "--trial_count=uniform"], "--trial_count"),
    (["--tune", "--mean_trials=0.5"], "--mean_trials"),
    (["--tune", "--trial_count=negative_binomial", "--trial_count_shape=0"], "--trial_count_shape"),
    (["--tune", "--objective=accuracy"], "--objective"),
    (["--tune", '--search_space={"batch_size": {"type": "int", "min": 50, "max": 200}}'], "--search_space"),
    (["--tune", '--search_space={"nope": {"type": "choice", "values": [1]}}'], "--search_space"),
    (["--tune", '--search_space={"seed": {"type": "choice", "values": [1, 2]}}'], "--search_space"),
    (["--tune", "--search_space={not json"], "--search_space"),
    (["--tune", '--search_space={"batch_size": {"type": "choice", "values": [100, "all"]}}'], "--search_space"),
    (["--tune", '--search_space={"batch_size": {"type": "choice", "values": [100.5]}}'], "--search_space"),
    (["--tune", '--search_space={"learning_rate": {"type": "float", "min": "small", "max": 1}}'], "--search_space"),
    (["--tune", "--search_space=/nonexistent/space.json"], "--search_space"),
    (["--tune", '--search_space={"learning_rate": {"type": "float", "min": -1, "max": 1}}'], "--search_space"),
    (["--tune", '--search_space={"epsilon": {"type": "choice", "values": [1, 2]}}'], "--search_space"),
    (["--tune", "--tuner=hyperband"], "--search_space"),
    (["--tune", "--max_trials=2"], "--max_trials"),  # P(K > 2) = 0.64 for a geometric K with mean 5
    (["--tune", "--tuner=hyperband", "--max_trials=20",
      '--search_space={"epochs": {"type": "choice", "values": [1, 2]}}'], "--max_trials"),
    (["--tune", "--tuner=hyperband", "--mean_trials=3",
      '--search_space={"epochs": {"type": "choice", "values": [1, 2]}}'], "--mean_trials"),
    (["--tune", "--trial_count_shape=2"], "--trial_count_shape"),
    (["--max_trials=3"], "--max_trials"),
    (["--tune", "--mode=sample"], "--tune"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_tuning_flags_are_one_line_exit_2(tmp_path, capsys, args, flag):
    out = tmp_path / "tune"
    assert_one_line_error(train_py(f"--output_dir={out}", *TINY, *args, capsys=capsys), flag, out)


def test_a_cap_that_does_not_fit_says_which_caps_and_means_do(tmp_path, capsys):
    """--max_trials=3 with the default geometric K (mean 5): refused in one line that gives the fix."""
    out = tmp_path / "tune"
    line = assert_one_line_error(train_py(f"--output_dir={out}", *TINY, "--tune", "--max_trials=3",
                                          f"--search_space={SPACE}", capsys=capsys), "--max_trials", out)
    fix = re.search(r"P\(K > 3\) = 0\.512 .*; use --max_trials=(\d+) or --mean_trials=([\d.]+)$", line)
    assert fix and 50 < int(fix.group(1)) < 100 and 1 <= float(fix.group(2)) < 1.1, line


def test_a_cap_that_fits_in_delta_is_accounted(tmp_path, capsys):
    """--max_trials with a Poisson K: the job's delta pays for P(K > cap); no trial is drawn for seed 3."""
    out = tmp_path / "tune"
    proc = train_py(f"--output_dir={out}", *TINY, "--tune", "--trial_count=poisson", "--mean_trials=1",
                    "--max_trials=12", f"--search_space={SPACE}", "--seed=3", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    privacy = json.loads((out / "private" / "tuning.json").read_text())["privacy"]
    p = TrialCount("poisson", 1.0).tail(12)
    assert privacy["prob_trials_above_cap"] == pytest.approx(p)
    assert privacy["delta_uncapped_bound"] + (1 + np.exp(privacy["epsilon"])) * p <= privacy["delta"]
    assert privacy["trials_run"] == 0 and privacy["epsilon"] > privacy["epsilon_one_trial"]


def test_the_gan_plans_a_tuning_job(tmp_path, capsys):
    """The GAN job with its default space and objective (PriVAE: above); K = 0 is drawn for seed 3
    (Poisson, mean 1), so only the plans are made: the job's epsilon is still the bound for E[K] = 1
    over the space's batch sizes on MNIST's 60000 training examples."""
    out = tmp_path / "tune"
    proc = train_py(f"--output_dir={out}", "--model=dpgan", "--tune", "--trial_count=poisson", "--mean_trials=1",
                    "--seed=3", "--verbose=0", "--epochs=1", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "tuning.json").read_text())
    assert record["best"] is None and record["objective"]["name"] == "inception_score"
    assert record["objective"]["reads"] == "test"
    events = [training_event([(q, 1.0, steps)]) for q, steps in
              (sampling_rate_and_steps(60000, b, "poisson") for b in (64, 128))]
    count = TrialCount("poisson", 1.0)
    assert record["privacy"]["epsilon"] == pytest.approx(max(repeat_and_select_epsilon(e, count, 1e-5) for e in events),
                                                         rel=1e-6)


def test_the_gan_chooses_among_trials_by_scores_of_the_test_split_only(tmp_path):
    """IS, FD and label agreement from the evaluation classifier fitted on the test split (every trial
    computes them: --public_scores), downstream accuracy tested on the test split; never the default
    classifier, which is fitted on the GAN's private training images."""
    with saved_flags():
        FLAGS(["train.py", "--model=dpgan"])
        planner = TrialPlanner(gan_job.JOB, "dpgan", FLAGS, gan_job.JOB.settings(model="dpgan"),
                               str(tmp_path))
        assert planner.settings({}).public_scores
    for objective in gan_job.TUNING.objectives:
        assert objective.reads == "test"
        assert all(metric.endswith("_public") or metric == "downstream_accuracy" for metric in objective.terms)


@pytest.mark.parametrize("flag", ["--eval_protocol=dpimagebench", "--nopublic_scores"])
def test_a_setting_tune_fixes_for_every_trial_is_refused_not_overridden(tmp_path, capsys, flag):
    """The GAN's trials run --eval_protocol=tfpriv with --public_scores (the tuning job's accounting
    covers training only; its choice reads the test split only): a user asking otherwise is told so."""
    out = tmp_path / "tune"
    line = assert_one_line_error(train_py(f"--output_dir={out}", "--model=dpgan", "--tune", "--conditional",
                                          flag, capsys=capsys), flag.split("=")[0].replace("--no", "--"), out)
    assert "--tune's trials" in line, line


def test_the_filter_cannot_choose_among_private_trials(tmp_path, capsys):
    """The filter's objectives come from classifiers fitted on training codes (through a filter fitted
    without privacy): with a private stage 1 they are refused in one line, before any output."""
    out = tmp_path / "tune"
    line = assert_one_line_error(train_py(
        f"--output_dir={out}", "--model=filter", "--tune", "--vae_epochs=1", "--aggregation=micro",
        "--noise_multiplier=1.0", "--verbose=0", capsys=capsys), "--objective", out)
    assert "utility_minus_private reads private data" in line and "--model=filter has none" in line


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_distributed_tuning_one_chief_two_workers_on_loopback(tmp_path):
    """keras-tuner's chief/worker mode: the chief draws K and holds the oracle, the workers run the
    trials; tuning.json (written by the chief) accounts every trial any worker ran."""
    out, port = tmp_path / "tune", free_loopback_port()
    args = [sys.executable, TRAIN, f"--output_dir={out}", *TINY, "--tune", "--mean_trials=2",
            f"--search_space={SPACE}", "--seed=5"]  # K = 2
    procs = {}
    try:
        for tuner_id in ("tuner0", "tuner1", "chief"):  # the workers wait for the chief's oracle
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERASTUNER_TUNER_ID=tuner_id,
                       KERASTUNER_ORACLE_IP="127.0.0.1", KERASTUNER_ORACLE_PORT=str(port))
            procs[tuner_id] = subprocess.Popen(args, cwd=REPO_ROOT, env=env, text=True,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        done = {name: proc.communicate(timeout=300) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, done[name][1][-3000:])
    record = json.loads((out / "private" / "tuning.json").read_text())
    assert record["trials_drawn"] == 2 and record["privacy"]["trials_run"] == 2
    ran = {t["trial_id"]: t["tuner_id"] for t in record["trials"]}
    assert sorted(ran.values()) == ["tuner0", "tuner1"]  # one trial each
    for name in ("tuner0", "tuner1"):  # a worker's console names none of its trials (issue 46.6)
        assert done[name][0].strip() == (f"tuning worker {name} finished (its trials: {out}/private); "
                                         f"the chief writes {out}/tuning.json")
        assert (out / "private" / f"console-{name}.log").is_file()
    results = trial_results(record, out)
    assert len({r["seed"] for r in results}) == 2  # every trial has its own random streams
    assert record["best"]["objective"] == max(t["objective"] for t in record["trials"])  # log_likelihood: max
    check_job_epsilon(record, results, TrialCount("geometric", 2.0))
    assert "epsilon of the whole job" in done["chief"][0]


def test_the_neutral_hyperparameters_do_not_change_a_trials_privacy_event(tmp_path):
    """Ranges are allowed only for hyperparameters that leave the trial's DpEvent unchanged: checked
    on a term-wise PriVAE with a batch-wise term and partitions (the clip norms' hardest case)."""
    with saved_flags():
        FLAGS(["train.py", "--dataset=pinwheel", "--epochs=1", "--aggregation=termwise", "--regularizer=mmd",
               "--num_partitions=2", "--batch_size=40"])
        settings = settings_from_flags(privae_job.JOB, FLAGS)
        planner = TrialPlanner(privae_job.JOB, "privae", FLAGS, settings, str(tmp_path / "tune"))
        base = planner.event({})
        assert isinstance(base, dp_accounting.ComposedDpEvent)
        for name in privae_job.TUNING.neutral:
            for value in (1e-3, 5.0):
                assert planner.event({name: value}) == base, name
        assert planner.event({"batch_size": 80}) != base  # a choice that does change it
    assert not (tmp_path / "tune").exists()


def test_ctrl_c_keeps_the_trials_and_the_drawn_count(tmp_path, capsys, monkeypatch):
    """Ctrl-C during a trial: exit 130, one line saying where the trials' checkpoints are; the
    folder (with K in tuning_plan.json) is kept, so the same command continues the job."""
    def interrupted_trial(self, values, trial_dir):
        os.makedirs(os.path.join(trial_dir, "checkpoints"))
        open(os.path.join(trial_dir, "checkpoints", "ckpt-1.index"), "w").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(TrialPlanner, "run_trial", interrupted_trial)
    out = tmp_path / "tune"
    proc = train_py(f"--output_dir={out}", *TINY, "--tune", "--mean_trials=2", f"--search_space={SPACE}", "--seed=5",
                    capsys=capsys)
    assert proc.returncode == 130
    assert proc.stderr.strip() == (f"interrupted: checkpoints are in {out / 'private' / 'trials'}; run the same "
                                   "command again "
                                   "(same --output_dir) to resume")
    assert json.loads((out / "private" / "tuning_plan.json").read_text())["trials_drawn"] == 2


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_guide_tuning_section_links_to_the_derivations_and_caps_k_within_delta(tmp_path, capsys):
    """The user guide's tuning section: its links into docs/privacy.md name existing sections, and its
    command's --max_trials is at least the smallest cap that fits in delta (which a too-small cap's
    refusal names, planning only)."""
    section = (REPO_ROOT / "docs" / "guide.md").read_text().split("### Tuning (`--tune`)")[1].split("\n#")[0]
    headings = re.findall(r"^#+ (.+)$", (REPO_ROOT / "docs" / "privacy.md").read_text(), re.M)
    anchors = re.findall(r"\(privacy\.md#([\w-]+)", section)
    assert anchors and set(anchors) <= {github_anchor(h) for h in headings}
    command = re.search(r"^python train\.py (--tune .*--max_trials=(\d+).*)$", section, re.M)
    args = [a for a in command.group(1).split() if not a.startswith(("--output_dir", "--max_trials"))]
    out = tmp_path / "tune"
    line = assert_one_line_error(train_py(*args, f"--output_dir={out}", "--max_trials=3", capsys=capsys),
                                 "--max_trials", out)
    assert int(command.group(2)) >= int(re.search(r"use --max_trials=(\d+)", line).group(1))


def test_the_job_epsilon_line_carries_the_shuffle_caveat():
    """Issue 31 P4 for --tune: trials on shuffled batches qualify the job's epsilon on the line that prints it."""
    from tfpriv.training.runner import SHUFFLE_NOTE as SHUFFLE_CAVEAT
    privacy = {"epsilon": 1.5, "delta": 1e-5, "analysis": "Papernot & Steinke 2022", "epsilon_one_trial": 1.0,
               "trial_count": {"distribution": "geometric", "mean": 3}}
    result = {"tuner": "random", "privacy": privacy, "best": None, "private": "private/ is not released"}
    assert "caveat" not in report("out", result)
    line = [l for l in report("out", {**result, "privacy": {**privacy, "epsilon_caveat": SHUFFLE_CAVEAT}}).splitlines()
            if l.startswith("epsilon of the whole job")][0]
    assert f"[{SHUFFLE_CAVEAT}]" in line
