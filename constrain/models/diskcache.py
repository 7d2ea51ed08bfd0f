"""Directories built once and shared on disk: by content key, atomically, under a lock.

Several processes (or environments sharing one cache) may ask for the same entry at once.
`build_once` makes sure exactly one builds it: the builder holds an exclusive `fcntl.flock`
on ``<entry>.lock`` while it writes into a temporary sibling directory and renames it into
place, so a reader sees either no entry or a complete one, never a half-written folder; the
others wait on the lock, then find the entry built. An entry is complete when its
``manifest.json`` (written last) equals the manifest asked for.

`file_digest` is the content key of a (large) file: its SHA-256, computed once per file
version and memoised in a small sidecar keyed by (path, size, mtime, inode), so a later load
costs a `stat` instead of reading the file again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the atomic rename still holds
    fcntl = None

__all__ = ["MANIFEST", "build_once", "file_digest", "is_built", "locked", "write_atomically"]

_CHUNK = 1 << 20
MANIFEST = "manifest.json"


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary sibling and `os.replace`: a reader sees the
    old file or the new one, never a partial one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `lock_file` (created if needed) for the block."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def file_digest(path: Path, memo_dir: Path) -> str:
    """The SHA-256 (hex) of the file at `path`, memoised under `memo_dir` by the file's
    absolute path, size, modification time and inode (any change hashes it again)."""
    path = Path(path).resolve()
    stat = path.stat()
    version = {
        "path": str(path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "inode": stat.st_ino,
    }
    memo = Path(memo_dir) / (hashlib.sha256(str(path).encode()).hexdigest()[:32] + ".json")
    try:
        known = json.loads(memo.read_text())
        if {k: known.get(k) for k in version} == version and isinstance(known.get("sha256"), str):
            return known["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(memo, json.dumps({**version, "sha256": digest.hexdigest()}))
    return digest.hexdigest()


def is_built(folder: Path, manifest: dict) -> bool:
    """Whether `folder` is a complete entry for `manifest`."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text()) == manifest
    except (OSError, ValueError):
        return False


def build_once(folder: Path, manifest: dict, build: Callable[[Path], None]) -> Path:
    """`folder`, built by ``build(tmp_dir)`` unless a complete entry for `manifest` is there.

    At most one process builds a given folder at a time (the lock); the build goes into a
    temporary directory next to `folder`, gets its manifest last and is renamed into place.
    A failed build leaves nothing behind. Returns `folder`.
    """
    folder = Path(folder)
    if is_built(folder, manifest):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with locked(folder.with_name(folder.name + ".lock")):
        if is_built(folder, manifest):  # another process built it while we waited
            return folder
        if fcntl is not None:  # we hold the lock: leftovers of killed builders are stale
            for stale in folder.parent.glob(f".{folder.name}.*"):
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            build(tmp)
            write_atomically(tmp / MANIFEST, json.dumps(manifest, indent=1))
            if folder.exists():  # an incomplete or outdated entry: move it aside, then drop it
                old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
                folder.rename(old / "old")
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return folder
