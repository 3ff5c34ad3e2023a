"""Layouts: where each element of a tile lives.

Two kinds of answers, both functions of an element's index:

* a **Layout** gives a memory offset. Global tensors are row-major; shared
  tiles may be *swizzled*: the 16-byte chunks of each row are permuted by an
  XOR with the row number, so that eight threads reading one column of chunks
  (as `ldmatrix` does) hit eight different memory banks.
* a **Fragment** gives a (thread, register) pair. A fragment tile such as the
  64x64 accumulator of a GEMM is spread over the block's threads; each thread
  keeps its share in a small local array. With *replication* several threads
  keep a copy of the same element (a row maximum that every thread of the row
  needs, say); `rep` numbers the copies.

Fragments are built from a few families - the tensor-core tiles of the PTX
`mma.m16n8k16` instruction, block-cyclic spreading for elementwise work, full
replication - and from composition: `repeat` stacks copies of a fragment
(as more registers per thread, or as more threads), `replicate` adds copies.

Each layout is a Python function that works on integers (for tables, queries
and pictures) and on TIR expressions (for code generation); a fragment's
inverse, (thread, register) -> index, comes from TVM's IndexMap.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

# ---------------------------------------------------------------- int/expr arithmetic


_INTEGERS = (int, np.integer, np.ndarray)


def _is_int(x) -> bool:
    """A concrete integer: a Python int, or numpy integers (whole tables at once)."""
    return isinstance(x, _INTEGERS)


def fdiv(a, b):
    if _is_int(a):
        return a // b
    from tvm import tirx

    return tirx.floordiv(a, b)


def fmod(a, b):
    if _is_int(a):
        return a % b
    from tvm import tirx

    return tirx.floormod(a, b)


def xor(a, b):
    if _is_int(a) and _is_int(b):
        return a ^ b
    from tvm import tirx

    return tirx.bitwise_xor(a, b)


def _and(a, b):
    if isinstance(a, bool) and isinstance(b, bool):
        return a and b
    from tvm import tirx

    return tirx.And(a, b)


def _over_all_indices(fn, shape, outputs: int, at_once: bool = True) -> tuple:
    """`fn(*index)` for every index of `shape`, as one int64 array per output.

    Layout functions are index arithmetic (`fdiv`, `fmod`, `xor`, `+`, `*`), which numpy
    evaluates over all indices at once (`at_once`); one that decides in Python per
    element, or a user's layout written with TIR, is evaluated element by element. A few
    elements are recomputed one by one to check the arrays either way."""
    shape = tuple(int(s) for s in shape)

    def one(idx):
        value = fn(*idx)
        return tuple(int(v) for v in (value if outputs > 1 else (value,)))

    if at_once:
        try:
            value = fn(*np.indices(shape, dtype=np.int64))
            arrays = tuple(np.broadcast_to(np.asarray(v, dtype=np.int64), shape)
                           for v in (value if outputs > 1 else (value,)))
            size = math.prod(shape)
            probes = {0, size - 1, *np.random.default_rng(0).integers(0, size, 8).tolist()}
            if len(arrays) == outputs and all(
                    one(np.unravel_index(f, shape)) == tuple(int(a.flat[f]) for a in arrays)
                    for f in probes):
                return tuple(np.array(a) for a in arrays)
        except Exception:  # noqa: BLE001 - not plain index arithmetic: one by one
            pass
    arrays = tuple(np.zeros(shape, dtype=np.int64) for _ in range(outputs))
    for idx in itertools.product(*(range(s) for s in shape)):
        for array, v in zip(arrays, one(idx)):
            array[idx] = v
    return arrays


def _product(values) -> int:
    return math.prod(values) if values else 1


def _reindexed(idx, shape, into) -> list:
    """The index in shape `into` of the element at `idx` in shape `shape`, both row-major."""
    flat = 0
    for i, extent in zip(idx, shape):
        flat = flat * extent + i
    out = []
    for extent in reversed(into):
        out.append(fmod(flat, extent))
        flat = fdiv(flat, extent)
    return out[::-1]


def _progression(ks: list):
    """(k0, s1, n1, s2, n2) with ks == [k0 + a * s1 + b * s2 for b < n2 for a < n1], or None."""
    n1 = 1
    s1 = ks[1] - ks[0] if len(ks) > 1 else 1
    while n1 < len(ks) and ks[n1] - ks[n1 - 1] == s1:
        n1 += 1
    if len(ks) % n1:
        return None
    n2 = len(ks) // n1
    s2 = ks[n1] - ks[0] if n2 > 1 else 1
    made = [ks[0] + a * s1 + b * s2 for b in range(n2) for a in range(n1)]
    return (ks[0], s1, n1, s2, n2) if made == ks else None


# ---------------------------------------------------------------- Layout


@dataclass
class Layout:
    """index -> offset in memory. `recipe` names how it was made (for printing and JSON)."""

    shape: tuple
    forward: object  # callable(*indices) -> offset
    recipe: dict = field(default_factory=dict)

    def offset(self, *indices):
        return self.forward(*indices)

    @property
    def size(self) -> int:
        return _product(self.shape)

    @staticmethod
    def custom(shape, forward_fn) -> Layout:
        """`T.Layout(shape, lambda i, j: offset)`: any index -> offset function.

        The function may also return a list of coordinates (`lambda i, j: [j, i]`):
        the element then lives at that index of a row-major array whose extents are
        the largest value of each coordinate plus one.
        """
        shape = tuple(int(s) for s in shape)
        if isinstance(forward_fn(*[0] * len(shape)), (list, tuple)):
            forward_fn = _flatten_coordinates(shape, forward_fn)
        return Layout(shape, forward_fn, {"kind": "custom", "shape": list(shape)})

    @staticmethod
    def row_major(shape) -> Layout:
        shape = tuple(int(s) for s in shape)

        def forward(*idx):
            off = 0
            for i, extent in zip(idx, shape):
                off = off * extent + i
            return off

        layout = Layout(shape, forward, {"kind": "row_major", "shape": list(shape)})
        layout.place = lambda row, col: (row, col)  # where (row, col) of a 2-d tile is stored
        return layout

    @staticmethod
    def swizzled(shape, dtype_bits: int) -> Layout:
        """Row-major with each row's 16-byte chunks XOR-permuted by the row number.

        Rows narrower than 128 bytes share a 128-byte line with their
        neighbours, so the XOR key is taken from the line number instead.
        """
        shape = tuple(int(s) for s in shape)
        rows, cols = _product(shape[:-1]), shape[-1]
        per_chunk = 128 // dtype_bits  # elements in 16 bytes
        chunks = cols // per_chunk
        if chunks < 2 or cols % per_chunk:
            return Layout.row_major(shape)
        row_bytes = cols * dtype_bits // 8
        rows_per_line = max(128 // row_bytes, 1)
        key_range = min(chunks, 8)

        def column(row, col):
            """The swizzle permutes 16-byte chunks within a row: where column `col` goes.
            (The chunk's group is `chunk // key_range * key_range`, not `chunk - low`: TVM
            0.27's FlattenBuffer divides by zero on `c * 8 - c % 8 * 8` when c < 8.)"""
            chunk = fdiv(col, per_chunk)
            key = fmod(fdiv(row, rows_per_line), key_range)
            low = fmod(chunk, key_range)
            group = fdiv(chunk, key_range) * key_range
            return (group + xor(low, key)) * per_chunk + fmod(col, per_chunk)

        def forward(*idx):
            row = 0
            for i, extent in zip(idx[:-1], shape[:-1]):
                row = row * extent + i
            return row * cols + column(row, idx[-1])

        _ = rows
        layout = Layout(shape, forward, {"kind": "swizzled", "shape": list(shape),
                                         "dtype_bits": dtype_bits})
        layout.column = column
        layout.place = lambda row, col: (row, column(row, col))
        return layout

    @staticmethod
    def wgmma_panels(shape, dtype_bits: int, swizzle_bytes: int) -> Layout:
        """The shared-memory layout warpgroup MMA reads through a matrix descriptor.

        `wgmma` finds its operands in *swizzle atoms*: 8 rows of `swizzle_bytes`
        (128, 64 or 32) bytes, one after the other, in which the 16-byte chunk c
        of a row is stored at c XOR (the row's bits of the byte address above
        128). A wider tile is cut into column panels one atom wide; each panel
        holds all rows of its columns, the next panel follows it. The hardware
        applies the XOR itself, from the address, so a tile must start on a
        multiple of 8 x `swizzle_bytes` bytes.
        """
        shape = tuple(int(s) for s in shape)
        rows, cols = _product(shape[:-1]), shape[-1]
        width = swizzle_bytes * 8 // dtype_bits  # elements of a row of one panel
        per_chunk = 128 // dtype_bits
        key_mask = swizzle_bytes // 16 - 1
        row_shift = {128: 0, 64: 1, 32: 2}[swizzle_bytes]  # rows per 128 bytes, as a shift
        if cols % width or rows % 8:
            raise ValueError(f"a {rows}x{cols} tile does not split into {swizzle_bytes}-byte "
                             "swizzle atoms")

        def row_start(row, col):
            """Where the row of `col`'s panel starts: panel by panel, rows of `width`."""
            return fdiv(col, width) * (rows * width) + row * width

        def linear(row, col):
            """Offset before the swizzle."""
            return row_start(row, col) + fmod(col, width)

        def offset2(row, col):
            """`linear`, the row's chunk moved by the XOR. (Written as the row's start plus
            the moved chunk, not `linear + moved - chunk`: TVM 0.27's FlattenBuffer divides
            by zero on `c * 8 - c % 8 * 8` when c < 8.)"""
            chunk = fmod(fdiv(col, per_chunk), width // per_chunk)
            key = fmod(fdiv(row, 1 << row_shift), key_mask + 1)
            return row_start(row, col) + xor(chunk, key) * per_chunk + fmod(col, per_chunk)

        def forward(*idx):
            row = 0
            for i, extent in zip(idx[:-1], shape[:-1]):
                row = row * extent + i
            return offset2(row, idx[-1])

        def place(row, col):
            """Where (row, col) lands, as an index of the same-shaped row-major tile."""
            off = offset2(row, col)
            return fdiv(off, cols), fmod(off, cols)

        layout = Layout(shape, forward, {"kind": "wgmma_panels", "shape": list(shape),
                                         "dtype_bits": dtype_bits,
                                         "swizzle_bytes": swizzle_bytes})
        layout.place = place
        layout.linear = linear
        return layout

    def table(self, at_once: bool = True):
        """Offsets of every element, as an array in index order."""
        return _over_all_indices(self.forward, self.shape, 1, at_once)[0]

    def bank(self, *indices, elem_bytes: int):
        """The shared-memory bank (of 32, four bytes each) holding an element."""
        return (self.offset(*indices) * elem_bytes // 4) % 32

    def to_json(self) -> dict:
        data = dict(self.recipe)
        if data.get("kind") == "custom" or "offsets" not in data:
            data["offsets"] = self.table().tolist()
        return data

    @staticmethod
    def from_json(data: dict) -> Layout:
        if data["kind"] == "row_major":
            return Layout.row_major(data["shape"])
        if data["kind"] == "swizzled":
            return Layout.swizzled(data["shape"], data["dtype_bits"])
        if data["kind"] == "wgmma_panels":
            return Layout.wgmma_panels(data["shape"], data["dtype_bits"], data["swizzle_bytes"])
        raise ValueError(f"unknown layout kind {data['kind']!r}")

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.recipe.items() if k != "kind")
        return f"Layout.{self.recipe.get('kind', 'custom')}({params})"


def _flatten_coordinates(shape, forward_fn):
    """index -> offset, for a function that returns coordinates of an output array."""
    import tvm
    from tvm import sym, tirx

    index = [tirx.Var(f"i{d}", "int32") for d in range(len(shape))]
    analyzer = sym.Analyzer()
    for var, extent in zip(index, shape):
        analyzer.bind(var, tvm.ir.Range(0, extent))
    extents = [int(analyzer.const_int_bound(tirx.const(c, "int32") if isinstance(c, int)
                                             else c).max_value) + 1
               for c in forward_fn(*index)]

    def forward(*idx):
        off = 0
        for coordinate, extent in zip(forward_fn(*idx), extents):
            off = off * extent + coordinate
        return off

    return forward


# ---------------------------------------------------------------- Fragment


@dataclass
class Fragment:
    """index (+ replica number) -> (thread, local register index).

    `forward(*index, rep)` returns `(thread, local)`. Every (index, rep) pair
    maps to a different (thread, local) pair: the threads x registers grid is
    filled exactly once, so the inverse exists.
    """

    shape: tuple
    threads: int
    replicate: int
    forward: object  # callable(*index, rep) -> (thread, local)
    local_size: int
    recipe: dict = field(default_factory=dict)
    # Padded fragments (more register slots than elements) give their inverse and a
    # validity test directly; all others get the inverse from TVM's IndexMap.
    inverse: object = None  # callable(thread, local) -> [*index, rep]
    valid: object = None  # callable(thread, local) -> condition, or None if always valid

    # -- queries

    def owners(self, *index) -> list[tuple[int, int]]:
        """(thread, local) of every copy of an element."""
        return [tuple(self.forward(*index, r)) for r in range(self.replicate)]

    def thread_of(self, *index) -> int:
        return self.forward(*index, 0)[0]

    def local_of(self, *index) -> int:
        return self.forward(*index, 0)[1]

    def elements_of(self, thread: int) -> list[tuple[tuple, int]]:
        """(index, local) of every element `thread` holds, ordered by local register."""
        held = []
        for idx in itertools.product(*(range(s) for s in self.shape)):
            for r in range(self.replicate):
                t, loc = self.forward(*idx, r)
                if t == thread:
                    held.append((idx, loc))
        return sorted(held, key=lambda e: e[1])

    def tables(self, at_once: bool = True):
        """Arrays thread[rep, *index] and local[rep, *index], for views and checks."""
        thread, local = _over_all_indices(lambda rep, *idx: self.forward(*idx, rep),
                                          (self.replicate, *self.shape), 2, at_once)
        return thread.astype(np.int32), local.astype(np.int32)

    def same_as(self, other: Fragment) -> bool:
        """Equal placement of every element (compared element by element)."""
        if self.shape != other.shape or self.replicate != other.replicate:
            return False
        a, b = self.tables(), other.tables()
        return bool((a[0] == b[0]).all() and (a[1] == b[1]).all())

    def check(self) -> None:
        """Raise if two elements share a (thread, register) slot or a slot is out of range."""
        seen = set()
        for idx in itertools.product(*(range(s) for s in self.shape)):
            for r in range(self.replicate):
                t, loc = self.forward(*idx, r)
                if not (0 <= t < self.threads and 0 <= loc < self.local_size):
                    raise ValueError(f"{self}: element {idx} copy {r} maps to thread {t}, "
                                     f"register {loc}, outside {self.threads}x{self.local_size}")
                if (t, loc) in seen:
                    raise ValueError(f"{self}: two elements share thread {t} register {loc}")
                seen.add((t, loc))

    # -- code generation

    def index_of(self, thread, local):
        """TIR expressions (index..., rep) of the element in `local` of `thread`."""
        from tvm import tirx

        if self.inverse is not None:
            return list(self.inverse(thread, local))
        idx_vars = [tirx.Var(f"i{d}", "int32") for d in range(len(self.shape))]
        if self.replicate == 1:  # no replica axis: an extent-1 input would not be bijective
            fwd = self.forward(*idx_vars, 0)
            index_map = tirx.IndexMap(idx_vars, list(fwd), None)
            inverse = index_map.inverse(list(self.shape))
            return list(inverse.map_indices([thread, local])) + [0]
        rep = tirx.Var("rep", "int32")
        fwd = self.forward(*idx_vars, rep)
        index_map = tirx.IndexMap(idx_vars + [rep], list(fwd), None)
        inverse = index_map.inverse(list(self.shape) + [self.replicate])
        return list(inverse.map_indices([thread, local]))

    # -- composition

    def repeat(self, reps, on_thread: bool = False) -> Fragment:
        """Stack `reps[d]` copies along each dimension - as registers, or as threads."""
        reps = tuple(int(r) for r in reps)
        base = self
        tile_count = _product(reps)

        def forward(*args):
            *idx, rep = args
            tile, inner = 0, []
            for i, extent, r in zip(idx, base.shape, reps):
                if r > 1:
                    tile = tile * r + fdiv(i, extent)
                    inner.append(fmod(i, extent))
                else:
                    inner.append(i)
            t, loc = base.forward(*inner, rep)
            if on_thread:
                return t + tile * base.threads, loc
            return t, loc + tile * base.local_size

        shape = tuple(s * r for s, r in zip(self.shape, reps))
        return Fragment(shape, self.threads * (tile_count if on_thread else 1), self.replicate,
                        forward, self.local_size * (1 if on_thread else tile_count),
                        {"kind": "repeat", "of": self.recipe, "reps": list(reps),
                         "on_thread": on_thread})

    def repeat_on_thread(self, reps) -> Fragment:
        return self.repeat(reps, on_thread=True)

    def replicate_on(self, copies: int) -> Fragment:
        """`copies` more threads hold each element (thread + k * threads)."""
        base = self

        def forward(*args):
            *idx, rep = args
            t, loc = base.forward(*idx, fmod(rep, base.replicate))
            return t + fdiv(rep, base.replicate) * base.threads, loc

        return Fragment(self.shape, self.threads * copies, self.replicate * copies, forward,
                        self.local_size, {"kind": "replicate", "of": self.recipe,
                                          "copies": copies})

    # -- user-defined fragments

    @staticmethod
    def custom(shape, forward_thread_fn, forward_index_fn, replicate: int = 1) -> Fragment:
        """`T.Fragment(shape, forward_thread_fn=..., forward_index_fn=..., replicate=1)`.

        `forward_thread_fn(*index)` (or `(*index, rep)` when replicated) gives the
        thread, `forward_index_fn(*index)` the register. Thread count and register
        count are read off the functions; `check()` rejects two elements in one slot.
        """
        import inspect

        shape = tuple(int(s) for s in shape)
        takes_rep = len(inspect.signature(forward_thread_fn).parameters) == len(shape) + 1

        def forward(*args):
            *idx, rep = args
            thread = forward_thread_fn(*idx, rep) if takes_rep else forward_thread_fn(*idx)
            return thread, forward_index_fn(*idx)

        threads, locals_ = 0, 0
        for idx in itertools.product(*(range(s) for s in shape)):
            for r in range(replicate):
                t, loc = forward(*idx, r)
                threads, locals_ = max(threads, t + 1), max(locals_, loc + 1)
        frag = Fragment(shape, threads, replicate, forward, locals_,
                        {"kind": "custom", "shape": list(shape)})
        frag.check()
        return frag

    # -- families

    @staticmethod
    def mma_c() -> Fragment:
        """One warp's 16x8 accumulator tile of mma.m16n8k16 (PTX ISA figure for C/D)."""
        def forward(i, j, rep):
            return fmod(i, 8) * 4 + fdiv(j, 2), fmod(j, 2) + 2 * fdiv(i, 8)

        return Fragment((16, 8), 32, 1, forward, 4, {"kind": "mma_c"})

    @staticmethod
    def mma_a() -> Fragment:
        """One warp's 16x16 A operand of mma.m16n8k16, row-major (a0..a7)."""
        def forward(i, k, rep):
            return fmod(i, 8) * 4 + fdiv(fmod(k, 8), 2), \
                fmod(k, 2) + 2 * fdiv(i, 8) + 4 * fdiv(k, 8)

        return Fragment((16, 16), 32, 1, forward, 8, {"kind": "mma_a"})

    @staticmethod
    def mma_b() -> Fragment:
        """One warp's 16x8 (KxN) B operand of mma.m16n8k16, column-major (b0..b3)."""
        def forward(k, j, rep):
            return j * 4 + fdiv(fmod(k, 8), 2), fmod(k, 2) + 2 * fdiv(k, 8)

        return Fragment((16, 8), 32, 1, forward, 4, {"kind": "mma_b"})

    @staticmethod
    def accumulator(m: int, n: int, warps_m: int, warps_n: int) -> Fragment:
        """A GEMM's MxN accumulator: warps in a warps_m x warps_n grid, 16x8 tiles each."""
        wm, wn = m // warps_m, n // warps_n
        frag = Fragment.mma_c().repeat((wm // 16, wn // 8)).repeat_on_thread((warps_m, warps_n))
        frag.recipe = {"kind": "accumulator", "m": m, "n": n, "warps": [warps_m, warps_n]}
        return frag

    @staticmethod
    def operand_a(m: int, k: int, warps_m: int, warps_n: int) -> Fragment:
        """A GEMM's A operand held in registers (MxK); warps along N hold copies."""
        frag = Fragment.mma_a().repeat((m // warps_m // 16, k // 16))
        frag = frag.repeat_on_thread((warps_m, 1))
        if warps_n > 1:
            frag = _interleave_warps(frag, warps_m, warps_n)
        frag.recipe = {"kind": "operand_a", "m": m, "k": k, "warps": [warps_m, warps_n]}
        return frag

    @staticmethod
    def wgmma_accumulator(m: int, n: int, groups_m: int, groups_n: int) -> Fragment:
        """A GEMM's MxN accumulator under warpgroup MMA (`wgmma`, Hopper).

        Warpgroups (128 threads each) form a groups_m x groups_n grid over the
        tile. One `wgmma.m64nNk16` leaves a 64xN result in its warpgroup: warp w
        keeps rows 16w..16w+15, each in the 16x8 pattern of `mma_c`, one such
        tile per 8 columns. A warpgroup whose share is taller than 64 rows
        issues one instruction per 64 rows, each into its own registers.
        """
        gm, gn = m // groups_m, n // groups_n
        frag = Fragment.mma_c().repeat((1, gn // 8)).repeat_on_thread((4, 1))
        frag = frag.repeat((gm // 64, 1)).repeat_on_thread((groups_m, groups_n))
        frag.recipe = {"kind": "wgmma_accumulator", "m": m, "n": n,
                       "groups": [groups_m, groups_n]}
        return frag

    @staticmethod
    def wgmma_operand_a(m: int, k: int, groups_m: int, groups_n: int) -> Fragment:
        """A warpgroup MMA's A operand in registers (MxK): per warp the `mma_a` pattern,
        rows as in `wgmma_accumulator`; the warpgroups along N hold copies."""
        frag = Fragment.mma_a().repeat((1, k // 16)).repeat_on_thread((4, 1))
        frag = frag.repeat((m // groups_m // 64, 1)).repeat_on_thread((groups_m, 1))
        if groups_n > 1:
            frag = _interleave_warps(frag, groups_m, groups_n, warps_per_copy=4)
        frag.recipe = {"kind": "wgmma_operand_a", "m": m, "k": k,
                       "groups": [groups_m, groups_n]}
        return frag

    @staticmethod
    def wgmma_rows(m: int, groups_m: int, groups_n: int) -> Fragment:
        """Rows of a `wgmma_accumulator`: row i on the four lanes of the warp that holds it,
        in every warpgroup along N."""
        gm = m // groups_m
        pieces = gm // 64  # 64-row instructions per warpgroup

        def forward(i, rep):
            # only the terms that vary: TVM inverts the map, and it cannot undo `i % 64`
            # of an `i` already below 64
            within = fmod(i, gm) if groups_m > 1 else i
            row = fmod(within, 64) if pieces > 1 else within
            group = (fdiv(i, gm) * groups_n if groups_m > 1 else 0) + \
                (fdiv(rep, 4) if groups_n > 1 else 0)
            warp = group * 4 + fdiv(row, 16)
            return warp * 32 + fmod(row, 8) * 4 + fmod(rep, 4), \
                (fdiv(within, 64) * 2 if pieces > 1 else 0) + fdiv(fmod(row, 16), 8)

        return Fragment((m,), groups_m * groups_n * 128, 4 * groups_n, forward, gm // 32,
                        {"kind": "wgmma_rows", "m": m, "groups": [groups_m, groups_n]})

    @staticmethod
    def block_cyclic(shape, threads: int, vector: int) -> Fragment:
        """Elements in row-major order dealt to threads `vector` at a time, round-robin.

        When the elements do not fill the last round, the fragment is *padded*:
        some threads have register slots with no element behind them, and the
        generated code tests `valid` before touching those.
        """
        shape = tuple(int(s) for s in shape)
        total = _product(shape)
        rounds = -(-total // (threads * vector))
        padded = total % (threads * vector) != 0

        def inverse(thread, local):
            flat = fdiv(local, vector) * threads * vector + thread * vector + fmod(local, vector)
            index, rest = [], flat
            for extent in reversed(shape[1:]):
                index.append(fmod(rest, extent))
                rest = fdiv(rest, extent)
            return [rest, *reversed(index), 0]

        def valid(thread, local):
            flat = fdiv(local, vector) * threads * vector + thread * vector + fmod(local, vector)
            return flat < total

        def forward(*args):
            *idx, rep = args
            flat = 0
            for i, extent in zip(idx, shape):
                flat = flat * extent + i
            return fmod(fdiv(flat, vector), threads), \
                fdiv(flat, threads * vector) * vector + fmod(flat, vector)

        return Fragment(shape, threads, 1, forward, rounds * vector,
                        {"kind": "block_cyclic", "shape": list(shape), "threads": threads,
                         "vector": vector}, inverse=inverse if padded else None,
                        valid=valid if padded else None)

    @staticmethod
    def row_spread(shape, threads: int, vector: int) -> Fragment:
        """Rows (all but the last dimension, flattened) go round-robin to groups of threads;
        within its group a row is dealt out `vector` elements at a time.

        With one row this is `block_cyclic`. With several, each row lives on one
        group of `threads // groups` threads, so reducing a row needs only the
        shuffles inside that group. Slots past the end of a row (or past the last
        row) are padding, tested by `valid`.
        """
        shape = tuple(int(s) for s in shape)
        rows, cols = _product(shape[:-1]), shape[-1]
        groups = 1
        while groups * 2 <= rows and threads % (groups * 2) == 0 and \
                (threads // (groups * 2)) * vector >= min(cols, 2 * vector):
            groups *= 2
        per_group = threads // groups
        per_row = -(-cols // (per_group * vector)) * vector  # register slots per row
        row_rounds = -(-rows // groups)
        padded = rows % groups != 0 or cols % (per_group * vector) != 0

        def forward(*args):
            *idx, rep = args
            row = 0
            for i, extent in zip(idx[:-1], shape[:-1]):
                row = row * extent + i
            j = idx[-1]
            thread = fmod(row, groups) * per_group + fmod(fdiv(j, vector), per_group)
            local = fdiv(row, groups) * per_row + fdiv(j, per_group * vector) * vector + \
                fmod(j, vector)
            return thread, local

        def row_col(thread, local):
            row = fdiv(local, per_row) * groups + fdiv(thread, per_group)
            within = fmod(local, per_row)
            col = fdiv(within, vector) * per_group * vector + fmod(thread, per_group) * vector \
                + fmod(within, vector)
            return row, col

        def inverse(thread, local):
            row, col = row_col(thread, local)
            index = []
            for extent in reversed(shape[:-1][1:]):
                index.append(fmod(row, extent))
                row = fdiv(row, extent)
            lead = [row, *reversed(index)] if len(shape) > 1 else []
            return [*lead, col, 0]

        def valid(thread, local):
            row, col = row_col(thread, local)
            conds = [c for c in ((row < rows) if rows % groups else None,
                                 (col < cols) if cols % (per_group * vector) else None)
                     if c is not None]
            if not conds:
                return True
            return conds[0] if len(conds) == 1 else _and(*conds)

        return Fragment(shape, threads, 1, forward, row_rounds * per_row,
                        {"kind": "row_spread", "shape": list(shape), "threads": threads,
                         "vector": vector, "groups": groups}, inverse=inverse if padded else None,
                        valid=valid if padded else None)

    @staticmethod
    def replicated(shape, threads: int) -> Fragment:
        """Every thread holds every element (small per-row statistics)."""
        shape = tuple(int(s) for s in shape)

        def forward(*args):
            *idx, rep = args
            flat = 0
            for i, extent in zip(idx, shape):
                flat = flat * extent + i
            return rep, flat

        return Fragment(shape, threads, threads, forward, max(_product(shape), 1),
                        {"kind": "replicated", "shape": list(shape), "threads": threads})

    # -- reduction

    def reduce(self, dim: int) -> Fragment:
        """The layout of a reduction of this fragment along `dim`.

        Each result lives, replicated, on every thread that held a part of its
        row, so that a warp shuffle and (across warps) shared memory finish
        the reduction and leave the result where the next elementwise use is.
        """
        kind = self.recipe.get("kind")
        rank = len(self.shape)
        dim = dim + rank if dim < 0 else dim
        if kind == "accumulator" and dim == 1:
            return Fragment.accumulator_rows(self.recipe["m"], *self.recipe["warps"])
        if kind == "wgmma_accumulator" and dim == 1:
            return Fragment.wgmma_rows(self.recipe["m"], *self.recipe["groups"])
        if kind == "replicated":
            shape = self.shape[:dim] + self.shape[dim + 1:]
            return Fragment.replicated(shape or (1,), self.threads)
        if kind == "row_spread" and dim == 0 and rank == 2:
            # a column lives on the same lane of every group: one copy per group
            groups = self.recipe["groups"]
            per_group = self.threads // groups
            column = Fragment.row_spread((self.shape[1],), per_group, self.recipe["vector"])
            return column.replicate_on(groups) if groups > 1 else column
        if kind == "row_spread" and dim == rank - 1:
            out_shape = self.shape[:-1] or (1,)
            groups = self.recipe["groups"]
            if groups == 1:
                return Fragment.replicated(out_shape, self.threads)
            return Fragment.packed_rows(out_shape, self.threads, self.threads // groups)
        if kind == "block_cyclic" and dim == rank - 1:
            rows, cols = _product(self.shape[:-1]), self.shape[-1]
            threads, vector = self.recipe["threads"], self.recipe["vector"]
            out_shape = self.shape[:-1] or (1,)
            if cols % (threads * vector) == 0 or rows == 1:
                return Fragment.replicated(out_shape, threads)
            if (threads * vector) % cols == 0 and cols % vector == 0:
                return Fragment.packed_rows(out_shape, threads, cols // vector)
        return self._reduced_by_owners(dim)

    def viewed_as(self, shape) -> Fragment:
        """This fragment's registers named by the indices of `shape` (`T.reshape`): element
        `idx` of the view is the element with the same row-major position here."""
        shape, base = tuple(int(s) for s in shape), self
        if _product(shape) != _product(base.shape):
            raise ValueError(f"a view of shape {shape} does not hold {base}'s elements")

        def forward(*args):
            *idx, rep = args
            return base.forward(*_reindexed(idx, shape, base.shape), rep)

        def inverse(thread, local):
            *idx, rep = base.index_of(thread, local)
            return [*_reindexed(idx, base.shape, shape), rep]

        return Fragment(shape, base.threads, base.replicate, forward, base.local_size,
                        {"kind": "view", "of": base.recipe, "shape": list(shape)},
                        inverse=inverse, valid=base.valid)

    def shifted(self, offsets) -> Fragment:
        """Element `idx` placed where this fragment keeps element `(idx + offsets) mod shape`:
        the layout of a T.Parallel loop that reads this fragment at `f[i + c, j]`, so that
        each iteration runs on the thread that holds what it reads."""
        offsets, base = tuple(int(c) for c in offsets), self

        def forward(*args):
            *idx, rep = args
            return base.forward(*(fmod(i + c, e) if c else i
                                  for i, c, e in zip(idx, offsets, base.shape)), rep)

        def inverse(thread, local):
            *idx, rep = base.index_of(thread, local)
            return [*(fmod(i - c + e, e) if c else i
                      for i, c, e in zip(idx, offsets, base.shape)), rep]

        return Fragment(base.shape, base.threads, base.replicate, forward, base.local_size,
                        {"kind": "shifted", "of": base.recipe, "offsets": list(offsets)},
                        inverse=inverse, valid=base.valid)

    def _reduced_by_owners(self, dim: int) -> Fragment:
        """Any layout reduced along `dim`: result element e lives on every thread that holds
        a part of its row, in the register where that thread keeps the first such part,
        so the result names the same (sparse) registers as this fragment. Found from the
        tables: the positions K along `dim` whose owners are the row's threads, each
        once, the same K for every row, in a regular pattern (k0 + a * s1 + b * s2)."""
        shape, extent, copies = self.shape, self.shape[dim], self.replicate
        thread = np.moveaxis(self.tables()[0], dim + 1, -1)  # [rep, *row, k]
        rows = thread.shape[1:-1]
        first = thread[(slice(None),) + (0,) * len(rows)]  # [rep, k] of row 0
        chosen, seen = [], set()
        for k in range(extent):
            owners = set(first[:, k].tolist())
            if not owners & seen:
                chosen.append(k)
                seen |= owners
        steps = _progression(chosen)
        if steps is None:
            raise NotImplementedError(f"cannot reduce {self} along dimension {dim}")
        for row in itertools.product(*(range(r) for r in rows)):
            parts = thread[(slice(None), *row)]
            picked = parts[:, chosen].ravel().tolist()
            if len(set(picked)) != len(picked) or set(picked) != set(parts.ravel().tolist()):
                raise NotImplementedError(f"cannot reduce {self} along dimension {dim}")
        k0, s1, n1, s2, n2 = steps
        base = self

        def position(rep):
            part = fdiv(rep, copies)
            return k0 + fmod(part, n1) * s1 + fdiv(part, n1) * s2, fmod(rep, copies)

        def forward(*args):
            *row, rep = args
            k, copy = position(rep)
            return base.forward(*row[:dim], k, *row[dim:], copy)

        def offsets(thread, local):
            *idx, copy = base.index_of(thread, local)
            d = idx[dim] - k0
            return idx, copy, fdiv(d, s2) if n2 > 1 else 0, fmod(d, s2) if n2 > 1 else d

        def inverse(thread, local):
            idx, copy, b, rest = offsets(thread, local)
            return [*idx[:dim], *idx[dim + 1:], (b * n1 + fdiv(rest, s1)) * copies + copy]

        def valid(thread, local):  # (thread: a TIR expression)
            from tvm import tirx

            idx, _, b, rest = offsets(thread, local)
            ok = tirx.all(rest >= 0, tirx.EQ(fmod(rest, s1), 0), fdiv(rest, s1) < n1,
                          *([b < n2] if n2 > 1 else []))
            return ok if base.valid is None else tirx.And(base.valid(thread, local), ok)

        kept = shape[:dim] + shape[dim + 1:]
        return Fragment(kept or (1,), self.threads, copies * len(chosen),
                        forward if kept else lambda _, rep: forward(rep), self.local_size,
                        {"kind": "reduced", "of": self.recipe, "dim": dim}, inverse=inverse
                        if kept else lambda t, loc: [0, *inverse(t, loc)], valid=valid)

    @staticmethod
    def accumulator_rows(m: int, warps_m: int, warps_n: int) -> Fragment:
        """Rows of an accumulator: row i on the four lanes (and warps along N) that hold it."""
        wm = m // warps_m

        def forward(i, rep):
            warp = fdiv(i, wm) * warps_n + fdiv(rep, 4)
            ii = fmod(i, wm)
            return warp * 32 + fmod(ii, 8) * 4 + fmod(rep, 4), fdiv(ii, 16) * 2 + fdiv(
                fmod(ii, 16), 8)

        return Fragment((m,), warps_m * warps_n * 32, 4 * warps_n, forward, wm // 8,
                        {"kind": "accumulator_rows", "m": m, "warps": [warps_m, warps_n]})

    @staticmethod
    def packed_rows(shape, threads: int, per_row: int) -> Fragment:
        """Row i on the `per_row` consecutive threads that share it (rows packed round-robin).
        When the rows do not fill the last round (40 rows on 32 thread groups), the
        fragment is padded, as `block_cyclic`'s."""
        shape = tuple(int(s) for s in shape)
        rows = _product(shape)
        rows_per_round = threads // per_row
        padded = rows % rows_per_round != 0

        def forward(*args):
            *idx, rep = args
            flat = 0
            for i, extent in zip(idx, shape):
                flat = flat * extent + i
            return fmod(flat, rows_per_round) * per_row + rep, fdiv(flat, rows_per_round)

        def inverse(thread, local):
            rest, index = local * rows_per_round + fdiv(thread, per_row), []
            for extent in reversed(shape[1:]):
                index.append(fmod(rest, extent))
                rest = fdiv(rest, extent)
            return [rest, *reversed(index), fmod(thread, per_row)]

        def valid(thread, local):
            return local * rows_per_round + fdiv(thread, per_row) < rows

        return Fragment(shape, threads, per_row, forward, math.ceil(rows / rows_per_round),
                        {"kind": "packed_rows", "shape": list(shape), "threads": threads,
                         "per_row": per_row}, inverse=inverse if padded else None,
                        valid=valid if padded else None)

    # -- printing and JSON

    def to_json(self, with_tables: bool = True) -> dict:
        data = {"kind": "fragment", "recipe": self.recipe, "shape": list(self.shape),
                "threads": self.threads, "replicate": self.replicate,
                "local_size": self.local_size}
        if with_tables:
            thread, local = self.tables()
            data["thread"] = thread.tolist()
            data["local"] = local.tolist()
        return data

    @staticmethod
    def from_json(data: dict) -> Fragment:
        return _from_recipe(data["recipe"])

    def __repr__(self) -> str:
        return (f"Fragment({_describe(self.recipe)}: shape {list(self.shape)}, {self.threads} "
                f"threads x {self.local_size} registers, replicate {self.replicate})")


def kept_alike(by_thread: dict, threads: int) -> bool:
    """Is an element (its owners, thread -> register) in the same register of every thread?"""
    return len(by_thread) == threads and len(set(by_thread.values())) == 1


def kept_whole_alike(frag: Fragment) -> bool:
    """Does every thread keep every element of `frag`, each in the same register? Then a
    thread may read any element, at an index computed at run time."""
    owners = owner_table(frag)
    return len(owners) == _product(frag.shape) and all(
        kept_alike(by_thread, frag.threads) for by_thread in owners.values())


def _interleave_warps(frag: Fragment, warps_m: int, warps_n: int,
                      warps_per_copy: int = 1) -> Fragment:
    """Give each of the warps_n warps (or warpgroups of `warps_per_copy` warps) of a row a
    copy: the copy `rep` of group g lives in group g * warps_n + rep."""
    base = frag
    size = 32 * warps_per_copy

    def forward(*args):
        *idx, rep = args
        t, loc = base.forward(*idx, 0)
        group, inside = fdiv(t, size), fmod(t, size)
        return (group * warps_n + rep) * size + inside, loc

    return Fragment(frag.shape, frag.threads * warps_n, warps_n, forward, frag.local_size,
                    dict(frag.recipe))


def _describe(recipe: dict) -> str:
    kind = recipe.get("kind", "custom")
    params = ", ".join(f"{k}={v if not isinstance(v, dict) else _describe(v)}"
                       for k, v in recipe.items() if k != "kind")
    return f"{kind}({params})"


def _from_recipe(recipe: dict) -> Fragment:
    kind = recipe["kind"]
    simple = {"mma_c": Fragment.mma_c, "mma_a": Fragment.mma_a, "mma_b": Fragment.mma_b}
    if kind in simple:
        return simple[kind]()
    if kind == "accumulator":
        return Fragment.accumulator(recipe["m"], recipe["n"], *recipe["warps"])
    if kind == "operand_a":
        return Fragment.operand_a(recipe["m"], recipe["k"], *recipe["warps"])
    if kind == "wgmma_accumulator":
        return Fragment.wgmma_accumulator(recipe["m"], recipe["n"], *recipe["groups"])
    if kind == "wgmma_operand_a":
        return Fragment.wgmma_operand_a(recipe["m"], recipe["k"], *recipe["groups"])
    if kind == "wgmma_rows":
        return Fragment.wgmma_rows(recipe["m"], *recipe["groups"])
    if kind == "accumulator_rows":
        return Fragment.accumulator_rows(recipe["m"], *recipe["warps"])
    if kind == "block_cyclic":
        return Fragment.block_cyclic(recipe["shape"], recipe["threads"], recipe["vector"])
    if kind == "row_spread":
        return Fragment.row_spread(recipe["shape"], recipe["threads"], recipe["vector"])
    if kind == "replicated":
        return Fragment.replicated(recipe["shape"], recipe["threads"])
    if kind == "packed_rows":
        return Fragment.packed_rows(recipe["shape"], recipe["threads"], recipe["per_row"])
    if kind == "repeat":
        return _from_recipe(recipe["of"]).repeat(recipe["reps"], recipe["on_thread"])
    if kind == "replicate":
        return _from_recipe(recipe["of"]).replicate_on(recipe["copies"])
    if kind == "view":
        return _from_recipe(recipe["of"]).viewed_as(recipe["shape"])
    if kind == "reduced":
        return _from_recipe(recipe["of"])._reduced_by_owners(recipe["dim"])
    raise ValueError(f"unknown fragment kind {kind!r}")


def reshaped(frag: Fragment, shape: tuple) -> Fragment:
    """`frag` for a buffer of `shape`: a replicated layout takes the unit dimensions along."""
    if tuple(frag.shape) == tuple(shape):
        return frag
    squeezed = tuple(s for s in shape if s != 1) or (1,)
    if (tuple(s for s in frag.shape if s != 1) or (1,)) == squeezed and \
            frag.recipe.get("kind") == "replicated":
        return Fragment.replicated(shape, frag.threads)
    return frag


# ---------------------------------------------------------------- who holds what

_TABLE_CACHE: dict = {}
_KEEP_ALIVE: list = []


def _key(kind: str, frag: Fragment):
    """Fragments from a recipe are rebuilt identically; a custom one is only itself."""
    if "'custom'" in repr(frag.recipe):  # (or a view of one)
        return (kind, "custom", id(frag.forward))
    return (kind, repr(frag.recipe), frag.shape)


def thread_elements(frag: Fragment) -> list[list[tuple]]:
    """For each thread, the index held in each of its local registers."""
    key = _key("elements", frag)
    if key not in _TABLE_CACHE:
        table = [[None] * frag.local_size for _ in range(frag.threads)]
        thread, local = frag.tables()
        indices = list(itertools.product(*(range(s) for s in frag.shape)))  # C order
        for r in range(frag.replicate):
            for idx, t, loc in zip(indices, thread[r].ravel().tolist(),
                                   local[r].ravel().tolist()):
                table[t][loc] = idx
        _TABLE_CACHE[key] = table
        _KEEP_ALIVE.append(frag.forward)  # so that id() keys stay unique
    return _TABLE_CACHE[key]


def holds_matrix_rows(frag: Fragment) -> bool:
    """Does each warp hold the fragment as 8x8 matrices in the accumulator pattern of
    `mma`/`wgmma` - every register pair 2p, 2p+1 of lane t the elements (row0 + t/4,
    col0 + 2(t%4)) and the next column, col0 a multiple of 8? Then `stmatrix` (and
    `ldmatrix`) move it: each lane gives one matrix row's 16 bytes."""
    def pair_is_matrix_rows(lanes, p) -> bool:
        first = lanes[0][2 * p]
        if first is None or first[-1] % 8:
            return False
        for t, registers in enumerate(lanes):
            row = first[:-2] + (first[-2] + t // 4,)
            col = first[-1] + 2 * (t % 4)
            if registers[2 * p] != row + (col,) or registers[2 * p + 1] != row + (col + 1,):
                return False
        return True

    key = _key("matrix_rows", frag)
    if key not in _TABLE_CACHE:
        elements = thread_elements(frag)
        _TABLE_CACHE[key] = frag.replicate == 1 and frag.threads % 32 == 0 and \
            frag.local_size % 2 == 0 and len(frag.shape) >= 2 and \
            all(pair_is_matrix_rows(elements[32 * warp:32 * warp + 32], p)
                for warp in range(frag.threads // 32) for p in range(frag.local_size // 2))
        _KEEP_ALIVE.append(frag.forward)
    return _TABLE_CACHE[key]


def owner_table(frag: Fragment) -> dict:
    """element index -> {thread: local register} over all copies."""
    key = _key("owners", frag)
    if key not in _TABLE_CACHE:
        owners: dict = {}
        for t, elements in enumerate(thread_elements(frag)):
            for loc, idx in enumerate(elements):
                if idx is not None:
                    owners.setdefault(idx, {})[t] = loc
        _TABLE_CACHE[key] = owners
    return _TABLE_CACHE[key]

