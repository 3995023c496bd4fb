"""`--model=privae` flags of the pinwheel experiment: --pinwheel_scale and --pinwheel_hidden.

Bad values are one line on stderr and exit code 2 (no output folder left behind); good
values reach the data and the networks and are recorded in results.json.
"""
import json

import numpy as np
import pytest

from tests.cli.helpers import assert_one_line_error, train_py
from tfpriv.data import make_pinwheel

PINWHEEL = ["--model=privae", "--dataset=pinwheel", "--prior=mixture", "--regularizer=kl_pq", "--latent_dim=2",
            "--num_partitions=1", "--batch_size=20"]


@pytest.mark.parametrize("args,flag", [
    (PINWHEEL + ["--pinwheel_scale=0"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=-2"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=nan"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=inf"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_scale=ten"], "pinwheel_scale"),
    (["--dataset=digits", "--pinwheel_scale=1"], "--pinwheel_scale"),
    (PINWHEEL + ["--pinwheel_hidden=0"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden=16,"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden=wide"], "--pinwheel_hidden"),
    (PINWHEEL + ["--pinwheel_hidden="], "--pinwheel_hidden"),
    (["--dataset=digits", "--pinwheel_hidden=16"], "--pinwheel_hidden"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_pinwheel_flags_are_one_line_exit_2(tmp_path, capsys, args, flag):
    out = tmp_path / "run"
    assert_one_line_error(train_py(f"--output_dir={out}", "--epochs=1", "--verbose=0", *args, capsys=capsys), flag, out)


def test_scale_and_widths_reach_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    proc = train_py(f"--output_dir={out}", *PINWHEEL, "--pinwheel_scale=1", "--pinwheel_hidden=8,4", "--epochs=1",
                    "--epsilon=2.87", "--l2_norm_clip=0.05", "--batch_clip=0.005", "--eval_importance_samples=5",
                    "--verbose=0", "--seed=2", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.load(open(out / "results.json"))
    assert results["pinwheel_scale"] == 1.0 and results["pinwheel_hidden"] == [8, 4]
    # encoder 2-8-4-4 and decoder 2-4-8-2
    assert results["num_parameters"] == (2 * 8 + 8 + 8 * 4 + 4 + 4 * 4 + 4) + (2 * 4 + 4 + 4 * 8 + 8 + 8 * 2 + 2)
    assert 0 <= results["metrics"]["cluster_purity"] <= 1
    # the reconstruction error is measured on the unit-scale data (radius ~1), not on radius ~10
    x = make_pinwheel(seed=2, scale=1.0)[0]
    assert results["metrics"]["reconstruction_error"] < 20 * float(np.var(x))
    assert (out / "pinwheel.png").exists()
