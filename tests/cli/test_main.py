"""What `train.py` prints when a run finishes (`tfpriv.cli.main.report`)."""
from tfpriv.cli import main as cli_main
from tfpriv.training.runner import SHUFFLE_NOTE
from tfpriv.filter.job import guarantees

RESULTS = {"epsilon": 2.5, "delta": 1e-5, "aggregation": "micro", "effective_noise_multiplier": 1.1, "steps": 40,
           "metrics": {}}


def printed(results, capsys) -> list[str]:
    capsys.readouterr()
    cli_main.report(cli_main.job_for("privae"), "out", results)
    return capsys.readouterr().out.splitlines()


def test_the_epsilon_line_says_how_shuffled_batches_were_accounted_and_labels_the_poisson_figure(capsys):
    lines = printed({**RESULTS, "epsilon": 9.5, "epsilon_caveat": SHUFFLE_NOTE, "epsilon_as_if_poisson": 2.5}, capsys)
    (line,) = [l for l in lines if "epsilon = " in l]
    assert line.startswith("epsilon = 9.5 at delta = 1e-05 [shuffled batches: accounted as one Gaussian at half the "
                           "noise multiplier per epoch")
    assert "(as if the batches had been Poisson-sampled, which they were not: 2.5)" in line
    assert "shuffled" not in "".join(printed(RESULTS, capsys))  # Poisson sampling: nothing added


def test_a_filter_run_prints_each_artefact_with_its_own_guarantee(capsys):
    record = guarantees(True, 2.178, 1e-5, SHUFFLE_NOTE, [0.9], 1e-5, 3341, multiuser=False)
    lines = printed({**RESULTS, "epsilon": 2.178, "guarantees": record}, capsys)
    by_artefact = {l.split()[0]: l for l in lines[1:]}
    assert by_artefact["vae/"].startswith("  vae/ stage-1 VAE (encoder, decoder): epsilon = 2.178 at delta = 1e-05 "
                                          "[shuffled batches: accounted as one Gaussian")
    assert "per training record" in by_artefact["vae/"]
    assert by_artefact["filter/"] == ("  filter/ the filter: not private: fitted without DP on the codes and labels "
                                      "of 3341 training records")
    assert "label-change" in by_artefact["released"] and "epsilon = 0.9 at delta = 1e-05" in by_artefact["released"]
    assert by_artefact["saved_model/"].endswith("not private: holds filter/")
    assert "not private" in by_artefact["metrics"]
    assert not any(l.startswith("epsilon = ") for l in lines)  # no bare epsilon that reads as the filter's
