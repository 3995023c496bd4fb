"""What README.md and the shipped flag files say about a study is what its records say (issue #47)."""
from experiments.tools import aggregate
from tests.conftest import REPO_ROOT


def _status_row(system: str) -> str:
    rows = [line for line in (REPO_ROOT / "README.md").read_text().splitlines() if line.startswith(f"| {system} |")]
    assert len(rows) == 1
    return rows[0]


def test_the_filter_status_row_says_what_the_adult_record_says():
    record = aggregate.show(str(REPO_ROOT / "experiments" / "filter" / "runs.jsonl"), "adult_b1_r5_results")["record"]
    utility = record["metrics"]["utility_accuracy"]
    row = _status_row("generative filter")
    assert f"{utility:.4f}" in row
    if utility < 0.83:  # the target
        assert "Adult targets met" not in row and "borderline" in row
