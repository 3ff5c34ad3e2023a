"""Tests for tilelab.cache: memory and disk round trips, corruption, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilelab import cache as tl_cache
from tilelab.cache import CacheCorruptionWarning, CompileCache, cache_key, default_cache

REPO_ROOT = Path(__file__).resolve().parents[1]

FILES = {"kernel.so": b"\x7fELF" + bytes(range(256)) * 4, "meta.json": b'{"grid": [4, 1, 1]}'}


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache directory and the cache switched on."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(root))
    monkeypatch.delenv("TILELAB_DISABLE_CACHE", raising=False)
    return root


def test_cache_dir_follows_environment(isolated_cache, tmp_path, monkeypatch):
    assert tl_cache.cache_dir() == isolated_cache
    monkeypatch.delenv("TILELAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tl_cache.cache_dir() == tmp_path / "xdg" / "tilelab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tl_cache.cache_dir() == Path.home() / ".cache" / "tilelab"


def test_round_trip_in_memory(isolated_cache):
    cache = CompileCache()
    key = cache_key("vector_add", 1024)
    assert cache.get(key) is None
    cache.put(key, FILES)
    assert cache.get(key) == FILES
    assert key in cache


def test_round_trip_from_disk(isolated_cache):
    key = cache_key("vector_add", 1024)
    CompileCache().put(key, FILES)

    fresh = CompileCache()  # empty memory: must read the disk
    assert fresh.info()["memory_entries"] == 0
    assert fresh.get(key) == FILES

    path = fresh.get_path(key)
    assert path == isolated_cache / "tilelab-v1" / key[:2] / key
    assert (path / "kernel.so").read_bytes() == FILES["kernel.so"]
    manifest = json.loads((path / "MANIFEST.json").read_text())
    assert manifest["files"]["kernel.so"]["size"] == len(FILES["kernel.so"])

    info = fresh.info()
    assert info["entries"] == 1
    assert info["bytes"] >= sum(len(v) for v in FILES.values())
    assert info["dir"] == str(isolated_cache)


def test_returned_files_are_a_copy(isolated_cache):
    cache = CompileCache()
    key = cache_key("copy")
    cache.put(key, FILES)
    cache.get(key)["kernel.so"] = b"changed"
    assert cache.get(key) == FILES


def test_memory_is_lru_bounded(isolated_cache):
    cache = CompileCache(memory_entries=2)
    keys = [cache_key("k", i) for i in range(3)]
    for k in keys:
        cache.put(k, {"a": k.encode()})
    assert cache.info()["memory_entries"] == 2
    assert cache.get(keys[0]) == {"a": keys[0].encode()}  # evicted from memory, still on disk


def test_first_writer_wins(isolated_cache):
    key = cache_key("race")
    CompileCache().put(key, FILES)
    late = CompileCache()
    late.put(key, {"kernel.so": b"other"})
    assert late.get(key) == FILES
    assert CompileCache().get(key) == FILES


def _corrupt_cache_with_entry(key):
    CompileCache().put(key, FILES)
    return CompileCache(), tl_cache.cache_dir() / "tilelab-v1" / key[:2] / key


def test_modified_file_is_detected_and_deleted(isolated_cache):
    key = cache_key("corrupt")
    cache, entry = _corrupt_cache_with_entry(key)
    data = bytearray((entry / "kernel.so").read_bytes())
    data[10] ^= 0xFF  # same size, different bytes
    (entry / "kernel.so").write_bytes(bytes(data))

    with pytest.warns(CacheCorruptionWarning, match="sha256"):
        assert cache.get(key) is None
    assert not entry.exists()
    assert cache.get(key) is None  # a plain miss now, no second warning needed


def test_truncated_file_is_detected(isolated_cache):
    key = cache_key("truncated-file")
    cache, entry = _corrupt_cache_with_entry(key)
    (entry / "kernel.so").write_bytes(FILES["kernel.so"][:7])
    with pytest.warns(CacheCorruptionWarning, match="bytes"):
        assert cache.get_path(key) is None
    assert not entry.exists()


def test_missing_file_is_detected(isolated_cache):
    key = cache_key("missing-file")
    cache, entry = _corrupt_cache_with_entry(key)
    (entry / "meta.json").unlink()
    with pytest.warns(CacheCorruptionWarning, match="missing"):
        assert cache.get(key) is None
    assert not entry.exists()


def test_truncated_manifest_is_detected(isolated_cache):
    key = cache_key("truncated-manifest")
    cache, entry = _corrupt_cache_with_entry(key)
    manifest = (entry / "MANIFEST.json").read_bytes()
    (entry / "MANIFEST.json").write_bytes(manifest[: len(manifest) // 2])
    with pytest.warns(CacheCorruptionWarning, match="MANIFEST"):
        assert cache.get(key) is None
    assert not entry.exists()

    # After the corrupt entry is gone, storing again works.
    cache.put(key, FILES)
    assert CompileCache().get(key) == FILES


def _put_worker(root: str, key: str, payload_size: int, barrier) -> None:
    files = {"kernel.so": bytes([7]) * payload_size, "meta.json": b"{}"}
    barrier.wait()
    CompileCache(root).put(key, files)


def test_two_processes_put_the_same_key(isolated_cache):
    key = cache_key("concurrent")
    size = 8 << 20  # large enough that the writes overlap
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_put_worker, args=(str(isolated_cache), key, size, barrier))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]

    files = CompileCache().get(key)
    assert files == {"kernel.so": bytes([7]) * size, "meta.json": b"{}"}
    # Exactly one entry, and no temporary directories or lock files left behind.
    prefix = isolated_cache / "tilelab-v1" / key[:2]
    assert sorted(p.name for p in prefix.iterdir()) == [key]


def test_keys_differ_for_different_parts():
    keys = {
        cache_key("gemm", 128, 128, 32),
        cache_key("gemm", 128, 128, 64),
        cache_key("gemm", [128, 128, 32]),
        cache_key("gemm", 128.0, 128, 32),
        cache_key("gemm", True, 128, 32),
        cache_key("gemm", None),
        cache_key("gemm"),
        cache_key({"block": 128}),
        cache_key({"block": "128"}),
    }
    assert len(keys) == 9
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})
    assert cache_key(("a", 1)) == cache_key(["a", 1])
    assert len(cache_key("x")) == 64


def test_editing_the_compiler_changes_every_key(tmp_path, monkeypatch):
    """An editable install whose passes change under the same version number compiles
    afresh: the key carries a digest of tilelab's sources and headers."""
    fingerprint = tl_cache._compiler_fingerprint.__wrapped__  # uncached, for a fake tree
    (tmp_path / "passes").mkdir()
    (tmp_path / "passes" / "a.py").write_text("x = 1\n")
    (tmp_path / "include.cuh").write_text("// header\n")
    before = fingerprint(str(tmp_path))
    (tmp_path / "notes.txt").write_text("not code")  # other files do not count
    assert fingerprint(str(tmp_path)) == before
    (tmp_path / "passes" / "a.py").write_text("x = 2\n")
    after = fingerprint(str(tmp_path))
    assert after != before
    (tmp_path / "include.cuh").write_text("// header, edited\n")
    assert fingerprint(str(tmp_path)) not in (before, after)

    key = cache_key("gemm", 128)
    monkeypatch.setattr(tl_cache, "_compiler_fingerprint", lambda root: "edited")
    assert cache_key("gemm", 128) != key


