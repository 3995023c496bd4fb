"""Hypothesis over train.py's flags: a combination either validates or is ONE line `error: --flag: ...`
with exit code 2, no traceback and no output folder left behind.

The flags are discovered from the job registry (every flag some job reads, with values chosen by the
flag's type), so a new flag is fuzzed without editing this file. Each example runs train.py's main()
in-process with everything a training run does before its first step (flag parsing, settings, the
job's validate -> load -> build -> plan: `TrainingRun.setup`), then stops instead of training.
"""
import os
import re

import pytest
from absl import flags
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.cli.helpers import error_lines, subprocess_train_py, train_py
from tests.conftest import shared_data_dir
from tfpriv import families
from tfpriv.data.registry import DATASETS
from tfpriv.jobs import pipeline
from tfpriv.cli.flags import FLAGS
from tfpriv.cli.flags import CONTROL_FLAGS


# What train.py does instead of one training run (--tune, --audit, --strategy) is not fuzzed here:
# each is its own job with its own tests, and --num_cpu_devices reconfigures this process's devices.
JOBS = {name: family.job for name, family in families.families().items()}
FUZZED = sorted({name for job in JOBS.values() for name in job.fields()} - set(CONTROL_FLAGS))

# Words the string flags take somewhere (a wrong one for a flag is as useful as a right one), every
# string flag's default, and random text. `pld` is left out: its calibration takes seconds per example.
WORDS = sorted(({"none", "micro", "batch", "termwise", "poisson", "shuffle", "rdp", "fast", "per_example",
                 "vectorized", "bookkeeping", "reweight", "normal", "sparse", "mixture", "mmd", "kl_pq", "kl",
                 "chi2", "linear", "mlp", "conv", "pinwheel", "public", "train", "auto", "sgd", "adam",
                 "bernoulli", "gaussian", "laplace", "ce", "confusion", "digit", "parity", "digit_ge5", "gender",
                 "income", "sex", "rings", "8,8", "16", "tfds:nope"} | set(DATASETS)
                | {FLAGS[n].default for n in FUZZED if isinstance(FLAGS[n].default, str)}) - {"pld", "adult"})
# Per type: values that are often valid, and values that are wrong for most flags.
PLAUSIBLE = {"int": ["1", "2", "3", "4", "10", "64"], "float": ["1e-6", "0.01", "0.5", "1", "3", "8"],
             "list": ["", "0,1", "digit_ge5:parity", "parity:digit_ge5,digit:parity"]}
WRONG = {"int": ["-1", "0", "1.5", "abc", ""], "float": ["-1", "0", "1e9", "nan", "inf", "-inf", "abc"],
         "list": ["a", "0.1,abc", "x:y:z"]}


def _values(name: str) -> st.SearchStrategy:
    """Command-line arguments for flag `name` by its type: mostly plausible values, one in five wrong."""
    if name == "data_dir":
        return st.sampled_from([f"--data_dir={shared_data_dir()}", "--data_dir=/nonexistent"])
    kind = FLAGS[name].flag_type()
    if kind == "bool":
        return st.sampled_from([f"--{name}", f"--no{name}", f"--{name}", f"--no{name}", f"--{name}=maybe"])
    if kind in PLAUSIBLE:
        pool = st.one_of(*[st.sampled_from(PLAUSIBLE[kind])] * 4, st.sampled_from(WRONG[kind]))
    else:
        pool = st.one_of(*[st.sampled_from(WORDS)] * 4, st.text(max_size=6))
    return pool.map(lambda v: f"--{name}={v}")


@st.composite
def command_lines(draw) -> list[str]:
    """--model, up to four of the job's flags, sometimes a flag of another job or a --mode."""
    model = draw(st.sampled_from([*JOBS] * 4 + ["transformer"]), label="model")
    own = sorted(set(JOBS[model].fields()) & set(FUZZED)) if model in JOBS else FUZZED
    names = draw(st.lists(st.sampled_from(own), max_size=4, unique=True), label="flags")
    if draw(st.integers(0, 9), label="foreign") == 0:
        names.append(draw(st.sampled_from(FUZZED), label="foreign flag"))
    args = [f"--model={model}"] + [draw(_values(n), label=n) for n in dict.fromkeys(names)]
    if draw(st.integers(0, 9), label="mode") == 0:
        args.append(draw(st.sampled_from(["--mode=sample", "--mode=fit"]), label="mode value"))
    return args


class Validated(BaseException):
    """Raised where training would start: every check of the run has passed."""


def _setup_only(self):
    self.setup()
    raise Validated()


@pytest.fixture
def validate_only(monkeypatch):
    monkeypatch.setattr(pipeline.TrainingRun, "run", _setup_only)


# --output_dir's last folder: usual, random text (".", "..", spaces, non-ASCII) or longer than NAME_MAX.
FOLDER_NAMES = st.one_of(st.just("run"), st.just("run"), st.integers(250, 300).map(lambda n: "x" * n),
                         st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                                 min_size=1, max_size=12))


@settings(max_examples=60)
@given(args=command_lines(), folder=FOLDER_NAMES)
def test_flag_combinations_validate_or_fail_with_one_line(tmp_path_factory, capsys, validate_only, args, folder):
    out = tmp_path_factory.mktemp("fuzz") / folder
    existed = os.path.exists(out)  # "." or ".."
    args = ["--verbose=0", "--seed=1", f"--output_dir={out}", *args]  # a fuzzed value given later wins
    try:
        proc = train_py(*args, capsys=capsys)
    except Validated:
        model = next(a for a in reversed(args) if a.startswith("--model="))[len("--model="):]
        read = set(JOBS[model].fields()) | {"model", "mode", "output_dir"}
        given_flags = {re.match(r"--(\w+)", a).group(1) for a in args}
        given_flags = {f if f in FLAGS else f[2:] for f in given_flags}  # --nofoo -> foo
        assert given_flags <= read, f"a flag the job does not read was accepted: {given_flags - read}"
        event("valid")
        return
    assert proc.returncode == 2, (args, proc.returncode, proc.stderr[-2000:])
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, (args, proc.stderr[-2000:])
    match = re.match(r"^error: --(\w+): \S", lines[0])
    assert match and match.group(1) in FLAGS, (args, lines[0])
    event(f"error: --{match.group(1)}")
    assert existed or not os.path.exists(out), (args, lines[0])


@pytest.mark.parametrize("arg, message", [
    ("--epochs=abc", "error: --epochs: invalid value 'abc' (invalid literal for int() with base 10: 'abc')"),
    ("--l2_norm_clip=", "error: --l2_norm_clip: invalid value '' (could not convert string to float: '')"),
    ("--nosuch_flag=1", "error: --nosuch_flag: unknown flag (--help lists the flags)"),
])  # fmt: skip
def test_parse_errors_name_the_flag(tmp_path, capsys, arg, message):
    proc = train_py(arg, f"--output_dir={tmp_path}/run", capsys=capsys)
    assert (proc.returncode, error_lines(proc.stderr)) == (2, [message])
    assert not os.path.exists(tmp_path / "run")


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    """absl's app.run and TensorFlow's logging are only in a real process: one subprocess."""
    proc = subprocess_train_py("--model=dpgan", "--critic_steps=0", f"--output_dir={tmp_path}/run")
    assert proc.returncode == 2 and error_lines(proc.stderr) == ["error: --critic_steps: must be >= 1, got 0"], \
        proc.stderr[-2000:]
    assert not os.path.exists(tmp_path / "run")
