"""experiments/frontier/README.md says where its comparisons cross stacks or rest on selected runs (issue #47)."""
from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "experiments" / "frontier" / "README.md").read_text()
TF215_BASELINES = ("58.7", "61.4")  # experiments/dpwgan's 1,001-step eps = 1 runs, TF 2.15.1


def _levers_rows() -> list[str]:
    section = README.split("## The levers", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| lever |")]


def test_every_levers_row_against_a_tf215_baseline_says_so():
    rows = [row for row in _levers_rows() if any(b in row for b in TF215_BASELINES)]
    assert len(rows) >= 3
    assert [row for row in rows if "TF 2.15" not in row] == []


def test_the_account_states_how_the_headline_results_were_selected():
    account = README.split("## Where the targets stand", 1)[1].split("\n## ", 1)[0]
    for caveat in ("best of 7", "private training set", "256 private examples"):
        assert caveat in account, caveat
