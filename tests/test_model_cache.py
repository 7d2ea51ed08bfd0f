"""The model cache on disk: keyed by content, built once under a lock, renamed into place."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from constrain.models import bundled
from constrain.models.diskcache import build_once, file_digest, is_built, write_atomically

MANIFEST = {"name": "fake", "kind": "model", "gguf_sha256": "0" * 64}


def test_the_cache_key_is_the_files_content(tmp_path, monkeypatch):
    """Two copies of one GGUF at different paths share an entry; another content does not;
    an edit in place is noticed (the memo is keyed by size and mtime)."""
    monkeypatch.setenv("CONSTRAIN_CACHE", str(tmp_path / "cache"))
    data = os.urandom(3 << 20)
    a, b = tmp_path / "env-a" / "m.gguf", tmp_path / "env-b" / "m.gguf"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(data)
    memo = tmp_path / "cache" / "digests"
    oracle = hashlib.sha256(data).hexdigest()
    assert file_digest(a, memo) == file_digest(b, memo) == oracle
    assert file_digest(a, memo) == oracle  # from the memo
    model = bundled.BUNDLED["smollm2-135m-instruct"]
    assert bundled.cache_entry(model, "model", a) == bundled.cache_entry(model, "model", b)
    b.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(b, ns=(1, 1))
    assert file_digest(b, memo) == hashlib.sha256(b.read_bytes()).hexdigest() != oracle
    assert bundled.cache_entry(model, "model", a)[0] != bundled.cache_entry(model, "model", b)[0]


def _build_slowly(folder: str, counter: str, barrier) -> None:
    """A process that builds `folder` (slowly), counting its builds in `counter`."""

    def build(tmp: Path) -> None:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        for i in range(20):
            (tmp / f"part{i}").write_text(str(i))
            time.sleep(0.02)

    barrier.wait()
    built = build_once(Path(folder), MANIFEST, build)
    assert sorted(p.name for p in built.iterdir()) == sorted(
        [f"part{i}" for i in range(20)] + ["manifest.json"]
    )


def test_concurrent_loads_build_once_and_never_show_half_an_entry(tmp_path):
    folder, counter = tmp_path / "cache" / "model-abc", tmp_path / "builds.txt"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [
        context.Process(target=_build_slowly, args=(str(folder), str(counter), barrier))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    seen_partial = False
    while any(w.is_alive() for w in workers):  # a reader polling meanwhile
        if folder.exists():
            parts = [p for p in folder.iterdir() if p.name.startswith("part")]
            seen_partial |= len(parts) != 20 or not (folder / "manifest.json").exists()
        time.sleep(0.005)
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0, 0]
    assert len(counter.read_text().split()) == 1  # one build
    assert not seen_partial
    assert json.loads((folder / "manifest.json").read_text()) == MANIFEST
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_failed_build_leaves_nothing_and_a_stale_entry_is_replaced(tmp_path):
    folder = tmp_path / "model-abc"

    def fail(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        build_once(folder, MANIFEST, fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-abc.lock"]
    (tmp_path / ".model-abc.left-by-a-killed-build").mkdir()
    folder.mkdir()  # an entry without a manifest (or an outdated one) is rebuilt
    (folder / "stale").write_text("x")
    build_once(folder, MANIFEST, lambda tmp: (tmp / "fresh").write_text("y"))
    assert sorted(p.name for p in folder.iterdir()) == ["fresh", "manifest.json"]
    assert is_built(folder, MANIFEST) and not is_built(folder, {**MANIFEST, "kind": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-abc", "model-abc.lock"]


def test_write_atomically_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_atomically(path, '{"v": 1}')

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        write_atomically(path, '{"v": 2}')
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def _load_bundled(counter: str, barrier) -> None:
    """A process loading the bundled model's converted directory, counting conversions."""
    original = bundled.load_from_gguf

    def counted(model):
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        return original(model)

    bundled.load_from_gguf = counted
    barrier.wait()
    folder = bundled.model_dir(bundled.BUNDLED["smollm2-135m-instruct"])
    assert (folder / "manifest.json").exists() and (folder / "model.safetensors").exists()


@pytest.mark.slow
def test_two_processes_convert_the_bundled_model_once(tmp_path, monkeypatch):
    """From an empty cache, two processes asking for the converted model at once: both get
    it, one conversion happens."""
    monkeypatch.setenv("CONSTRAIN_CACHE", str(tmp_path / "cache"))
    counter = tmp_path / "conversions.txt"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [
        context.Process(target=_load_bundled, args=(str(counter), barrier)) for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0, 0]
    assert len(counter.read_text().split()) == 1
