"""bench/noise_draw.py runs end to end and writes a well-formed record (it had called a generator method
that no longer exists). A smoke test only: it asserts structure and finite values, never speed."""
import json
import math
import subprocess
import sys

from tests.conftest import REPO_ROOT

VARIANTS = ["kernel per variable", "engine", "kernel, one draw", "uniform bits", "kernel under XLA"]


def test_every_variant_draws_and_the_record_holds_its_times_and_load(tmp_path):
    out = tmp_path / "noise_draw.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "noise_draw.py"), "--model=mlp_classifier",
                           "--rounds=2", f"--out={out}"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["command"] == f"python bench/noise_draw.py --model=mlp_classifier --rounds=2 --out={out}"
    assert record["parameters"] == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10 and record["rounds"] == 2
    assert all(record[k] >= 0 for k in ("load_average_start", "load_average_end"))
    assert [r["variant"] for r in record["rows"]] == VARIANTS
    assert record["rows"][0]["speedup_over_kernel_per_variable"] == {"median": 1.0, "q1": 1.0, "q3": 1.0}
    for row in record["rows"]:
        assert 0 < row["ms"]["q1"] <= row["ms"]["median"] <= row["ms"]["q3"] and math.isfinite(row["ms"]["q3"])
        assert row["ns_per_parameter"] > 0
    assert all(v in proc.stdout for v in VARIANTS)
