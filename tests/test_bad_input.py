"""Bad input gets a clear error, and nothing is lost (issue 12).

Each test here makes one mistake a fair user (or a damaged file) can make and
checks that tilelab answers with a `TileLabError` at the user's line, that the
process survives, and that nothing outside tilelab's own files is touched.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.source_lines import line_of
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


def test_a_cache_hit_reads_what_the_entry_holds_now(isolated_cache):
    """Hits in one process keep the parsed trace.json (megabytes of pass IR), checked against
    the entry's bytes: an entry rewritten since is read again, and no hit shares what
    another may change."""
    tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    first = tilelab.compile(scale_program(), out_idx=-1, target="cpu")  # parsed and kept
    first.trace.code["sass"] = "shown in a view"
    first.trace.bench.append({"ms": 1.0})
    second = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    assert second.trace.cache_hit and "sass" not in second.trace.code
    assert second.trace.bench == [] and second.trace.passes == first.trace.passes
    entry = _only_entry(isolated_cache)
    data = json.loads((entry / "trace.json").read_text())
    _rewrite_entry_file(entry, "trace.json",
                        json.dumps({**data, "warnings": ["rewritten"]}).encode())
    with pytest.warns(tilelab.TileLabWarning, match="rewritten"):
        third = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    assert third.trace.warnings == ["rewritten"]


# ---------------------------------------------------------------- regions guarded on both sides


def halo_program(n, block):
    """out[i] = A[i - 1] + A[i] + A[i + 1], with A read as 0 outside: a left and right halo."""
    @T.prim_func
    def halo(A: T.Tensor((n,), T.float32), Out: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            window = T.alloc_shared((block + 2,), T.float32)
            result = T.alloc_fragment((block,), T.float32)
            T.copy(A[bx * block - 1], window)  # starts one element before the tile
            for i in T.Parallel(block):
                result[i] = window[i] + window[i + 1] + window[i + 2]
            T.copy(result, Out[bx * block])

    return halo


def shift_program(n, block):
    """Out[j] = A[j + 1]: each tile is written one element to the left of where it was read,
    so the first block's first element falls before Out and must not be written."""
    @T.prim_func
    def shift(A: T.Tensor((n,), T.float32), Out: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            tile = T.alloc_fragment((block,), T.float32)
            T.copy(A[bx * block], tile)
            T.copy(tile, Out[bx * block - 1])

    return shift


@pytest.mark.parametrize("n, block", [(64, 16), (50, 16)])
def test_copy_with_a_left_halo_reads_zero_before_the_tensor(n, block):
    kernel = tilelab.compile(halo_program(n, block), out_idx=-1, target="cpu")
    for _ in range(2):
        # the element before A in memory is a canary: it must never be read
        storage = torch.randn(n + 2)
        storage[0] = storage[-1] = 777.0
        a = storage[1:-1]
        padded = torch.nn.functional.pad(a, (1, 1))
        expected = padded[:-2] + padded[1:-1] + padded[2:]
        torch.testing.assert_close(kernel(a.clone()), expected)
        torch.testing.assert_close(kernel(a), expected)


@pytest.mark.parametrize("n, block", [(64, 16), (50, 16)])
def test_copy_to_a_negative_start_never_writes_before_the_tensor(n, block):
    kernel = tilelab.compile(shift_program(n, block), target="cpu")
    storage = torch.full((n + 2,), 555.0)
    out = storage[1:-1]
    a = torch.randn(n)
    kernel(a, out)
    assert storage[0] == 555.0 and storage[-1] == 555.0  # nothing outside Out was touched
    torch.testing.assert_close(out[:-1], a[1:])


def test_cuda_copy_guards_negative_starts():
    """Compile-only for sm_90a: the loads of the halo and the stores of the shift test the
    start of the tensor too (`0 <= index`), not only its end."""
    pytest.importorskip("tvm")
    from tilelab.backends.cuda import nvcc

    if not nvcc.find_nvcc():
        pytest.skip("needs nvcc")
    for program in (halo_program(64, 16), shift_program(64, 16)):
        source = tilelab.compile(program, target="cuda:sm_90a").get_kernel_source()
        guards = [line for line in source.splitlines() if "blockIdx.x" in line and
                  ("if (" in line or "?" in line)]
        assert any("0 <" in g or "1 <=" in g or ">= 0" in g or "<= (" in g for g in guards), \
            "\n".join(guards)


# ---------------------------------------------------------------- T.print messages are data

MESSAGES = ["%s%s%s%s", "%d %n %x", 'say "hi"', "back\\slash\\", "two\nlines", "tab\tand ??=",
            'x"); asm("trap;"); printf("', "ünïcödé ✓", "%"]

PRINT_SCRIPT = '''
import sys, torch, tilelab, tilelab.language as T
MSG = {msg!r}

@T.prim_func
def show(A: T.Tensor((2,), T.float32)):
    with T.Kernel(1, threads=32) as bx:
        T.print(A[1], msg=MSG)
        T.print(A, msg=MSG)

tilelab.compile(show, target="cpu")(torch.tensor([1.5, 2.5]))
'''


@pytest.mark.parametrize("msg", MESSAGES)
def test_print_message_is_printed_as_is_on_the_cpu(msg, isolated_cache):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), TILELAB_CACHE_DIR=str(isolated_cache))
    script = isolated_cache.parent / "show.py"  # kernels are read from their source file
    script.write_text(PRINT_SCRIPT.format(msg=msg), encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    out = run.stdout.decode()
    assert out == f"{msg}: 2.5\n{msg}: A[0] = 1.5\n{msg}: A[1] = 2.5\n"


def _c_literals(line: str) -> list[bytes]:
    """The string literals of one line of C, decoded as a C compiler reads them."""
    literals, i = [], 0
    while (i := line.find('"', i)) >= 0:
        out, i = bytearray(), i + 1
        while line[i] != '"':
            if line[i] != "\\":
                out += line[i].encode()
                i += 1
                continue
            nxt = line[i + 1]
            if nxt in "01234567":
                digits = ""
                while len(digits) < 3 and line[i + 1 + len(digits)] in "01234567":
                    digits += line[i + 1 + len(digits)]
                out.append(int(digits, 8))
                i += 1 + len(digits)
            else:
                out += {"n": b"\n", "t": b"\t"}.get(nxt, nxt.encode())
                i += 2
        literals.append(bytes(out))
        i += 1
    return literals


@pytest.mark.parametrize("msg", MESSAGES)
def test_print_message_is_a_c_string_literal_on_cuda(msg):
    """Compile-only for sm_90a (nvcc accepts the source); the literal decodes to the message,
    and the format, tilelab's own, passes it through `%s`."""
    from tilelab.backends.cuda import nvcc

    if not nvcc.find_nvcc():
        pytest.skip("needs nvcc")

    @T.prim_func
    def show(A: T.Tensor((2,), T.float32)):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((2,), T.float32)
            T.copy(A, acc)
            T.print(A[1], msg=msg)
            T.print(A, msg=msg)
            T.print(acc, msg=msg)

    source = tilelab.compile(show, target="cuda:sm_90a").get_kernel_source()
    calls = [line for line in source.splitlines() if "printf(" in line]
    assert len(calls) >= 3
    for line in calls:
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line)  # the line without its literals
        assert code.count("printf(") == 1 and "asm" not in code, line
        fmt, message = _c_literals(line)[:2]
        assert fmt.startswith(b"%s: ") and b"%" not in fmt[4:].replace(b"%d", b"").replace(
            b"%g", b"")
        assert message == msg.encode()