def test_key_rejects_non_plain_data():
    with pytest.raises(TypeError):
        cache_key(object())
    with pytest.raises(TypeError):
        cache_key({1: "int key"})


def test_keys_are_stable_across_processes():
    parts = ("flash_attention", {"dtype": "float16", "blocks": [128, 64], "causal": True}, 2.5)
    code = f"from tilelab.cache import cache_key; print(cache_key(*{parts!r}))"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == cache_key(*parts)


def test_disabled_mode(isolated_cache, monkeypatch):
    monkeypatch.setenv("TILELAB_DISABLE_CACHE", "1")
    cache = CompileCache()
    key = cache_key("disabled")
    cache.put(key, FILES)
    assert cache.get(key) is None
    assert cache.get_path(key) is None
    assert not isolated_cache.exists()
    assert cache.info()["disabled"] is True

    monkeypatch.setenv("TILELAB_DISABLE_CACHE", "0")
    cache.put(key, FILES)
    assert cache.get(key) == FILES


def test_invalid_keys_and_names(isolated_cache):
    cache = CompileCache()
    with pytest.raises(ValueError):
        cache.get("../etc")
    with pytest.raises(ValueError):
        cache.put(cache_key("n"), {"../escape": b""})
    with pytest.raises(ValueError):
        cache.put(cache_key("n"), {"MANIFEST.json": b""})


def test_default_cache_follows_cache_dir(tmp_path, monkeypatch):
    first = default_cache()
    assert default_cache() is first
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path / "elsewhere"))
    second = default_cache()
    assert second is not first
    assert second.root == tmp_path / "elsewhere"


