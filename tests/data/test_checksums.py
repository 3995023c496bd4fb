"""Checksums table against the data README, and md5 verification with its cache."""
import hashlib
import os
import re
import shutil

import pytest

from tfpriv.data import checksums
from tfpriv.errors import DataError, UsageError


def test_table_matches_readme_and_files(data_dir):
    readme = (data_dir / "README.md").read_text()
    rows = re.findall(r"^\| (\S+) \| (\d+) \| ([0-9a-f]{32}) \|", readme, flags=re.M)
    assert {rel: (int(size), md5) for rel, size, md5 in rows} == checksums.FILES
    for rel, (size, _) in checksums.FILES.items():
        assert (data_dir / rel).stat().st_size == size, rel


def test_md5_file_matches_hashlib(tmp_path):
    payload = bytes(range(256)) * 5000  # several chunks with a small chunk size
    path = tmp_path / "blob"
    path.write_bytes(payload)
    assert checksums.md5_file(path, chunk_size=1000) == hashlib.md5(payload).hexdigest()


def test_verified_file_real(data_dir):
    path = checksums.verified_file(data_dir, "abalone/abalone.names")
    assert path == data_dir / "abalone/abalone.names"


def test_corrupt_file_names_path_and_both_md5s(data_dir, tmp_path):
    rel = "abalone/abalone.names"
    (tmp_path / "abalone").mkdir()
    target = tmp_path / rel
    shutil.copyfile(data_dir / rel, target)
    raw = bytearray(target.read_bytes())
    raw[100] ^= 0x01
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        checksums.verified_file(tmp_path, rel)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{target}: md5 mismatch (got {hashlib.md5(raw).hexdigest()}")
    assert checksums.MD5[rel] in msg


def test_missing_file_and_missing_dir(tmp_path):
    with pytest.raises(DataError, match=r"^data_dir: .* has no adult/adult\.data$"):
        checksums.verified_file(tmp_path, "adult/adult.data")
    with pytest.raises(DataError, match="^data_dir: .*nope is not a directory"):
        checksums.require_data_dir(tmp_path / "nope", "adult")
    with pytest.raises(UsageError, match="^data_dir: required for dataset 'adult'"):
        checksums.require_data_dir(None, "adult")


def test_verification_cached_until_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    good = hashlib.md5(b"hello").hexdigest()
    checksums.verify_md5(path, good)
    calls = []
    real = checksums.md5_file
    monkeypatch.setattr(checksums, "md5_file", lambda p: calls.append(p) or real(p))
    checksums.verify_md5(path, good)
    assert calls == []  # cached: no re-hash
    path.write_bytes(b"jello")  # same size, new content
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 10**9))  # new mtime even on coarse clocks
    with pytest.raises(DataError, match="md5 mismatch"):
        checksums.verify_md5(path, good)
    assert len(calls) == 1