# ---------------------------------------------------------------- launch limits, huge extents


def _copy_kernel(n=1024, threads=128, tile=256, shared=False):
    @T.prim_func
    def k(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, tile), threads=threads) as bx:  # @kernel-line
            t = T.alloc_shared((tile,), T.float32) if shared else \
                T.alloc_fragment((tile,), T.float32)
            T.copy(A[bx * tile], t)
            T.copy(t, B[bx * tile])

    return k


@pytest.mark.parametrize("threads", [100000, 4096, 0, -3, True, 1.5, (32, 64), (2, 2, 2, 2)])
def test_thread_counts_a_gpu_cannot_launch_are_rejected_at_the_kernel_line(threads):
    import time

    started = time.perf_counter()
    with pytest.raises(TileLabError, match="threads") as info:
        _copy_kernel(threads=threads)
    assert time.perf_counter() - started < 5
    assert info.value.location.line == line_of(__file__, "# @kernel-line")


def test_a_huge_register_tile_is_rejected_quickly():
    import time

    started = time.perf_counter()
    with pytest.raises(TileLabError, match="register tile holds at most"):
        _copy_kernel(n=1_000_000, tile=1_000_000)
    assert time.perf_counter() - started < 5


def test_shared_memory_beyond_any_gpu_is_rejected_while_tracing():
    with pytest.raises(TileLabError, match="no GPU block has more than 227 KB"):
        _copy_kernel(n=1 << 20, tile=300 * 256, shared=True)  # 300 KB


