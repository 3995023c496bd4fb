"""What README.md and the shipped flag files say about a study is what its records say (issue #47)."""
import json

from experiments.tools import aggregate
from tests.conftest import REPO_ROOT

PINWHEEL_RUNS = str(REPO_ROOT / "experiments" / "pinwheel" / "runs.jsonl")
TUNING_SEEDS = range(5)  # the eighth round chose the 8-unit recipe on seeds 0-4


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


def _flags(path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines() if line.startswith("--")]
    return dict(line[2:].split("=", 1) for line in lines)


def test_the_shipped_pinwheel_kl_file_is_the_best_recipe_and_states_its_rate_on_unseen_seeds():
    flags = _flags(REPO_ROOT / "flags" / "privae_pinwheel_kl.cfg")
    run = aggregate.show(PINWHEEL_RUNS, "pinwheel8/flagfile_h8_kl-eps2.87-seed0")["record"]  # the recipe's file run
    assert json.loads(f"[{flags['pinwheel_hidden']}]") == run["pinwheel_hidden"]
    for name in ("batch_clip", "l2_norm_clip", "learning_rate", "epsilon"):
        assert float(flags[name]) == run["target_epsilon" if name == "epsilon" else name], name
    for name in ("num_partitions", "batch_size", "epochs"):
        assert int(flags[name]) == run[name], name

    unseen = [line["record"]["metrics"]["cluster_purity"] for key, line in aggregate.read(PINWHEEL_RUNS).items()
              if key.startswith("pinwheel8/c2_0.02_b4_h8_kl-") and line["record"]["seed"] not in TUNING_SEEDS]
    rate = f"{sum(p >= 0.90 for p in unseen)} of {len(unseen)}"
    header = (REPO_ROOT / "flags" / "privae_pinwheel_kl.cfg").read_text()
    assert f"on {rate} (seeds 5-19" in header.replace("\n# ", " ")
    assert f"on {rate} seeds it was not tuned on" in _status_row("PriVAE")