def test_clear(isolated_cache):
    key = cache_key("clear")
    default_cache().put(key, FILES)
    assert tl_cache.info()["entries"] == 1
    tl_cache.clear()
    assert tl_cache.info()["entries"] == 0
    assert default_cache().get(key) is None
    assert isolated_cache.exists()  # only the cache's own subdirectories go


def test_clear_deletes_only_what_tilelab_wrote(isolated_cache):
    """A cache directory that already holds the user's files keeps every one of them."""
    (isolated_cache / "ab").mkdir(parents=True)  # two letters, like an old prefix folder
    (isolated_cache / "ab" / "thesis.tex").write_text("years of work")
    (isolated_cache / "notes.txt").write_text("keep me")
    (isolated_cache / "photos").mkdir()
    (isolated_cache / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    key = cache_key("clear-foreign")
    default_cache().put(key, FILES)
    # a stranger's folder inside tilelab's own prefix folder stays too
    stranger = default_cache().entry_dir(key).parent / "not-an-entry"
    stranger.mkdir()
    (stranger / "data").write_text("x")

    # the backup-tools tag goes into tilelab's own subfolder, never the user's folder
    assert not (isolated_cache / "CACHEDIR.TAG").exists()
    assert (isolated_cache / "tilelab-v1" / "CACHEDIR.TAG").is_file()

    tl_cache.clear()
    assert default_cache().get(key) is None
    assert (isolated_cache / "ab" / "thesis.tex").read_text() == "years of work"
    assert (isolated_cache / "notes.txt").read_text() == "keep me"
    assert (isolated_cache / "photos" / "cat.jpg").exists()
    assert (stranger / "data").read_text() == "x"


def test_clear_removes_its_own_subfolder_when_empty(isolated_cache):
    default_cache().put(cache_key("clear-all"), FILES)
    tl_cache.clear()
    assert isolated_cache.exists() and not (isolated_cache / "tilelab-v1").exists()


def test_clear_removes_entries_of_the_layout_before_v1_and_nothing_else(isolated_cache):
    """Earlier versions wrote `<cache_dir>/<xx>/<key>/` and a CACHEDIR.TAG in the cache
    directory itself: clear() removes those (they carry tilelab's manifest and comment)."""
    key = cache_key("old-layout")
    old = isolated_cache / key[:2] / key
    old.mkdir(parents=True)
    (old / "kernel.so").write_bytes(b"\x7fELF")
    (old / "MANIFEST.json").write_text("{}")
    (isolated_cache / key[:2] / "thesis.tex").write_text("years of work")
    (isolated_cache / "zz").mkdir()
    (isolated_cache / "zz" / "draft.txt").write_text("mine")
    (isolated_cache / "CACHEDIR.TAG").write_text(
        "Signature: 8a477f597d28d172789f06886806bc55\n"
        "# This file marks the tilelab compile cache; see https://bford.info/cachedir/\n")

    tl_cache.clear()
    assert not old.exists() and not (isolated_cache / "CACHEDIR.TAG").exists()
    assert (isolated_cache / key[:2] / "thesis.tex").read_text() == "years of work"
    assert (isolated_cache / "zz" / "draft.txt").read_text() == "mine"

    # a tag someone else wrote (another tool's cache) stays
    (isolated_cache / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    tl_cache.clear()
    assert (isolated_cache / "CACHEDIR.TAG").exists()


def test_stale_leftovers_of_killed_writers_are_swept(isolated_cache):
    cache = CompileCache()
    key = cache_key("sweep")
    prefix = cache.entry_dir(key).parent
    prefix.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    killed = prefix / f".tmp-{key}-{dead}-abc"  # a writer that died mid-entry
    killed.mkdir()
    (killed / "kernel.so").write_bytes(b"half")
    old_lock = prefix / f"{cache_key('other')}.lock"  # an unheld lock, hours old
    old_lock.write_text("")
    os.utime(old_lock, (1, 1))
    live = prefix / f".tmp-{key}-{os.getpid()}-xyz"  # a writer still at work
    live.mkdir()

    cache.put(key, FILES)
    assert not killed.exists() and not old_lock.exists()
    assert live.exists()
    assert sorted(p.name for p in prefix.iterdir()) == sorted([key, live.name])


def test_evict_deletes_and_warns(isolated_cache):
    cache = CompileCache()
    key = cache_key("evict")
    cache.put(key, FILES)
    with pytest.warns(CacheCorruptionWarning, match="failed to load"):
        cache.evict(key, "bad library")
    assert cache.get(key) is None
    assert not cache.entry_dir(key).exists()
