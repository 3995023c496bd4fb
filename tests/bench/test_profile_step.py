"""bench/profile_step.py: every stage of a private step is timed, also for a model with no batch term.

A smoke test only: it asserts structure, never speed.
"""
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_conv_classifier_profile_prints_every_stage_but_group_norms(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "profile_step.py"), "--architecture=conv_classifier",
                           "--batch_size=8", "--rounds=1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("conv_classifier, micro, B=8, traced for any batch size; load average")
    stages = [line.split("  ")[1].strip() for line in lines[1:] if line.startswith("  ")]
    assert stages == ["non-private gradient", "forward with taps", "+ backward to layer outputs",
                      "+ per-layer factors", "+ per-example norms", "+ clipped sums (no noise)",
                      "whole private gradient", "noise alone"]
