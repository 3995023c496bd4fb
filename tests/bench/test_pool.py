"""bench/pool.py: per-round ratios pooled over runs, each run's median checked against the pooled IQR."""
import numpy as np

from bench.pool import pooled_rows


def _record(ref_seconds, row_seconds):
    return {"sections": [{"section": "s", "rows": [
        {"config": "none", "reference": "none", "seconds_per_round": ref_seconds},
        {"config": "private", "reference": "none", "seconds_per_round": row_seconds}]}]}


def test_pooled_ratios_and_run_medians():
    slow = _record([1.0] * 4, [2.5] * 4)                  # ratio 0.4 every round
    fast = _record([1.0] * 4, [1.0, 1.25, 1.25, 1.25])    # ratios 1.0, 0.8, 0.8, 0.8
    rows = pooled_rows([slow, fast, fast, fast], only_last=set())
    private = rows[1]
    pooled = np.array([0.4] * 4 + [1.0, 0.8, 0.8, 0.8] * 3)
    np.testing.assert_allclose([private["q1"], private["median"], private["q3"]], np.percentile(pooled, [25, 50, 75]))
    np.testing.assert_allclose(private["run_medians"], [0.4, 0.8, 0.8, 0.8])
    assert private["rounds"] == 16 and private["runs_inside"] == 3    # the slow run's 0.4 is below q1
    assert rows[0]["median"] == 1.0
    only = pooled_rows([slow, fast], only_last={"s"})[1]
    assert only["run_medians"] == [0.8] and only["rounds"] == 4