@pytest.mark.parametrize("arch, ok", [("sm_90a", True), ("sm_80", True), ("sm_86", False)])
def test_shared_memory_is_checked_against_the_target(arch, ok):
    """128 KB of shared memory: fits an sm_90 or sm_80 block, not an sm_86 one (99 KB)."""
    from tilelab.backends.cuda import nvcc

    if not nvcc.find_nvcc():
        pytest.skip("needs nvcc")
    program = _copy_kernel(n=1 << 16, tile=32 * 1024, shared=True)
    if ok:
        tilelab.compile(program, target=f"cuda:{arch}")
        return
    with pytest.raises(TileLabError, match="99 KB") as info:
        tilelab.compile(program, target=f"cuda:{arch}")
    assert "alloc_shared" in info.value.location.source_line


def _two_tiles(together: bool, n=1 << 16, tile=32 * 1024):
    """Two 128 KB shared tiles: used one after the other, or both at once."""

    @T.prim_func
    def k(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32),
          C: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, tile), threads=128) as bx:
            first = T.alloc_shared((tile,), T.float32)
            second = T.alloc_shared((tile,), T.float32)
            T.copy(A[bx * tile], first)
            if together:
                T.copy(A[bx * tile], second)
                T.copy(first, B[bx * tile])
                T.copy(second, C[bx * tile])
            else:
                T.copy(first, B[bx * tile])
                T.copy(A[bx * tile], second)
                T.copy(second, C[bx * tile])

    return k


