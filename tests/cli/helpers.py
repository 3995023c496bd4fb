"""Running `train.py` in tests: in-process (fast: TensorFlow is already imported) or as a subprocess."""
from __future__ import annotations

import os
import subprocess
import dataclasses
import sys
import types

from absl.testing import flagsaver

from tests.conftest import REPO_ROOT, saved_flags
from tfpriv import families
from tfpriv.cli import main as cli_main
from tfpriv.jobs import job as job_registry

TRAIN = str(REPO_ROOT / "train.py")


def train_py(*args: str, capsys) -> types.SimpleNamespace:
    """`python train.py ARGS` in this process: flags parsed as train.py parses them (flag files
    included), main() run, every flag restored afterwards. Returns (returncode, stdout, stderr)."""
    argv = ["train.py", *map(str, args)]
    capsys.readouterr()
    with flagsaver.flagsaver(), saved_flags():  # absl's flags, and tfpriv's
        try:
            cli_main.main(cli_main.parse_flags(argv))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return types.SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def subprocess_train_py(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, TRAIN, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, env=env, **kwargs)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.strip().splitlines() if line.strip()]


def assert_one_line_error(proc, flag: str, out_dir=None) -> str:
    """Exit code 2, exactly one stderr line `error: ...` naming `flag`, and no output folder."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error:") and flag in lines[0], proc.stderr[-2000:]
    if out_dir is not None:
        assert not os.path.exists(out_dir)
    return lines[0]


def replace_job(monkeypatch, model: str, **changes) -> None:
    """For one test, the job registered as `model` with `changes` (e.g. another `run`)."""
    family = families.family(model)
    registry = job_registry.FAMILIES.copy()
    for name in family.names:
        registry.remove(name)
    monkeypatch.setattr(job_registry, "FAMILIES", registry)
    job_registry.register(dataclasses.replace(family, job=dataclasses.replace(family.job, **changes)))
