"""`tfpriv.privacy.statement`: the privacy statement a saved model carries, equal to the accountant's
figures, its DpEvent rebuilt by dp_accounting, written into and read from .keras files and SavedModel folders."""
import json
import zipfile

import h5py
import pytest

import tfpriv
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RDP, PrivacyLedger, get_accountant, training_event
from tfpriv.privacy.statement import (STATEMENT_FILE, describe, event_from_json, privacy_statement, read_statement,
                                      statement_segments, write_statement)

SEGMENTS = [(0.01, 1.1, 300), (0.02, 2.5, 100)]
CONFIG = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=0.5, noise_multiplier=2.5)


def test_the_statement_is_the_accountants_and_its_event_composes_to_the_same_epsilon():
    s = privacy_statement(SEGMENTS, CONFIG, 1e-5, extras={"tuning": {"epsilon": 3.0}})
    assert s["epsilon"]["rdp"] == RDP.epsilon(SEGMENTS, 1e-5)
    assert s["epsilon"]["pld"] == get_accountant("pld").epsilon(SEGMENTS, 1e-5)
    assert s["steps"] == 400 and s["l2_norm_clip"] == 0.5 and s["noise_multiplier"] == 2.5 and s["tuning"]
    assert statement_segments(s) == SEGMENTS
    event = event_from_json(json.loads(json.dumps(s["dp_event"])))  # through JSON text
    assert event == training_event(SEGMENTS)
    accountant = RDP.fresh()
    accountant.compose(event)
    assert accountant.get_epsilon(1e-5) == s["epsilon"]["rdp"]
    assert "400 poisson-sampled steps" in describe(s) and "tuning job epsilon 3.0" in describe(s)
    filter_run = {**s, "guarantees": {"saved_model/": {"guarantee": "not private: holds filter/"}}}
    assert "; saved_model/: not private: holds filter/ (tfpriv " in describe(filter_run)


def test_a_release_before_training_is_in_the_epsilon_and_the_segments_but_not_the_steps():
    """#47.8: the ledger's release row (0 steps, one event) is composed; a row of a segment begun
    without steps is not."""
    ledger = PrivacyLedger()
    ledger.release("class_means", 30.0)
    ledger.begin(0.01, 1.1)
    ledger.steps.assign(300)
    s = privacy_statement(ledger.raw_segments(), CONFIG, 1e-5)
    composed = [(1.0, 30.0, 1), (0.01, 1.1, 300)]
    assert s["epsilon"]["rdp"] == RDP.epsilon(composed, 1e-5) > RDP.epsilon(composed[1:], 1e-5)
    assert s["steps"] == 300 and s["sampling"] == "poisson" and statement_segments(s) == composed
    assert s["segments"][0]["name"] == "class_means" and s["segments"][0]["scheme"] == "release"
    assert "300 poisson-sampled steps" in describe(s)
    assert "released before training: class_means (noise multiplier 30)" in describe(s)


def test_a_non_private_model_states_no_epsilon():
    s = privacy_statement([(0.1, 0.0, 5)], tfpriv.DPConfig(aggregation="none"), None)
    assert s["dp"] is False and "epsilon" not in s and "without differential privacy" in describe(s)


def test_written_into_a_zip_or_a_folder_and_read_back(tmp_path):
    s = privacy_statement(SEGMENTS, CONFIG, 1e-5)
    archive = tmp_path / "m.keras"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("metadata.json", "{}")
    write_statement(str(archive), s)
    assert json.loads(zipfile.ZipFile(archive).read(STATEMENT_FILE)) == s == read_statement(str(archive))
    (tmp_path / "saved").mkdir()
    write_statement(str(tmp_path / "saved"), s)
    assert json.loads((tmp_path / "saved" / "assets" / STATEMENT_FILE).read_text()) == s
    assert read_statement(str(tmp_path / "saved")) == s
    (tmp_path / "empty").mkdir()
    assert read_statement(str(tmp_path / "empty")) is None
    h5py.File(tmp_path / "m.h5", "w").close()
    write_statement(str(tmp_path / "m.h5"), s)
    assert json.loads(h5py.File(tmp_path / "m.h5", "r").attrs["tfpriv_privacy_statement"]) == s
    assert read_statement(str(tmp_path / "m.h5")) == s
    (tmp_path / "m.txt").write_text("not a saved model")
    with pytest.raises(ConfigError, match="^filepath: "):
        write_statement(str(tmp_path / "m.txt"), s)
