"""Bad input gets a clear error, and nothing is lost (issue 12).

Each test here makes one mistake a fair user (or a damaged file) can make and
checks that tilelab answers with a `TileLabError` at the user's line, that the
process survives, and that nothing outside tilelab's own files is touched.
"""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab import TileLabError
from tilelab.cache import CacheCorruptionWarning, default_cache


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILELAB_DISABLE_CACHE", raising=False)
    return tmp_path / "cache"


def scale_program(n=64, block=16):
    @T.prim_func
    def scale(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            tile = T.alloc_fragment((block,), T.float32)
            T.copy(A[bx * block], tile)
            for i in T.Parallel(block):
                tile[i] = tile[i] * 2.0
            T.copy(tile, B[bx * block])

    return scale


# ---------------------------------------------------------------- the compile cache heals


def _rewrite_entry_file(entry, name: str, data: bytes) -> None:
    """Replace one file of a cache entry and update the manifest, as a consistent but bad
    entry (the manifest check cannot catch it)."""
    (entry / name).write_bytes(data)
    manifest = json.loads((entry / "MANIFEST.json").read_text())
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (entry / "MANIFEST.json").write_text(json.dumps(manifest))


def _only_entry(root):
    entries = [p for p in (root / "tilelab-v1").glob("??/*") if p.is_dir()
               and not p.name.startswith(".")]
    assert len(entries) == 1, entries
    return entries[0]


@pytest.mark.parametrize("name, data", [
    ("trace.json", b'{"kernel": '),                      # truncated JSON
    ("trace.json", b"[" * 100_000 + b"]" * 100_000),     # nested past the recursion limit
    ("kernel.so", b"\x7fELF not a library"),             # a library the loader rejects
])
def test_cache_entry_that_fails_to_load_heals(isolated_cache, name, data):
    a = torch.randn(64)
    expected = a * 2
    tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    entry = _only_entry(isolated_cache)
    _rewrite_entry_file(entry, name, data)

    with pytest.warns(CacheCorruptionWarning, match="failed to load"):
        kernel = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    torch.testing.assert_close(kernel(a), expected)
    assert (entry / name).read_bytes() != data  # a fresh, good entry took its place
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # healed: no second warning
        kernel = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    assert kernel.trace.cache_hit
    torch.testing.assert_close(kernel(a), expected)
    assert default_cache().info()["entries"] == 1
