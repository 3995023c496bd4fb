import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.gan.helpers import small_test_split
from tfpriv.gan import rescore
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp
from tfpriv.metrics import dpimagebench
from tfpriv.training.runner import RunState, add_selection_epsilon, read_selection_epsilon

TINY = ["--classifier_depth=8", "--downstream_epochs=1", "--downstream_samples=24"]


@pytest.fixture(autouse=True)
def _small_test_split(monkeypatch):
    small_test_split(monkeypatch)


def make_run(path, held_out: bool, num_classes: int | None = 10, epsilon: float = 2.0):
    """A finished run folder: a tiny (untrained) generator, gan.json, the results.json keys re-scoring
    reads and a checkpoint holding the run's own selection of `epsilon` (as a held-out run's has)."""
    model = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=num_classes, seed=0)
    z = model._latent(2)
    model.generator(model._generator_in(z, np.array([0, 1], np.int32)) if num_classes else z)
    save_generator(model, str(path), {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4,
                                      "num_classes": num_classes})
    results = {"model": "dpwgan_gp", "dataset": "fashion_mnist", "epsilon": epsilon, "delta": 1e-5,
               "num_examples": 55000 if held_out else 60000, "metrics": {}}
    if held_out:
        results["evaluation"] = {"protocol": "dpimagebench", "epsilon_selection": epsilon,
                                 "validation_split": {"examples": 5000, "seed": 0, "held_out": True}}
        tf.train.CheckpointManager(tf.train.Checkpoint(run=RunState(0)), str(path / "checkpoints"), 2).save(1)
        add_selection_epsilon(str(path), epsilon)
    (path / "results.json").write_text(json.dumps(results))
    return path


def run_main(*args, capsys):
    code = rescore.main(list(map(str, args)))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_held_out_run_is_rescored_on_its_split_and_every_selection_adds_its_epsilon(tmp_path, data_dir, capsys,
                                                                                       monkeypatch):
    """Every re-score of a held-out run selects again on its split and adds its epsilon to the run's
    ledger. All run with the same --seed, which fixes the samples and classifiers, never the selection
    noise: each draws different noise (before, all drew it from the seed, so a known seed voided its
    epsilon)."""
    states = []

    class Recording(dpimagebench.NoisySelection):
        def __init__(self, selection_epsilon, rng):
            super().__init__(selection_epsilon, rng)
            states.append(rng.bit_generator.state["state"]["state"])

    monkeypatch.setattr(dpimagebench, "NoisySelection", Recording)
    run = make_run(tmp_path / "run", held_out=True)
    args = [f"--run_dir={run}", f"--data_dir={data_dir}", "--selection_epsilon=0.5", "--seed=0", *TINY]
    code, out, err = run_main(*args, capsys=capsys)
    assert code == 0, err
    record = json.loads((run / rescore.OUTPUT_FILE).read_text())
    assert record["selection"]["mode"] == "private_validation" and record["selection"]["validation_examples"] == 5000
    assert record["selection"]["noise_source"] == "OS entropy, never recorded"
    # the run's own selection (2.0) plus this one (0.5), on top of the generator's 2.0
    assert record["epsilon_selection"] == pytest.approx(2.5) and record["epsilon_total"] == pytest.approx(4.5)
    assert "note" not in record and "= 4.5 at delta" in out
    assert run_main(*args, capsys=capsys)[0] == 0
    again = json.loads((run / rescore.OUTPUT_FILE).read_text())
    assert again["epsilon_selection"] == pytest.approx(3.0) and again["epsilon_total"] == pytest.approx(5.0)
    # the total is kept with the run's ledger (its checkpoint), not in the re-score's record: a folder without
    # the record (deleted, or here copied without it: the same folder) does not restart it (both restarted at
    # 2.5 before)
    copy = shutil.copytree(run, tmp_path / "copy", ignore=shutil.ignore_patterns(rescore.OUTPUT_FILE))
    assert not (copy / rescore.OUTPUT_FILE).exists()
    assert run_main(f"--run_dir={copy}", *args[1:], capsys=capsys)[0] == 0
    assert json.loads((copy / rescore.OUTPUT_FILE).read_text())["epsilon_selection"] == pytest.approx(3.5)
    assert json.loads((copy / rescore.OUTPUT_FILE).read_text())["epsilon_total"] == pytest.approx(5.5)
    assert read_selection_epsilon(str(copy)) == pytest.approx(3.5) and read_selection_epsilon(str(run)) == 3.0
    assert len(states) == len(set(states)) == 3, "each selection's noise is fresh, whatever the --seed"
    # without the checkpoint there is no total to continue: refused, nothing written
    shutil.rmtree(copy / "checkpoints")
    (copy / rescore.OUTPUT_FILE).unlink()
    code, _, err = run_main(f"--run_dir={copy}", *args[1:], capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: --run_dir: ") and \
        "holds no checkpoint" in err, err
    assert not (copy / rescore.OUTPUT_FILE).exists()


def test_a_run_without_a_held_out_split_is_scored_with_the_synthetic_selection(tmp_path, data_dir, capsys):
    run = make_run(tmp_path / "run", held_out=False)
    code, out, err = run_main(f"--run_dir={run}", f"--data_dir={data_dir}", *TINY, capsys=capsys)
    assert code == 0, err
    record = json.loads((run / rescore.OUTPUT_FILE).read_text())
    assert record["selection"] == {"mode": "synthetic_validation", "validation_examples": 2, "selections": 1,
                                   "epsilon": 0.0}
    assert record["validation_split"]["held_out"] is False and record["epsilon_total"] == pytest.approx(2.0)
    assert "eval.mode=syn" in record["note"] and record["num_examples"] == 60000
    code, _, err = run_main(f"--run_dir={run}", f"--data_dir={data_dir}", "--selection_epsilon=1", *TINY, capsys=capsys)
    assert code == 2 and err.strip().splitlines() == [err.strip()] and err.startswith("error: --selection_epsilon:")


@pytest.mark.parametrize("case,message", [
    ("unconditional", "error: --run_dir: the generator in"),
    ("no_generator", "generator.keras is missing"),
    ("bad_depth", "error: --classifier_depth: DPImageBench's ResNet"),
    ("no_folder", "error: --run_dir:"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, data_dir, capsys, case, message):
    run = make_run(tmp_path / "run", held_out=True, num_classes=None if case == "unconditional" else 10)
    if case == "no_generator":
        (run / "generator.keras").unlink()
    args = [f"--run_dir={tmp_path / 'absent' if case == 'no_folder' else run}", f"--data_dir={data_dir}", *TINY]
    if case == "bad_depth":
        args.append("--classifier_depth=9")
    code, out, err = run_main(*args, capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (run / rescore.OUTPUT_FILE).exists()
