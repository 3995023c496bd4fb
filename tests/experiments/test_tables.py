"""The study READMEs' tables are their records: each table below is recomputed from the study's
runs.jsonl by experiments/tools/aggregate.py and must appear in the README line for line (issue #47:
a pinwheel table had matched no record)."""
import re

import pytest

from experiments.tools import aggregate
from tests.conftest import REPO_ROOT

PINWHEEL = REPO_ROOT / "experiments" / "pinwheel"
PRIVAE = REPO_ROOT / "experiments" / "privae"


def _readme_lines(study) -> set[str]:
    return set((study / "README.md").read_text().splitlines())


def _missing(lines: list[str], study) -> list[str]:
    readme = _readme_lines(study)
    return [line for line in lines if line not in readme]


def _seeds_line(runs: str, pattern: str) -> str:
    r = aggregate.seeds_row(runs, pattern)
    seeds = f"{r['seeds'][0]}–{r['seeds'][-1]}" if len(r["seeds"]) > 1 else str(r["seeds"][0])
    return f"| `{pattern}` | {seeds} | {r['per_seed']} | {r['mean_sd']} | {r['reached']} | {r['mse']} |"


def test_the_pinwheel_shipped_files_tables_are_their_records():
    runs = str(PINWHEEL / "runs.jsonl")
    lines = [_seeds_line(runs, p) for p in ("pinwheel8/c2_0.02_b4_h8_kl-*", "pinwheel8/nokl_h8_nokl-*")]
    lines += aggregate.table(runs, "pinwheel5_shipped_reach", "pinwheel")
    assert _missing(lines, PINWHEEL) == []


def test_the_pinwheel_rows_the_privae_readme_cites_are_their_records():
    runs = str(PINWHEEL / "runs.jsonl")
    patterns = ("pinwheel8/c2_0.02_b4_h8_kl-*", "pinwheel8/nokl_h8_nokl-*", "pinwheel5_shipped_reach/kl-*",
                "pinwheel5_shipped_reach/nokl-*")
    assert _missing([_seeds_line(runs, p) for p in patterns], PRIVAE) == []


@pytest.mark.parametrize("sweep,mode", [("fmnist_adam_e1", "sparsity"), ("fmnist_adam_e10", "sparsity"),
                                        ("fmnist_laplace_sweep_e3", "hoyer")])
def test_the_privae_sweep_tables_are_their_records(sweep, mode):
    lines = aggregate.table(str(PRIVAE / "runs.jsonl"), sweep, mode)
    assert _missing(lines[2:], PRIVAE) == []  # every row (the header is shared by several tables)


def test_a_row_that_differs_from_its_records_is_caught(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"run": "r/kl-eps2.87-seed0", "record": {"seed": 0, "metrics": '
                    '{"cluster_purity": 0.95, "reconstruction_error": 0.1}}}\n'
                    '{"run": "r/kl-eps2.87-seed1", "record": {"seed": 1, "metrics": '
                    '{"cluster_purity": 0.5, "reconstruction_error": 0.3}}}\n')
    assert _seeds_line(str(runs), "r/kl-*") == "| `r/kl-*` | 0–1 | 0.950, 0.500 | 0.725 ± 0.318 | 1/2 | 0.200 |"
    with pytest.raises(SystemExit, match="no run matches"):
        aggregate.seeds_row(str(runs), "r/nokl-*")


def test_every_pinwheel_purity_list_is_a_record_or_says_it_has_none():
    """Each run of three or more per-seed purities in a pinwheel README table row is a run of consecutive
    seeds of one sweep in runs.jsonl (to the 3 decimals shown), unless the row says `no record`."""
    runs = aggregate.read(str(PINWHEEL / "runs.jsonl"))
    sweeps: dict[str, list] = {}
    for key, line in sorted(runs.items(), key=lambda kv: (kv[0].rsplit("-seed", 1)[0], kv[1]["record"]["seed"])):
        sweeps.setdefault(key.rsplit("-eps", 1)[0], []).append(line["record"]["metrics"]["cluster_purity"])
    number = r"(?:0\.\d{2,3}|1\.000)"
    unmatched = []
    for line in (PINWHEEL / "README.md").read_text().splitlines():
        if not line.startswith("|") or "no record" in line:
            continue
        for found in re.findall(rf"{number}(?:, {number}){{2,}}", line):
            values = [float(v) for v in found.split(", ")]
            if not any(all(abs(s[i + j] - v) <= 0.0015 for j, v in enumerate(values))
                       for s in sweeps.values() for i in range(len(s) - len(values) + 1)):
                unmatched.append(found)
    assert unmatched == []


def test_the_mnist_warm_start_table_is_its_records():
    from experiments.frontier import warm_start_table
    frontier = REPO_ROOT / "experiments" / "frontier"
    lines = warm_start_table.table(str(frontier / "runs.jsonl"))
    assert len(lines) == 13 and _missing(lines, frontier) == []
