"""experiments/tools/aggregate.py: a sweep's per-run files become one JSONL line per run, losslessly."""
import json

import pytest

from experiments.tools import aggregate


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_every_record_is_kept_whole_under_its_run_key(tmp_path):
    root = tmp_path / "results"
    _write(root / "sweep" / "kl-eps2.87-seed0.json", {"epsilon": 2.87, "metrics": {"cluster_purity": 0.5075}})
    _write(root / "tuning" / "trials" / "0" / "results.json", {"epsilon": 1.0})
    _write(root / "tuning" / "trials" / "0" / "tuning_trial.json", {"trial": 0})
    (root / "anatomy.jsonl").write_text('{"run": "/work/runs/a-seed0", "x": 1}\n{"y": 2}\n')
    out = tmp_path / "runs.jsonl"

    aggregate.write(str(out), aggregate.collect(str(root), ["sweep", "tuning", "anatomy.jsonl"]))

    lines = [json.loads(s) for s in out.read_text().splitlines()]
    assert lines == [
        {"run": "anatomy/1", "record": {"y": 2}},
        {"run": "anatomy/a-seed0", "record": {"run": "/work/runs/a-seed0", "x": 1}},
        {"run": "sweep/kl-eps2.87-seed0", "record": {"epsilon": 2.87, "metrics": {"cluster_purity": 0.5075}}},
        {"run": "tuning/trials/0", "results": {"epsilon": 1.0}, "tuning_trial": {"trial": 0}},
    ]
    assert aggregate.show(str(out), "tuning/trials/0")["tuning_trial"] == {"trial": 0}


def test_a_missing_path_or_run_is_named(tmp_path):
    with pytest.raises(SystemExit, match="neither a file nor a folder"):
        aggregate.collect(str(tmp_path), ["nope"])
    (tmp_path / "runs.jsonl").write_text('{"run": "a"}\n')
    with pytest.raises(SystemExit, match="no run 'b'"):
        aggregate.show(str(tmp_path / "runs.jsonl"), "b")