@pytest.mark.parametrize("together", [False, True])
def test_shared_tiles_that_add_up_past_a_block_are_judged_by_the_cuda_compile(together):
    """256 KB of shared tiles in all: the CPU runs them (with a warning); for CUDA, tiles
    whose uses do not overlap share memory and fit a 227 KB block, tiles live at once do
    not (TileLang's GQA backward adds up to 268 KB and fits)."""
    import warnings

    from tilelab.backends.cuda import nvcc
    from tilelab.errors import TileLabWarning

    program = _two_tiles(together)
    a = torch.randn(1 << 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tilelab.compile(program, out_idx=[1, 2], target="cpu")
    assert any(issubclass(w.category, TileLabWarning) and "256 KB" in str(w.message)
               for w in caught)
    b, c = kernel(a)
    assert torch.equal(b, a) and torch.equal(c, a)
    if not nvcc.find_nvcc():
        return
    if not together:
        assert tilelab.compile(program, target="cuda:sm_90a").launch["dynamic_smem"] \
            <= 227 * 1024
        return
    with pytest.raises(TileLabError, match="227 KB"):
        tilelab.compile(program, target="cuda:sm_90a")


def test_pipeline_slots_past_a_block_are_refused_before_the_lowering():
    """The slots of a pipelined loop are in use together: 128x256x64 tiles in 5 stages need
    240 KB, more than an sm_90a block has. Said right after pipelining, at the line of the
    largest tile, in a fraction of a whole compile (an autotuner sweep has many such); the
    check after the lowering would not speak of slots."""
    from examples.gemm import gemm_kernel
    from tilelab.backends.cuda import nvcc

    if not nvcc.find_nvcc():
        pytest.skip("needs nvcc")
    a = torch.empty(1024, 1024, dtype=torch.float16, device="meta")
    with pytest.raises(TileLabError, match="at least 240.0 KB of shared memory per block for "
                                           "the slots of its pipelined loop") as info:
        gemm_kernel.compile(a, a, block_n=256, block_k=64, num_stages=5, threads=256,
                            target="cuda:sm_90a")
    assert "alloc_shared" in info.value.location.source_line


# ---------------------------------------------------------------- nothing silently ignored or stale

SCALE = 2.0  # a module global the kernel below reads


@tilelab.jit
def scaled_add(A, B, block: int = 64):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B: T.Tensor((N,), T.float32)
    C = T.empty((N,), T.float32)
    Scratch = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                C[bx * block + i] = (A[bx * block + i] + B[bx * block + i]) * SCALE
                Scratch[bx * block + i] = 0.0
    return C


@pytest.mark.parametrize("call, match", [
    (lambda a, b, c: scaled_add(a, b, blocksize=1, out=c), "unexpected keyword.*blocksize, out"),
    (lambda a, b, c: scaled_add.compile(N=-5), "N=-5: a size must be a positive int"),
    (lambda a, b, c: scaled_add.compile(N=True), "N=True"),
    (lambda a, b, c: scaled_add(a, b, block=True), "bounds must be ints"),
    (lambda a, b, c: scaled_add(a, b, block=2.5), "grid sizes must be ints"),
    (lambda a, b, c: scaled_add.compile(a, b)(a, b, out=c), "unexpected keyword.*out"),
    (lambda a, b, c: scaled_add(a, b, c), "got tensor"),  # c lands in `block`
])
def test_call_mistakes_are_errors(call, match):
    a, b, c = torch.randn(100), torch.randn(100), torch.zeros(100)
    with pytest.raises(TileLabError, match=match):
        call(a, b, c)
    assert torch.count_nonzero(c) == 0


def test_factory_with_unknown_keyword_is_an_error():
    @tilelab.jit(out_idx=-1)
    def factory(n, block=16):
        return scale_program(n, block)

    with pytest.raises(TileLabError, match="unexpected keyword argument 'blk'"):
        factory(64, blk=8)


def test_jit_follows_the_globals_a_kernel_reads():
    global SCALE
    a, b = torch.randn(100), torch.randn(100)
    try:
        torch.testing.assert_close(scaled_add(a, b), (a + b) * 2)
        SCALE = 3.0
        torch.testing.assert_close(scaled_add(a, b), (a + b) * 3)
    finally:
        SCALE = 2.0
    torch.testing.assert_close(scaled_add(a, b), (a + b) * 2)


def test_repeated_calls_reuse_their_kernel_and_still_check_the_inputs():
    """A positional call like an earlier one goes straight to that kernel (no re-binding of
    the signature), and the kernel still checks what it is given."""
    a, b = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(scaled_add(a, b), (a + b) * 2)
    compiled = dict(scaled_add._kernels)
    c, d = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(scaled_add(c, d), (c + d) * 2)
    assert scaled_add._kernels == compiled  # nothing traced again
    strided = torch.randn(100, 2)[:, 0]
    with pytest.raises(TileLabError, match="contiguous"):
        scaled_add(strided, d)
    with pytest.raises(TileLabError, match="float32"):
        scaled_add(a.double(), b)


def test_return_names_the_outputs():
    """`return C` returns C alone; another T.empty is a scratch output, not returned."""
    a, b = torch.randn(100), torch.randn(100)
    result = scaled_add(a, b)
    assert isinstance(result, torch.Tensor)
    torch.testing.assert_close(result, (a + b) * 2)


def test_a_tensor_declared_but_not_a_parameter_is_an_error_at_its_line():
    """An output written `C: T.Tensor(...)` as a prim_func's parameter would be, in an
    eager kernel whose parameters do not name it (TVM failed deep in its passes)."""
    @tilelab.jit(out_idx=[1])
    def copy_out(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        C: T.Tensor((N,), T.float32)  # noqa: F842
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                C[i] = A[i]  # noqa: F821

    with pytest.raises(TileLabError, match="C is declared as a tensor but is not a "
                                           "parameter of copy_out") as error:
        copy_out(torch.randn(64))
    assert error.value.location.line == copy_out.fn.__code__.co_firstlineno + 4
    assert "T.empty" in str(error.value)


# ---------------------------------------------------------------- raw internals become errors


def test_zero_size_dimensions_are_errors():
    from examples.softmax import softmax_kernel

    with pytest.raises(TileLabError, match=r"shape \(4, 0\).*positive"):
        softmax_kernel(torch.randn(4, 0, dtype=torch.float16))


def test_zero_size_k_in_gemm_is_an_error():
    from examples.gemm import gemm_kernel

    a = torch.randn(64, 0, dtype=torch.float16)
    b = torch.randn(0, 64, dtype=torch.float16)
    with pytest.raises(TileLabError, match="positive"):
        gemm_kernel(a, b)


@pytest.mark.parametrize("make", [
    lambda: torch.empty(64, device="meta"),
    lambda: _read_only(64),
])
def test_unusual_tensors_are_argument_errors(make):
    kernel = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    with pytest.raises(tilelab.TileLabArgumentError):
        kernel(make())


def _read_only(n):
    import numpy as np

    array = np.zeros(n, np.float32)
    array.flags.writeable = False
    return array


def test_impossible_tensor_sizes_raise():
    for shape, match in [((2**31,), "32-bit"), ((2**16, 2**15), "32-bit"),
                         ((-8,), "positive"), ((0,), "positive")]:
        with pytest.raises(TileLabError, match=match):
            @T.prim_func
            def k(A: T.Tensor(shape, T.float32)):
                with T.Kernel(1, threads=32):
                    T.fill(A, 1.0)


@pytest.mark.parametrize("shape", [(-8,), (0,), (4, 0), ()])
def test_bad_tile_shapes(shape):
    with pytest.raises(TileLabError, match="dimension"):
        @T.prim_func
        def k(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                t = T.alloc_fragment(shape, T.float32)  # noqa: F841


def test_effect_free_kernel_for_cuda_is_a_clear_error():
    from tilelab.backends.cuda import nvcc

    if not nvcc.find_nvcc():
        pytest.skip("needs nvcc")

    @T.prim_func
    def nothing(A: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=32):
            pass

    with pytest.raises(TileLabError, match="no effect"):
        tilelab.compile(nothing, target="cuda:sm_90a")

    @T.prim_func
    def reads_only(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=32):
            T.print(A[0], msg="first")

    kernel = tilelab.compile(reads_only, target="cuda:sm_90a")  # B unused: still launchable
    assert kernel.launch["arg_order"] == [0]


# ---------------------------------------------------------------- damaged kernel files


def _kernel_file(path, members: dict, encrypted=()):
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    if encrypted:  # set the "encrypted" flag in the local and central headers of the members
        raw = bytearray(path.read_bytes())
        for name in encrypted:
            encoded = name.encode()
            for signature, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
                at = raw.find(signature)
                while at >= 0:
                    if raw[at + name_at:at + name_at + len(encoded)] == encoded:
                        raw[at + flag_at] |= 0x1
                    at = raw.find(signature, at + 4)
        path.write_bytes(bytes(raw))
    return path


META = {"format": "tilelab-kernel", "version": 1, "name": "k", "kernel_name": "k_kernel",
        "grid": [1, 1, 1], "block": [32, 1, 1], "dynamic_smem": 0, "arch": "sm_90a",
        "params": [{"name": "A", "shape": [8], "dtype": "float32", "output": False}]}


def test_kernel_file_bombs_are_refused_before_unpacking(tmp_path, monkeypatch):
    import tracemalloc

    from tilelab.runtime import artifact

    monkeypatch.setitem(artifact._LIMITS, "kernel.cubin", 1 << 20)  # 1 MB instead of 256 MB
    path = _kernel_file(tmp_path / "bomb.tilelab",
                        {"meta.json": json.dumps(META), "kernel.cubin": bytes(64 << 20)})
    assert path.stat().st_size < 1 << 20  # 64 MB of zeros, compressed
    tracemalloc.start()
    with pytest.raises(artifact.TileLabArtifactError, match="would unpack to 67108864 bytes"):
        artifact.load_artifact(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20


def test_deeply_nested_json_is_refused(tmp_path):
    from tilelab.runtime import artifact

    deep = "[" * 200_000 + "]" * 200_000
    meta = json.dumps(dict(META, extra="@")).replace('"@"', deep)
    path = _kernel_file(tmp_path / "deep.tilelab", {"meta.json": meta, "kernel.cubin": b"x"})
    with pytest.raises(artifact.TileLabArtifactError, match="nested"):
        artifact.load_artifact(path)

    path = _kernel_file(tmp_path / "deep-trace.tilelab", {
        "meta.json": json.dumps(META), "kernel.cubin": b"x", "trace.json": deep})
    loaded = artifact.load_artifact(path)
    with pytest.warns(tilelab.TileLabWarning, match="could not be read"):
        trace = loaded.trace()
    assert trace.kernel == "k"


def test_encrypted_members_are_refused(tmp_path):
    from tilelab.runtime import artifact

    path = _kernel_file(tmp_path / "locked.tilelab",
                        {"meta.json": json.dumps(META), "kernel.cubin": b"x"},
                        encrypted=("kernel.cubin",))
    with pytest.raises(artifact.TileLabArtifactError, match="encrypted"):
        artifact.load_artifact(path)


# ---------------------------------------------------------------- CPU access checks


def _check_error(program, *args, marker: str, match: str):
    kernel = tilelab.compile(program, target="cpu")
    with pytest.raises(TileLabError, match=match) as info:
        kernel(*args)
    assert info.value.location.line == line_of(__file__, marker), str(info.value)
    return kernel


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90a"])
def test_parallel_extent_larger_than_the_fragment_is_refused(target):
    """Past the fragment's end on every run: refused when compiling, for every target
    (passes/check_loop_bounds.py), with the message the CPU's run-time check gives."""
    @T.prim_func
    def too_long(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(2, threads=32) as bx:
            t = T.alloc_fragment((32,), T.float32)
            T.copy(A[bx * 32], t)
            for i in T.Parallel(40):
                t[i] = t[i] * 2.0  # @too-long
            T.copy(t, B[bx * 32])

    with pytest.raises(TileLabError, match=r"index out of bounds: t\[i\] \(the shape of t "
                                           r"is \(32,\)\)") as info:
        tilelab.compile(too_long, target=target)
    assert info.value.location.line == line_of(__file__, "# @too-long"), str(info.value)
    assert "i runs from 0 to 39" in info.value.hint


def test_a_gather_past_a_tensors_edge_says_how_to_guard_it():
    """TileLang reads 0 past a tensor's edge (its CUDA lowering guards every global read);
    tilelab stops there, and says how to write the guard."""
    @T.prim_func
    def gather(X: T.Tensor((16,), T.float32), idx: T.Tensor((32,), T.int32),
               Y: T.Tensor((32,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                Y[i] = X[idx[i]]  # @edge-read

    idx = torch.arange(32, dtype=torch.int32)  # 16.. lie past X's end (a sentinel, say)
    _check_error(gather, torch.randn(16), idx, torch.zeros(32), marker="# @edge-read",
                 match=r"X\[idx\[i\]\].*guard it: T.if_then_else\(<index in bounds>, X")


def test_wrong_tail_guard_is_reported_and_nothing_is_written_past_the_end():
    @T.prim_func
    def tail(A: T.Tensor((50,), T.float32), B: T.Tensor((50,), T.float32)):
        with T.Kernel(4, threads=32) as bx:
            for i in T.Parallel(16):
                if bx * 16 + i <= 50:  # should be <
                    B[bx * 16 + i] = A[bx * 16 + i]  # @tail

    storage = torch.full((52,), 555.0)
    _check_error(tail, torch.randn(50), storage[1:-1], marker="# @tail", match="B")
    assert storage[0] == 555.0 and storage[-1] == 555.0


def test_constant_index_out_of_range_and_data_dependent_index():
    @T.prim_func
    def gather(A: T.Tensor((8,), T.float32), Idx: T.Tensor((8,), T.int32),
               B: T.Tensor((8,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                B[i] = A[Idx[i]]  # @gather

    kernel = tilelab.compile(gather, target="cpu")
    a = torch.randn(8)
    good = torch.randint(0, 8, (8,), dtype=torch.int32)
    b = torch.zeros(8)
    kernel(a, good, b)
    torch.testing.assert_close(b, a[good.long()])
    bad = good.clone()
    bad[3] = -1
    _check_error(gather, a, bad, b, marker="# @gather", match=r"A\[Idx\[i\]\]")


def test_integer_division_by_zero_is_an_error_not_sigfpe():
    @T.prim_func
    def divide(A: T.Tensor((8,), T.int32), B: T.Tensor((8,), T.int32),
               C: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                C[i] = A[i] // B[i] + A[i] % B[i]  # @divide

    kernel = tilelab.compile(divide, target="cpu")
    a = torch.randint(-50, 50, (8,), dtype=torch.int32)
    b = torch.randint(1, 9, (8,), dtype=torch.int32)
    c = torch.zeros(8, dtype=torch.int32)
    kernel(a, b, c)
    torch.testing.assert_close(c, a // b + a % b)
    b[2] = 0
    _check_error(divide, a, b, c, marker="# @divide", match="division by zero")
    a[5], b[5] = -2**31, -1
    b[2] = 1
    _check_error(divide, a, b, c, marker="# @divide", match="overflow")


def test_checks_can_be_turned_off(monkeypatch):
    """TILELAB_CHECK_BOUNDS=0 builds (and caches) the kernel without bounds checks."""
    monkeypatch.setenv("TILELAB_CHECK_BOUNDS", "0")
    kernel = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    assert "check_status" not in kernel.trace.passes[-1].ir
    monkeypatch.setenv("TILELAB_CHECK_BOUNDS", "1")
    kernel = tilelab.compile(scale_program(), out_idx=-1, target="cpu")
    assert not kernel.trace.cache_hit


# ---------------------------------------------------------------- operators on the wrong types


@pytest.mark.parametrize("expr, match", [
    ("T.Cast(T.float32, bx ** 2 + i)", r"\*\* needs floating-point values"),
    ("A[i] ^ 1", "needs integer values"),
    ("T.Cast(T.float32, I[i] << -1)", "cannot shift"),
    ("T.Cast(T.float32, I[i] + 2**31)", "does not fit in int32"),
    ("T.Cast(T.float32, I[i] // 0)", "division by zero"),
    ("A[i] % 0.75", None),   # floats: Python's meaning
    ("A[i] // 0.75", None),
])
def test_operators_check_their_operand_types(tmp_path, monkeypatch, expr, match):
    import importlib

    (tmp_path / "op_kernel.py").write_text(f'''import tilelab.language as T

@T.prim_func
def k(A: T.Tensor((8,), T.float32), I: T.Tensor((8,), T.int32), B: T.Tensor((8,), T.float32)):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = {expr}
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "op_kernel", raising=False)
    if match is not None:
        with pytest.raises(TileLabError, match=match) as info:
            importlib.import_module("op_kernel")
        assert info.value.location.line == 7 and "Check failed" not in str(info.value)
        return
    module = importlib.import_module("op_kernel")
    a, b = torch.randn(8) * 4, torch.zeros(8)
    tilelab.compile(module.k, target="cpu")(a, torch.arange(8, dtype=torch.int32), b)
    expected = a % 0.75 if "%" in expr else a // 0.75
    torch.testing.assert_close(b, expected, rtol=1e-5, atol=1e-5)


def test_division_by_a_loop_index_that_starts_at_zero(tmp_path, monkeypatch):
    """Found by the fuzzer: TVM's simplifier stops at `x // j` with j = 0."""
    import importlib

    (tmp_path / "div_kernel.py").write_text('''import tilelab.language as T

@T.prim_func
def k(A: T.Tensor((4, 8), T.float32), B: T.Tensor((4, 8), T.float32)):
    with T.Kernel(1, threads=32) as bx:
        t = T.alloc_fragment((4, 8), T.float32)
        T.copy(A, t)
        for i, j in T.Parallel(4, 8):
            t[i, j] = T.if_then_else(bx * 8 // j < 8, t[i, j], 0.0)
        T.copy(t, B)
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("div_kernel")
    try:
        kernel = tilelab.compile(module.k, target="cpu")
    except TileLabError as err:
        assert "divides an integer by a value that is 0" in str(err)
        assert "Check failed" not in str(err)
        return
    with pytest.raises(TileLabError, match="division by zero"):
        kernel(torch.randn(4, 8), torch.zeros(4, 8))


def _module(tmp_path, monkeypatch, name: str, text: str):
    import importlib
    import sys

    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_a_float_index_is_an_error_at_its_line(tmp_path, monkeypatch):
    """Found by the fuzzer (a constant 0 mutated to 0.5 or -0.0): TVM's type check."""
    for index, shown in (("A[bx * 8, 0.5]", "0.5"), ("A[bx * 8, -0.0:4]", "-0.0"),
                         ("A[T.Cast(T.float32, bx), 0]", "float32")):
        with pytest.raises(TileLabError, match="indices are integers") as info:
            _module(tmp_path, monkeypatch, "float_index", f'''import tilelab.language as T

@T.prim_func
def k(A: T.Tensor((16, 8), T.float32), B: T.Tensor((16, 8), T.float32)):
    with T.Kernel(2, threads=32) as bx:
        t = T.alloc_fragment((8, 4), T.float32)
        T.copy({index}, t)
''')
        assert info.value.location.line == 7 and shown in str(info.value)


def test_num_stages_beyond_any_pipeline_is_an_error_not_a_hang(tmp_path, monkeypatch):
    """Found by the fuzzer (num_stages=2**31: the pipeline's prologue ran for ever)."""
    with pytest.raises(TileLabError, match="at most 32") as info:
        _module(tmp_path, monkeypatch, "stages_kernel", '''import tilelab.language as T

@T.prim_func
def k(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
    with T.Kernel(1, threads=32) as bx:
        s = T.alloc_shared((8,), T.float32)
        for k in T.Pipelined(8, num_stages=2**31):
            T.copy(A[k * 8], s)
            T.copy(s, B[k * 8])
''')
    assert info.value.location.line == 7


def test_shifts_by_the_width_or_more_shift_everything_out(tmp_path, monkeypatch):
    """Found by the fuzzer (`+` mutated to `<<`): C and LLVM leave a shift by 32 or more
    undefined, and the CPU backend's bounds checks were optimized away after it; tilelab
    defines it as PTX does (the amount clamped to the width)."""
    module = _module(tmp_path, monkeypatch, "shift_kernel", '''import tilelab.language as T

@T.prim_func
def k(X: T.Tensor((64,), T.int32), S: T.Tensor((64,), T.int32),
      L: T.Tensor((64,), T.int32), R: T.Tensor((64,), T.int32)):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            L[i] = X[i] << S[i]
            R[i] = X[i] >> S[i]
''')
    x = torch.randint(-1000, 1000, (64,), dtype=torch.int32)
    s = torch.arange(-8, 56, dtype=torch.int32)
    left, right = torch.zeros_like(x), torch.zeros_like(x)
    tilelab.compile(module.k, target="cpu")(x, s, left, right)
    inside = (s >= 0) & (s < 32)
    shift = s.clamp(0, 31)
    torch.testing.assert_close(left, torch.where(inside, x << shift, 0))
    torch.testing.assert_close(right, torch.where(inside, x >> shift, x >> 31))


def test_an_index_that_a_shift_sends_negative_is_caught_not_a_crash(tmp_path, monkeypatch):
    module = _module(tmp_path, monkeypatch, "shift_index", '''import tilelab.language as T

@T.prim_func
def k(A: T.Tensor((1024,), T.float32), C: T.Tensor((1024,), T.float32)):
    with T.Kernel(4, threads=256) as bx:
        for t in T.Parallel(256):
            index = bx * 256 << t
            if index < 1024:
                C[index] = A[index]
''')
    with pytest.raises(TileLabError, match="index out of bounds"):
        tilelab.compile(module.k, target="cpu")(torch.randn(1024), torch.zeros(1024))
