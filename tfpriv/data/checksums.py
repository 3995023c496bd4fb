"""MD5 checksums of the original data files, and verified access to them.

Every loader that reads an original-format file goes through `verified_file`, so a
truncated, corrupted or substituted file fails loudly with a one-line `DataError`
instead of silently producing different numbers. Verification is cached per
(resolved path, size, mtime) so repeated loads in one process do not re-hash.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import threading

from tfpriv.errors import DataError, UsageError

# Relative path under --data_dir -> (size in bytes, md5), from ../shared/data/README.md.
FILES: dict[str, tuple[int, str]] = {
    "mnist/train-images-idx3-ubyte.gz": (9912422, "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "mnist/train-labels-idx1-ubyte.gz": (28881, "d53e105ee54ea40749a09fcbcd1e9432"),
    "mnist/t10k-images-idx3-ubyte.gz": (1648877, "9fb629c4189551a2d022fa330f9573f3"),
    "mnist/t10k-labels-idx1-ubyte.gz": (4542, "ec29112dd5afa0611ce80d1b7f02629c"),
    "fashion_mnist/train-images-idx3-ubyte.gz": (26421880, "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    "fashion_mnist/train-labels-idx1-ubyte.gz": (29515, "25c81989df183df01b3e8a0aad5dffbe"),
    "fashion_mnist/t10k-images-idx3-ubyte.gz": (4422102, "bef4ecab320f06d8554ea6380940ec79"),
    "fashion_mnist/t10k-labels-idx1-ubyte.gz": (5148, "bb300cfdad3c16e7a12a480ee83cd310"),
    "adult/adult.data": (3974305, "5d7c39d7b8804f071cdd1f2a7c460872"),
    "adult/adult.test": (2003153, "35238206dfdf7f1fe215bbb874adecdc"),
    "adult/adult.names": (5229, "1a7cdb3ff7a1b709968b1c7a11def63e"),
    "abalone/abalone.data": (191873, "a769fd0119787cac09158fe08971e480"),
    "abalone/abalone.names": (4319, "919357b5c22257448f4e2a6f133d859a"),
}

MD5: dict[str, str] = {rel: md5 for rel, (_, md5) in FILES.items()}

_verified: set[tuple[str, int, int, str]] = set()
_lock = threading.Lock()


def md5_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex MD5 of a file, read in chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_identity(path: pathlib.Path) -> tuple[str, int, int]:
    """(resolved path, size, mtime_ns): changes whenever the file is replaced or edited."""
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def verify_md5(path: str | os.PathLike, expected_md5: str) -> pathlib.Path:
    """Check `path` against `expected_md5`; raise `DataError` naming the path if it differs.

    A successful check is remembered for this (path, size, mtime), so verifying the same
    unchanged file again is a `stat` call rather than a re-hash.
    """
    path = pathlib.Path(path)
    try:
        ident = file_identity(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    key = (*ident, expected_md5)
    with _lock:
        if key in _verified:
            return path
    try:
        got = md5_file(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if got != expected_md5:
        raise DataError(f"{path}: md5 mismatch (got {got}, expected {expected_md5})")
    with _lock:
        _verified.add(key)
    return path


def require_data_dir(data_dir: str | os.PathLike | None, dataset: str) -> pathlib.Path:
    """`data_dir` as a Path; `UsageError` if it is unset or not a directory."""
    if data_dir is None:
        raise UsageError(f"data_dir: required for dataset {dataset!r} (it reads files)")
    path = pathlib.Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataError(f"data_dir: {path} is not a directory (needed for dataset {dataset!r})")
    return path


def verified_file(data_dir: str | os.PathLike, relpath: str) -> pathlib.Path:
    """`<data_dir>/<relpath>` after checking it exists and has the README's md5."""
    if relpath not in FILES:
        raise KeyError(f"no checksum recorded for {relpath!r}")
    path = pathlib.Path(data_dir) / relpath
    if not path.is_file():
        raise DataError(f"data_dir: {data_dir} has no {relpath}")
    return verify_md5(path, MD5[relpath])


def clear_cache() -> None:
    """Forget all successful verifications (for tests)."""
    with _lock:
        _verified.clear()
