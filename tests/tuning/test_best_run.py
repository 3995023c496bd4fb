"""The released copy of a tuning job's best trial: paths point at the copy, event files lose the
process's writer counter, and a copy that still names the private folder is refused."""
import json
import os
import zipfile

import pytest

from tfpriv.tuning.best_run import copy_best_run


def trial_folder(tmp_path, trial_id: str = "7"):
    """A trial's run folder as a job writes it under OUTPUT_DIR/private/trials/<id>."""
    trial = tmp_path / "out" / "private" / "trials" / trial_id
    (trial / "logs" / "train").mkdir(parents=True)
    (trial / "logs" / "train" / "events.out.tfevents.1795894075.vm.5069.3.v2").write_bytes(b"run")
    (trial / "logs" / "train" / "events.out.tfevents.1795894099.vm.5069.4.v2").write_bytes(b"resumed")
    (trial / "tuning_trial.json").write_text(json.dumps({"trial_id": trial_id}))
    results = {"saved_model": {"path": str(trial / "saved_model"), "signatures": {}}, "epsilon": float("nan"),
               "seed": None}
    (trial / "results.json").write_text(json.dumps(results))
    return trial


def test_the_copy_points_at_itself_and_names_no_trial(tmp_path):
    trial = trial_folder(tmp_path)
    best = tmp_path / "out" / "best"
    copy_best_run(str(trial), str(best), str(tmp_path / "out" / "private"))
    assert sorted(os.listdir(best)) == ["logs", "results.json"]  # no tuning_trial.json
    assert sorted(os.listdir(best / "logs" / "train")) == ["events.out.tfevents.0.v2", "events.out.tfevents.1.v2"]
    assert (best / "logs" / "train" / "events.out.tfevents.1.v2").read_bytes() == b"resumed"  # order kept
    results = json.loads((best / "results.json").read_text())
    assert results["saved_model"]["path"] == str(best / "saved_model")


@pytest.mark.parametrize("leak", ["archive", "another trial"])
def test_a_copy_that_still_names_the_private_folder_is_refused(tmp_path, leak):
    """A path inside an archive (a .keras file is a zip) is not rewritten, nor one into another trial's
    folder whose name starts with this one's (trials/70 for trial 7): the copy is removed, loudly."""
    trial = trial_folder(tmp_path)
    if leak == "archive":
        with zipfile.ZipFile(trial / "model.keras", "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("config.json", json.dumps({"source": str(trial / "data")}))
    else:
        (trial / "results.json").write_text(json.dumps({"notes": f"{trial}0/results.json"}))
    best = tmp_path / "out" / "best"
    with pytest.raises(RuntimeError, match="model.keras:config.json" if leak == "archive" else "in results.json"):
        copy_best_run(str(trial), str(best), str(tmp_path / "out" / "private"))
    assert not best.exists()
