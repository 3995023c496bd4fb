"""bench/throughput.py --quick: the benchmark runs end to end and writes a well-formed record; the
classifier sections run TF Privacy's baselines where it is installed.

A smoke test only: it asserts structure and finite values, never speed.
"""
import importlib.util
import json
import math
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_quick_run_writes_ratios_with_iqr_load_and_memory(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "throughput.py"), "--quick", f"--out={out}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["command"].startswith("python bench/throughput.py --quick")
    assert record["memory"].endswith("TF_CPU_ALLOCATOR_USE_BFC=1")  # counts kept on CPUs without oneDNN too
    (section,) = record["sections"]
    assert section["section"] == "mlp_vae" and section["rounds"] == 2
    assert all(section[k] >= 0 for k in ("load_average_start", "load_average_end"))
    assert [r["config"] for r in section["rows"]] == ["none (16 partitions)", "termwise"]
    assert all(r["reference"] == "none (16 partitions)" for r in section["rows"])
    none, termwise = section["rows"]
    assert none["ratio"] == {"median": 1.0, "q1": 1.0, "q3": 1.0} and none["peak_memory_ratio"] == 1.0
    for row in (none, termwise):
        assert row["ratio"]["q1"] <= row["ratio"]["median"] <= row["ratio"]["q3"]
        assert len(row["seconds_per_round"]) == 2 and all(s > 0 for s in row["seconds_per_round"])
        assert row["peak_bytes"] > 0 and math.isfinite(row["peak_memory_ratio"])
    assert "termwise" in proc.stdout and "load average" in proc.stdout



def test_classifier_sections_run_tf_privacy_baselines_where_installed(tmp_path):
    """With tensorflow-privacy (the legacy stack) its three rows run; without it one line says why."""
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "throughput.py"), "--only=mlp_classifier,conv_classifier",
                           "--batch_size=4", "--steps=1", "--rounds=1", f"--out={out}"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [r["config"] for section in json.loads(out.read_text())["sections"] for r in section["rows"]]
    assert "tfpriv micro (ghost norms + book-keeping)" in rows and "tfpriv make_private (micro, ghost norms)" in rows
    baselines = [r for r in rows if r.startswith("TF Privacy")]
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("TF Privacy baselines skipped")]
    if importlib.util.find_spec("tensorflow_privacy"):
        assert len(baselines) == 3 and skipped == []
    else:
        assert baselines == [] and len(skipped) == 1
