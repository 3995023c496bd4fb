"""bench/make_private_models.py --quick: runs end to end and appends a well-formed row (structure only,
never speed). The Opacus reference needs torch (its own environment) and is not run here."""
import json
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_quick_run_appends_one_row_per_model_with_ratio_iqr_and_load(tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "make_private_models.py"), "--quick",
                           "--only=convnet", f"--out={out}"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["framework"], row["model"], row["rounds"], row["batch_size"]) == ("tfpriv", "convnet", 1, 8)
    assert (row["steps"], row["first_fit_steps"]) == (1, 1)  # --quick: one step a fit, timed or first
    for key in ("private_examples_per_s", "nonprivate_examples_per_s", "ratio"):
        assert 0 < row[key]["q1"] <= row[key]["median"] <= row[key]["q3"]
    assert row["load_average_start"] >= 0 and row["load_average_end"] >= 0
    assert row["first_fit_seconds"]["private"] > 0 and row["first_fit_seconds"]["non-private"] > 0
    assert row["first_fit_ratio"] == row["first_fit_seconds"]["private"] / row["first_fit_seconds"]["non-private"]
    assert row["first_fit_seconds_by_round"] == [row["first_fit_seconds"]]  # --quick: one round of fresh processes
    assert row["first_fit_seconds_in_process"]["private"] > 0 and row["first_fit_seconds_in_process"]["non-private"] > 0
    assert "tfpriv: clipping auto: fast for " in proc.stderr
