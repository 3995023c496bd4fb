"""The atomic JSON writer behind results.json, privacy_plan.json, audit.json, tuning.json and the saved
models' settings: a reader or a restarted run sees the old file or the complete new one, never a part."""
import json
import os

import pytest

from tfpriv.files import write_json
from tfpriv.training import results
from tfpriv.training.results import write_results


def _files(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_write_json_round_trip_with_usual_permissions(tmp_path):
    path = str(tmp_path / "sub" / "record.json")
    assert write_json(path, {"a": [1, 2.5], "b": float("inf"), "c": {3}}) == path
    assert json.loads(open(path).read()) == {"a": [1, 2.5], "b": float("inf"), "c": "{3}"}  # default=str
    assert _files(tmp_path / "sub") == ["record.json"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "results.json")
    write_json(path, {"old": 1})
    with pytest.raises(TypeError):  # a value JSON cannot hold, found halfway through the dump
        write_json(path, {"a": 1, "z": object()}, default=None)
    assert json.load(open(path)) == {"old": 1} and _files(tmp_path) == ["results.json"]
    record = {k: 1 for k in results.REQUIRED_KEYS}
    with pytest.raises(TypeError):
        write_results(str(tmp_path), {**record, "metrics": {"x": object()}})
    assert json.load(open(path)) == {"old": 1} and _files(tmp_path) == ["results.json"]


def test_the_new_file_is_on_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    path = str(tmp_path / "results.json")
    write_json(path, {"old": 1})
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append("fsync")
        real_fsync(fd)

    def replace(src, dst):
        calls.append("replace")
        assert json.load(open(dst)) == {"old": 1}  # until the rename, readers see the old record
        assert json.load(open(src)) == {"new": 2}  # ... and the new one is complete
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_json(path, {"new": 2})
    assert calls == ["fsync", "replace"] and json.load(open(path)) == {"new": 2}


def test_a_crash_at_the_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = str(tmp_path / "privacy_plan.json")
    write_json(path, {"old": 1})

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        write_json(path, {"new": 2})
    assert json.load(open(path)) == {"old": 1} and _files(tmp_path) == ["privacy_plan.json"]
