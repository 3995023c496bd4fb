"""Every flag file shipped in flags/ or in a study's experiments/<study>/flags/ parses and passes
the job's flag checks (no training run).

The docs and the study READMEs quote these files as the commands of their results; a flag renamed
or a check tightened must not leave one of them failing with exit code 2 for a user.
"""
import pytest

from tests.conftest import REPO_ROOT, saved_flags
from tfpriv.cli import main as cli_main

PRODUCT_FLAG_FILES = sorted((REPO_ROOT / "flags").glob("*.cfg"))
STUDY_FLAG_FILES = sorted((REPO_ROOT / "experiments").glob("*/flags/*.cfg"))
FLAG_FILES = PRODUCT_FLAG_FILES + STUDY_FLAG_FILES


def test_both_flag_folders_are_found():
    assert len(PRODUCT_FLAG_FILES) >= 20 and len(STUDY_FLAG_FILES) >= 12


@pytest.mark.parametrize("flag_file", FLAG_FILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_shipped_flag_file_passes_the_flag_checks(flag_file, data_dir, tmp_path):
    argv = ["train.py", f"--flagfile={flag_file}", f"--data_dir={data_dir}", f"--output_dir={tmp_path / 'run'}"]
    with saved_flags():
        cli_main.parse_flags(argv)
        model = cli_main.FLAGS.model
        job, _, output_dir = cli_main.prepare()
    assert model in job.names and output_dir == str(tmp_path / "run")
