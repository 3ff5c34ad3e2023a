"""Random, well-formed tile programs, each with a reference computed by torch.

A generated program is a small recipe (`Program`): sizes, a list of tensors,
a list of on-chip buffers and a list of steps. Every step is a plain dict
such as `{"op": "load", "dst": "s0", "src": "X0", "shift": [0, 3]}`, and each
kind of step knows two things, kept side by side in this file:

* how to **write** itself as kernel source (`_emit_<op>`), so that a
  program is real Python text in the factory style that a person can read
  and that goes through the public API (`tilelab.compile`);
* what it **means**, evaluated block by block with torch in float64
  (`_run_<op>`). This independent reading of the program checks the CPU
  backend, which in turn is the reference for the CUDA backend.

Programs are reproducible: program `index` of seed `seed` comes from a
`random.Random` seeded with both, so it is the same on every machine. The
family "hopper" numbers programs of its own: GEMMs shaped for sm_90a's
warpgroup MMA fed by TMA, which the general mix almost never reaches; so does the
family "roles": the same GEMMs written with warp roles by hand (`T.ws`, mbarriers,
`T.tma_copy` or the producer's threads' `T.copy` into slotted tiles), a producer
warpgroup and one or two consumers (or two consumer roles, both taking every slot), the
roles inside the K loop or, half of them, each role running the whole loop (as
TileLang's warp-specialized kernels are written; the CPU runs them by turns); and
the family "attention": FlashAttention's forward loop, whose two T.gemm with a softmax
between them are what the warp-specialized split's turns and register moves serve; and
the family "threads": code written for one thread (`T.get_thread_binding`), each thread
writing shared elements by its index from what other threads wrote, some threads idle
under an `if` on the index, beside the general mix's tile steps.
Validity is the generator's job: a buffer is read only after a step wrote
all of it, a `T.Parallel` loop reads a fragment only at the iteration's own
element (or a row/column vector of it), and transposed reads come from
shared memory, as the tile language asks. The shrinker (in `difftest`)
edits recipes and keeps only those that `validate` accepts.
"""

from __future__ import annotations

import copy as _copy
import json
import math
import random
from dataclasses import asdict, dataclass, field
from typing import ClassVar

FLOATS = ("float32", "float16", "bfloat16")
DTYPES = FLOATS + ("int32",)
REDUCE_KINDS = ("sum", "max", "min", "abssum", "absmax")
POLICIES = ("Square", "FullRow", "FullCol")

# Largest accepted |CUDA - CPU| (and |CPU - torch|), as a fraction of 1 + max|expected|,
# by the least precise type a program computes in. Integers must agree exactly.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2, "int32": 0.0}
# Flags per block row of a mask input: a masked loop runs `for k in T.serial(MASK)` and
# its body where the block's flag k is positive (TileLang's block-sparse pattern).
MASK = 4


@dataclass
class Program:
    """A generated tile program: sizes, tensors, on-chip buffers and steps."""

    seed: int
    index: int
    M: int
    N: int
    K: int
    bm: int
    bn: int
    bk: int
    threads: int
    tensors: list = field(default_factory=list)  # {"name", "kind", "dtype", "output"}
    buffers: list = field(default_factory=list)  # {"name", "scope", "kind", "dtype"}
    steps: list = field(default_factory=list)
    family: str = ""  # "" (every kind of program), or one of FAMILIES[1:] (see `generate`)
    slots: int = 1  # the leading dimension of slotted tiles (buffer kinds "s...")
    # [blocks, group]: a persistent kernel of `blocks` blocks walking the grid's tiles
    # (T.Persistent, groups of `group` columns); empty: one block per tile
    walk: list = field(default_factory=list)
    # set by `reference`: per output, each element's size (below); the comparison's
    # tolerance scales with it. Not part of the program.
    output_sizes: ClassVar[dict] = {}

    # -- identity and (de)serialization

    @property
    def name(self) -> str:
        return f"difftest_{self.family + '_' if self.family else ''}{self.seed}_{self.index}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Program:
        return Program(**json.loads(text))

    def clone(self) -> Program:
        return _copy.deepcopy(self)

    # -- shapes

    @property
    def grid(self) -> tuple[int, int]:
        """(blocks along N, blocks along M): bx walks columns, by walks rows. Attention
        walks all N keys in every block: one block along N."""
        if self.family == "attention":
            return 1, -(-self.M // self.bm)
        return -(-self.N // self.bn), -(-self.M // self.bm)

    def tensor(self, name: str) -> dict:
        return next(t for t in self.tensors if t["name"] == name)

    def buffer(self, name: str) -> dict:
        return next(b for b in self.buffers if b["name"] == name)

    def tensor_shape(self, kind: str) -> tuple:
        gx, gy = self.grid
        M, N, K = self.M, self.N, self.K  # noqa: N806
        return {"mn": (M, N), "nm": (N, M), "vm": (M,), "vn": (N,), "a": (M, K),
                "at": (K, M), "b": (K, N), "bt": (N, K), "om": (gx, M), "on": (gy, N),
                "hist": (8,), "mask": (gy * MASK,)}[kind]

    def buffer_shape(self, kind: str) -> tuple:
        bm, bn, bk = self.bm, self.bn, self.bk
        if kind.startswith("s") and len(kind) == 3:  # "smk": `slots` tiles of kind "mk"
            return (self.slots, *self.buffer_shape(kind[1:]))
        return {"mn": (bm, bn), "nm": (bn, bm), "m": (bm,), "n": (bn,), "mk": (bm, bk),
                "km": (bk, bm), "kn": (bk, bn), "nk": (bn, bk), "local": (1,),
                "mask": (MASK,)}[kind]

    def dtypes(self) -> set[str]:
        """Every type the program stores or computes in."""
        return {t["dtype"] for t in self.tensors} | {b["dtype"] for b in self.buffers}

    def tolerance(self) -> float:
        return max(TOLERANCE[d] for d in self.dtypes())

    # -- source text

    def source(self) -> str:
        """The program as a Python module whose `make()` returns the `@T.prim_func`."""
        gx, gy = self.grid
        params = ", ".join(f"{t['name']}: T.Tensor({self.tensor_shape(t['kind'])}, "
                           f"T.{t['dtype']})" for t in self.tensors)
        used = _used_buffers(self)
        lines = [
            f'"""difftest program {self.index} of seed {self.seed} '
            '(tilelab.testing.generator)."""',
            "",
            "import tilelab.language as T",
            "",
            f"SPEC = {self.to_json()!r}",
            "",
            "",
            "def make():",
            "    @T.prim_func",
            f"    def {self.name}({params}):",
            f"        with T.Kernel({gx}, {gy}, threads={self.threads}) as (bx, by):"
            if not self.walk else
            f"        with T.Kernel({self.walk[0]}, threads={self.threads}) as block:",
        ]
        body = []
        for b in self.buffers:
            if b["name"] not in used:
                continue
            alloc = {"shared": "alloc_shared", "fragment": "alloc_fragment",
                     "local": "alloc_local"}[b["scope"]]
            body.append(f"{b['name']} = T.{alloc}({self.buffer_shape(b['kind'])}, "
                        f"T.{b['dtype']})")
        steps = [line for step in self.steps for line in _EMIT[step["op"]](self, step)]
        if self.walk:  # the same steps, once per tile of the walk
            body.append(f"for by, bx in T.Persistent([{gy}, {gx}], {self.walk[0]}, block, "
                        f"{self.walk[1]}):")
            steps = ["    " + line for line in steps or ["pass"]]
        body.extend(steps)
        if not body:
            body = ["pass"]
        lines.extend("            " + line for line in body)
        lines += [f"    return {self.name}", ""]
        return "\n".join(lines)

    # -- the torch reading

    def reference(self, inputs: dict) -> dict:
        """Every output tensor, computed from `inputs` (name -> torch tensor) in float64.

        Beside each value the reading keeps its *size*: the largest magnitude any value
        it was computed from had (a sum's size adds up its terms' sizes). A backend that
        rounds after each operation errs in proportion to the size, not to the value: in
        `(-s) + (s - f)` with `s` in the hundreds the result is small, its error is not.
        `output_sizes` holds them for the comparison."""
        import torch

        full = {t["name"]: inputs[t["name"]].double().clone() for t in self.tensors}
        sizes = {name: value.abs() for name, value in full.items()}
        gx, gy = self.grid
        for by in range(gy):
            for bx in range(gx):
                block = _Block(self, full, sizes, bx, by, torch)
                for step in self.steps:
                    _RUN[step["op"]](block, step)
        outputs = [t["name"] for t in self.tensors if t["output"]]
        self.output_sizes = {name: sizes[name] for name in outputs}
        return {name: full[name] for name in outputs}


def _used_buffers(p: Program) -> set[str]:
    names = set()
    for step in p.steps:
        for key in ("dst", "dst2", "src", "a", "b", "a_frag", "q_frag", "stage", "tmp",
                    "mask", "reg"):
            if isinstance(step.get(key), str):
                names.add(step[key])
        names.update(leaf[1] for leaf in _leaves(step.get("expr")) if leaf[0] == "ld")
        names.update(step.get("tiles", ()))
    return {n for n in names if any(b["name"] == n for b in p.buffers)}


def _leaves(expr):
    if expr is None:
        return
    if expr[0] in ("ld", "c", "ix"):
        yield expr
        return
    for part in expr[2:]:
        if isinstance(part, list):
            yield from _leaves(part)


# ---------------------------------------------------------------- block origins


def _origin(p: Program, kind: str, shift=(0, 0)) -> list[str]:
    """Start indices (source text) of a block's tile in a tensor of `kind`."""
    dr, dc = (list(shift) + [0, 0])[:2]

    def plus(base, d):
        return f"{base} + {d}" if d else base

    rows, cols = f"by * {p.bm}", f"bx * {p.bn}"
    return {"mn": [plus(rows, dr), plus(cols, dc)], "nm": [plus(cols, dr), plus(rows, dc)],
            "vm": [plus(rows, dr)], "vn": [plus(cols, dr)], "om": ["bx", rows],
            "on": ["by", cols], "mask": [f"by * {MASK}"]}[kind]


def _origin_values(p: Program, kind: str, bx: int, by: int, shift=(0, 0)) -> list[int]:
    dr, dc = (list(shift) + [0, 0])[:2]
    rows, cols = by * p.bm, bx * p.bn
    return {"mn": [rows + dr, cols + dc], "nm": [cols + dr, rows + dc], "vm": [rows + dr],
            "vn": [cols + dr], "om": [bx, rows], "on": [by, cols], "mask": [by * MASK]}[kind]


# ---------------------------------------------------------------- expressions


def _render(expr) -> str:
    kind = expr[0]
    if kind == "ld":
        access = {"ij": "[i, j]", "ji": "[j, i]", "i": "[i]", "j": "[j]"}[expr[2]]
        return expr[1] + access
    if kind == "c":
        return repr(expr[1])
    if kind == "ix":
        return expr[1]
    if kind == "bin":
        op, a, b = expr[1], _render(expr[2]), _render(expr[3])
        return f"T.{op}({a}, {b})" if op in ("max", "min") else f"({a} {op} {b})"
    if kind == "un":
        a = _render(expr[2])
        return {"abs": f"T.abs({a})", "neg": f"(-{a})",
                "exp": f"T.exp(T.min({a}, 2.0))"}[expr[1]]
    if kind == "sel":
        return (f"T.if_then_else({_render(expr[2])} {expr[1]} {_render(expr[3])}, "
                f"{_render(expr[4])}, {_render(expr[5])})")
    raise ValueError(kind)


def _evaluate(expr, block, shape):
    """The value of an expression over a whole (rows, cols) loop, as a float64 tensor, and
    its size (see `Program.reference`): the largest magnitude of every operand and partial
    result it was made of, element by element."""
    torch = block.torch
    kind = expr[0]
    rows, cols = (shape + (1,))[:2]
    if kind == "ld":
        value, size, access = block.local[expr[1]], block.size[expr[1]], expr[2]

        def shaped(t):
            if access == "ji":
                t = t.T
            elif access == "i":
                t = t[:, None] if len(shape) == 2 else t
            elif access == "j":
                t = t[None, :]
            return t.expand(*shape) if len(shape) == 2 else t

        return shaped(value), shaped(size)
    if kind == "c":
        value = torch.full(shape, float(expr[1]), dtype=torch.float64)
        return value, value.abs()
    if kind == "ix" and expr[1] == "k":  # the masked loop's counter
        value = torch.full(shape, float(block.k), dtype=torch.float64)
        return value, value.abs()
    if kind == "ix":
        index = torch.arange(rows if expr[1] == "i" else cols, dtype=torch.float64)
        if len(shape) == 2:
            index = index[:, None].expand(*shape) if expr[1] == "i" else \
                index[None, :].expand(*shape)
        return index, index
    if kind == "bin":
        (a, sa), (b, sb) = _evaluate(expr[2], block, shape), _evaluate(expr[3], block, shape)
        out = {"+": torch.add, "-": torch.sub, "*": torch.mul, "max": torch.maximum,
               "min": torch.minimum}[expr[1]](a, b)
        size = sa * sb if expr[1] == "*" else torch.maximum(sa, sb)
        return out, _larger(size, out)
    if kind == "un":
        a, sa = _evaluate(expr[2], block, shape)
        out = {"abs": torch.abs, "neg": torch.neg,
               "exp": lambda x: torch.exp(torch.clamp(x, max=2.0))}[expr[1]](a)
        return out, _larger(sa, out)
    if kind == "sel":
        (a, _), (b, _) = _evaluate(expr[2], block, shape), _evaluate(expr[3], block, shape)
        cond = {"<": torch.lt, ">": torch.gt, "==": torch.eq}[expr[1]](a, b)
        (x, sx), (y, sy) = _evaluate(expr[4], block, shape), _evaluate(expr[5], block, shape)
        return torch.where(cond, x, y), torch.where(cond, sx, sy)
    raise ValueError(kind)


def _larger(size, value):
    """The elementwise larger of a size and a value's magnitude (infinities and NaN count
    as size 0: an infinite result is compared as itself)."""
    import torch

    magnitude = torch.where(torch.isfinite(value), value.abs(), 0.0)
    return torch.maximum(torch.nan_to_num(size, nan=0.0, posinf=0.0), magnitude)


# ---------------------------------------------------------------- one block of the reference


class _Block:
    """The on-chip buffers of one block while the reference runs its steps."""

    def __init__(self, p: Program, full: dict, full_size: dict, bx: int, by: int, torch):
        self.p, self.full, self.full_size, self.bx, self.by = p, full, full_size, bx, by
        self.torch = torch
        self.local: dict = {}
        self.size: dict = {}  # each on-chip buffer's sizes (see Program.reference)
        self.k = 0  # the masked loop's counter, while one runs

    def rounded(self, value, dtype: str):
        """`value` stored in a buffer of `dtype` (rounded; integers wrap like int32)."""
        torch = self.torch
        if dtype == "int32":
            return value.to(torch.int64).to(torch.int32).to(torch.float64)
        return value.to(getattr(torch, dtype)).to(torch.float64)

    def window(self, name: str, starts, extents, sizes=False):
        """A zero-padded window of a tensor (or of its sizes): what `T.copy` reads past the
        edges."""
        tensor = (self.full_size if sizes else self.full)[name]
        out = self.torch.zeros(extents, dtype=self.torch.float64)
        index_out, index_in = [], []
        for s, e, size in zip(starts, extents, tensor.shape):
            stop = min(s + e, size)
            if stop <= s:
                return out
            index_out.append(slice(0, stop - s))
            index_in.append(slice(s, stop))
        out[tuple(index_out)] = tensor[tuple(index_in)]
        return out

    def write(self, name: str, starts, value, size, add=False):
        """Store `value` (of `size`) at `starts` in a tensor, dropping what falls past its
        edges; `add`: add to what is there (atomically, on the GPU)."""
        tensor, sizes = self.full[name], self.full_size[name]
        index_out, index_in = [], []
        for s, e, extent in zip(starts, value.shape, tensor.shape):
            stop = min(s + e, extent)
            if stop <= s:
                return
            index_out.append(slice(s, stop))
            index_in.append(slice(0, stop - s))
        at, part = tuple(index_out), tuple(index_in)
        dtype = self.p.tensor(name)["dtype"]
        new = self.rounded(tensor[at] + value[part] if add else value[part], dtype)
        sizes[at] = _larger(sizes[at] + size[part] if add else size[part], new)
        tensor[at] = new

    def set(self, name: str, value, size=None):
        """Store `value` in an on-chip buffer; its size is `size`, or its own magnitude."""
        self.local[name] = self.rounded(value, self.p.buffer(name)["dtype"])
        self.size[name] = _larger(self.local[name].abs() if size is None else size,
                                  self.local[name])


# ---------------------------------------------------------------- steps: source and meaning


def _emit_load(p, s):
    start = ", ".join(_origin(p, p.tensor(s["src"])["kind"], s.get("shift", (0, 0))))
    return [f"T.copy({s['src']}[{start}], {s['dst']})"]


def _run_load(b, s):
    kind = b.p.tensor(s["src"])["kind"]
    starts = _origin_values(b.p, kind, b.bx, b.by, s.get("shift", (0, 0)))
    shape = b.p.buffer_shape(b.p.buffer(s["dst"])["kind"])
    b.set(s["dst"], b.window(s["src"], starts, shape), b.window(s["src"], starts, shape, True))


def _emit_store(p, s):
    start = ", ".join(_origin(p, p.tensor(s["dst"])["kind"]))
    return [f"T.copy({s['src']}, {s['dst']}[{start}])"]


def _run_store(b, s):
    kind = b.p.tensor(s["dst"])["kind"]
    value, size = b.local[s["src"]], b.size[s["src"]]
    if kind in ("om", "on"):
        value, size = value[None, :], size[None, :]
    b.write(s["dst"], _origin_values(b.p, kind, b.bx, b.by), value, size)


def _emit_copy(p, s):
    return [f"T.copy({s['src']}, {s['dst']})"]


def _run_copy(b, s):
    b.set(s["dst"], b.local[s["src"]], b.size[s["src"]])


def _emit_subcopy(p, s):
    (r0, c0), (r1, c1), (h, w) = s["from"], s["to"], s["size"]
    return [f"T.copy({s['src']}[{r0}:{r0 + h}, {c0}:{c0 + w}], "
            f"{s['dst']}[{r1}:{r1 + h}, {c1}:{c1 + w}])"]


def _run_subcopy(b, s):
    (r0, c0), (r1, c1), (h, w) = s["from"], s["to"], s["size"]
    dst, size = b.local[s["dst"]].clone(), b.size[s["dst"]].clone()
    dst[r1:r1 + h, c1:c1 + w] = b.local[s["src"]][r0:r0 + h, c0:c0 + w]
    size[r1:r1 + h, c1:c1 + w] = b.size[s["src"]][r0:r0 + h, c0:c0 + w]
    b.set(s["dst"], dst, size)


def _emit_fill(p, s):
    return [f"T.clear({s['dst']})" if s["value"] == 0 else f"T.fill({s['dst']}, {s['value']!r})"]


def _run_fill(b, s):
    shape = b.p.buffer_shape(b.p.buffer(s["dst"])["kind"])
    b.set(s["dst"], b.torch.full(shape, float(s["value"]), dtype=b.torch.float64))


def _loop(p, kind):
    shape = p.buffer_shape(kind)
    names = "i, j" if len(shape) == 2 else "i"
    return f"for {names} in T.Parallel({', '.join(map(str, shape))}):"


def _emit_ew(p, s):
    """dst[i, j] = expr, in a T.Parallel loop; optionally through a per-thread scalar."""
    kind = p.buffer(s["dst"])["kind"]
    at = "[i, j]" if len(p.buffer_shape(kind)) == 2 else "[i]"
    value = _render(s["expr"])
    lines = []
    if s.get("flag"):  # block-uniform: an element of an input the kernel never writes
        lines.append(f"if {s['flag']}[by * {p.bm}, bx * {p.bn}] > 0:")
    elif s.get("guard"):
        lines.append(f"if bx % 2 == {s['guard'] - 1}:")
    elif s.get("mask"):  # block-uniform too: flags every thread keeps whole
        lines += [f"for k in T.serial({MASK}):", f"    if {s['mask']}[k] > 0:"]
    pad = "        " if s.get("mask") else "    " if s.get("guard") or s.get("flag") else ""
    lines.append(pad + _loop(p, kind))
    if s.get("tmp"):
        lines.append(f"{pad}    {s['tmp']}[0] = {value}")
        lines.append(f"{pad}    {s['dst']}{at} = {s['tmp']}[0] + 1")
    else:
        lines.append(f"{pad}    {s['dst']}{at} = {value}")
    return lines


def _run_ew(b, s):
    if s.get("mask"):
        for k in range(MASK):
            if b.local[s["mask"]][k] > 0:
                b.k = k
                _run_ew(b, {key: v for key, v in s.items() if key != "mask"})
        return
    if s.get("flag"):
        if not b.full[s["flag"]][b.by * b.p.bm, b.bx * b.p.bn] > 0:
            return
    elif s.get("guard") and b.bx % 2 != s["guard"] - 1:
        return
    dst = b.p.buffer(s["dst"])
    shape = b.p.buffer_shape(dst["kind"])
    value, size = _evaluate(s["expr"], b, shape)
    if s.get("tmp"):
        value = b.rounded(value, b.p.buffer(s["tmp"])["dtype"]) + 1
        size = size + 1
    b.set(s["dst"], value, size)


def _emit_reduce(p, s):
    return [f"T.reduce_{s['kind']}({s['src']}, {s['dst']}, dim={s['dim']}, "
            f"clear={s['clear']})"]


def _run_reduce(b, s):
    torch = b.torch
    x, sx = b.local[s["src"]], b.size[s["src"]]
    kind, dim = s["kind"], s["dim"]
    if kind.startswith("abs"):
        x = x.abs()
    if kind.endswith("sum"):
        value, size = x.sum(dim), sx.sum(dim)  # a sum's rounding follows its terms
    elif kind.endswith("max"):
        value, size = x.amax(dim), sx.amax(dim)
    else:
        value, size = x.amin(dim), sx.amax(dim)
    if not s["clear"]:
        old, old_size = b.local[s["dst"]], b.size[s["dst"]]
        value = old + value if kind.endswith("sum") else \
            (torch.maximum(old, value) if kind.endswith("max") else torch.minimum(old, value))
        size = old_size + size if kind.endswith("sum") else torch.maximum(old_size, size)
    b.set(s["dst"], value, size)


def _emit_fold(p, s):
    """dst[i] += expr (or T.max, T.min) in a T.Parallel loop over a tile: the loop folds
    one of the tile's dimensions into a vector, as a gemv's row sum does by hand."""
    at = "[i]" if s["dim"] == 1 else "[j]"
    mine, value = f"{s['dst']}{at}", _render(s["expr"])
    first, second = (value, mine) if s.get("swap") else (mine, value)
    folded = f"({first} + {second})" if s["kind"] == "sum" else \
        f"T.{s['kind']}({first}, {second})"
    return [_loop(p, s["over"]), f"    {mine} = {folded}"]


def _run_fold(b, s):
    shape = b.p.buffer_shape(s["over"])
    value, size = _evaluate(s["expr"], b, shape)
    dst = b.p.buffer(s["dst"])
    # every term is rounded to the vector's type before it is added
    b.local["fold"], b.size["fold"] = b.rounded(value, dst["dtype"]), size
    _run_reduce(b, {"src": "fold", "dst": s["dst"], "kind": s["kind"], "dim": s["dim"],
                    "clear": False})
    del b.local["fold"], b.size["fold"]


def _emit_gstore(p, s):
    """Y[row, col] = expr straight from a T.Parallel loop, guarded at the edges."""
    rows, cols = _origin(p, "mn")
    return [f"for i, j in T.Parallel({p.bm}, {p.bn}):",
            f"    if {rows} + i < {p.M} and {cols} + j < {p.N}:",
            f"        {s['dst']}[{rows} + i, {cols} + j] = {_render(s['expr'])}"]


def _run_gstore(b, s):
    value, size = _evaluate(s["expr"], b, (b.p.bm, b.p.bn))
    b.write(s["dst"], _origin_values(b.p, "mn", b.bx, b.by), value, size)


def _emit_atomic(p, s):
    """A vector of partial results added into a tensor that several blocks share."""
    start = _origin(p, p.tensor(s["dst"])["kind"])[0]
    length = p.buffer_shape(p.buffer(s["src"])["kind"])[0]
    target = f"{s['dst']}[{start}:{start} + {length}]" if s.get("sliced") else \
        f"{s['dst']}[{start}]"
    return [f"T.atomic_add({target}, {s['src']})"]


def _run_atomic(b, s):
    start = _origin_values(b.p, b.p.tensor(s["dst"])["kind"], b.bx, b.by)
    b.write(s["dst"], start, b.local[s["src"]], b.size[s["src"]], add=True)


def _emit_scatter(p, s):
    """Every element of a tile added into one of 8 bins: many threads hit each bin."""
    rows, cols = _origin(p, "mn")
    return [f"for i, j in T.Parallel({p.bm}, {p.bn}):",
            f"    if {rows} + i < {p.M} and {cols} + j < {p.N}:",
            f"        T.atomic_add({s['dst']}[(i + 3 * j) % 8], {s['src']}[i, j])"]


def _run_scatter(b, s):
    torch = b.torch
    p = b.p
    rows = min(p.bm, p.M - b.by * p.bm)
    cols = min(p.bn, p.N - b.bx * p.bn)
    i = torch.arange(rows)[:, None]
    j = torch.arange(cols)[None, :]
    bins = ((i + 3 * j) % 8).reshape(-1)
    values = b.local[s["src"]][:rows, :cols].reshape(-1)
    sizes = b.size[s["src"]][:rows, :cols].reshape(-1)
    add = torch.zeros(8, dtype=torch.float64).index_add_(0, bins, values)
    size = torch.zeros(8, dtype=torch.float64).index_add_(0, bins, sizes)
    b.write(s["dst"], [0], add, size, add=True)


def _gemm_sources(p, s) -> tuple[str, str]:
    """Where step k's tiles of A and B start, as source text."""
    a_src = f"{s['A']}[k * {p.bk}, by * {p.bm}]" if s["transpose_A"] else \
        f"{s['A']}[by * {p.bm}, k * {p.bk}]"
    b_src = f"{s['B']}[bx * {p.bn}, k * {p.bk}]" if s["transpose_B"] else \
        f"{s['B']}[k * {p.bk}, bx * {p.bn}]"
    return a_src, b_src


def _gemm_keywords(s) -> str:
    """T.gemm's keyword arguments of the step, as source text."""
    extra = ", transpose_A=True" if s["transpose_A"] else ""
    extra += ", transpose_B=True" if s["transpose_B"] else ""
    if s["policy"] != "Square":
        extra += f", policy=T.GemmWarpPolicy.{s['policy']}"
    if s.get("clear_accum"):  # each step starts over: C holds the last K tile's product
        extra += ", clear_accum=True"
    return extra


def _emit_gemm(p, s):
    """C += A @ B over K in tiles, the tile loads pipelined with `stages` stages."""
    a_src, b_src = _gemm_sources(p, s)
    lines = [] if s.get("clear_accum") else [f"T.clear({s['dst']})"]
    lines += [f"for k in T.Pipelined({-(-p.K // p.bk)}, num_stages={s['stages']}):",
              f"    T.copy({a_src}, {s['a']})",
              f"    T.copy({b_src}, {s['b']})"]
    a_operand = s["a"]
    if s.get("a_frag"):
        lines.append(f"    T.copy({s['a']}, {s['a_frag']})")
        a_operand = s["a_frag"]
    lines.append(f"    T.gemm({a_operand}, {s['b']}, {s['dst']}{_gemm_keywords(s)})")
    return lines


def _run_gemm(b, s):
    p = b.p
    kt = -(-p.K // p.bk) * p.bk
    k0 = kt - p.bk if s.get("clear_accum") else 0  # with clear_accum, the last tile only
    rows, cols = b.by * p.bm, b.bx * p.bn
    a = b.window(s["A"], [k0, rows], [kt - k0, p.bm]).T if s["transpose_A"] else \
        b.window(s["A"], [rows, k0], [p.bm, kt - k0])
    bb = b.window(s["B"], [cols, k0], [p.bn, kt - k0]).T if s["transpose_B"] else \
        b.window(s["B"], [k0, cols], [kt - k0, p.bn])
    b.set(s["dst"], a @ bb, a.abs() @ bb.abs())


def _emit_wsgemm(p, s):
    """The GEMM of `_emit_gemm` with warp roles written by hand: the producer warpgroup
    fills `p.slots` slots of A and B by T.tma_copy (or its threads' T.copy), the consumer
    role multiplies (or two consumer roles, each into its own accumulator), the mbarriers
    `bars[slot]` (full) and `bars[slots + slot]` (empty) hand them over; the consumer
    scales and stores its accumulator."""
    n = p.slots
    a_src, b_src = _gemm_sources(p, s)
    producer, consumer = f"T.ws({s['producer']})", \
        f"T.ws({', '.join(str(g) for g in s['consumer'])})"
    slot = f"k % {n}"
    loop = f"for k in T.serial({-(-p.K // p.bk)}):"
    copy = "T.copy({}, {})" if s.get("thread_copies") else \
        f"T.tma_copy({{}}, {{}}, barrier=bars[{slot}])"
    produce = [f"T.barrier_wait(bars[{slot} + {n}], k // {n} % 2 ^ 1)",
               copy.format(a_src, f"{s['a']}[{slot}, :, :]"),
               copy.format(b_src, f"{s['b']}[{slot}, :, :]"),
               f"T.barrier_arrive(bars[{slot}])"]

    def consume(dst):
        lines = [f"T.barrier_wait(bars[{slot}], k // {n} % 2)"]
        a_operand = f"{s['a']}[{slot}, :, :]"
        if s.get("a_frag"):
            lines.append(f"T.copy({a_operand}, {s['a_frag']})")
            a_operand = s["a_frag"]
        return lines + [f"T.gemm({a_operand}, {s['b']}[{slot}, :, :], {dst}{_gemm_keywords(s)})",
                        f"T.barrier_arrive(bars[{slot} + {n}])"]

    def clear(dst):
        return [] if s.get("clear_accum") else [f"T.clear({dst})"]

    def finish(dst, out):
        scaled = [f"for i, j in T.Parallel({p.bm}, {p.bn}):",
                  f"    {dst}[i, j] = {dst}[i, j] * {s['scale']}"] if s.get("scale") else []
        return scaled + [f"T.copy({dst}, {out}[by * {p.bm}, bx * {p.bn}])"]

    lines = [f"bars = T.alloc_barrier([128] * {n} + [{128 * len(s['consumer'])}] * {n})"]
    dst, out = s["dst"], s["out"]
    if s.get("whole_loops"):  # each role runs the whole loop (TileLang's kernels, role_turns)
        consumers = [(consumer, dst, out)]
        if s.get("two_consumers"):  # one role per warpgroup, each the whole product
            consumers = [(f"T.ws({g})", d, o) for g, d, o in
                         zip(s["consumer"], (dst, s["dst2"]), (out, s["out2"]))]
        roles = [[f"with {producer}:", f"    {loop}", *_indent(produce, 8)]]
        roles += [[f"with {role}:", *_indent(clear(d), 4), f"    {loop}",
                   *_indent(consume(d), 8), *_indent(finish(d, o), 4)]
                  for role, d, o in consumers]
        if s.get("consumer_first"):
            roles = roles[1:] + roles[:1]
        return lines + [line for role in roles for line in role]
    if clear(dst):
        lines += [f"with {consumer}:", *_indent(clear(dst), 4)]
    return lines + [loop, f"    with {producer}:", *_indent(produce, 8),
                    f"    with {consumer}:", *_indent(consume(dst), 8),
                    f"with {consumer}:", *_indent(finish(dst, out), 4)]


def _indent(lines: list, spaces: int) -> list:
    return [" " * spaces + line for line in lines]


def _run_wsgemm(b, s):
    _run_gemm(b, s)
    value, size = b.local[s["dst"]], b.size[s["dst"]]
    if s.get("scale"):
        value, size = value * s["scale"], size * abs(s["scale"])
    for out in (s["out"], s["out2"]) if s.get("two_consumers") else (s["out"],):
        b.write(out, _origin_values(b.p, "mn", b.bx, b.by), value, size)


def _emit_ksum(p, s):
    """Row sums of an M x K tensor: K walked in tiles by a pipelined loop."""
    return [f"T.clear({s['dst']})",
            f"for k in T.Pipelined({-(-p.K // p.bk)}, num_stages={s['stages']}):",
            f"    T.copy({s['src']}[by * {p.bm}, k * {p.bk}], {s['stage']})",
            f"    T.copy({s['stage']}, {s['tmp']})",
            f"    T.reduce_sum({s['tmp']}, {s['dst']}, dim=1, clear=False)"]


def _run_ksum(b, s):
    p = b.p
    kt = -(-p.K // p.bk) * p.bk
    tiles = b.rounded(b.window(s["src"], [b.by * p.bm, 0], [p.bm, kt]),
                      p.buffer(s["tmp"])["dtype"])
    b.set(s["dst"], tiles.sum(1), tiles.abs().sum(1))


def _emit_attn(p, s):
    """FlashAttention's forward pass for the block's query rows: a pipelined loop over the
    key tiles, S = Q Kᵀ, an online softmax (running row maximum `m`, sum `total`, the output
    rescaled by `alpha`), O += P V; keys past the end (and, causal, past the row) masked.
    With `q_frag`, Q is copied into registers once and S = Q Kᵀ takes it from there."""
    q, kt, vt, sc, pr, o, m, m_prev, alpha, rowsum, total = s["tiles"]
    queries = s.get("q_frag") or q
    tiles = -(-p.N // p.bn)
    trips = f"T.min({tiles}, T.ceildiv((by + 1) * {p.bm}, {p.bn}))" if s["causal"] else \
        str(tiles)
    keep = [f"k * {p.bn} + j < {p.N}"] if p.N % p.bn else []
    if s["causal"]:
        keep.append(f"k * {p.bn} + j <= by * {p.bm} + i")
    scaled = f"{sc}[i, j] * {s['scale']!r}"
    masked = f"T.if_then_else({' and '.join(keep)}, {scaled}, -T.infinity(T.float32))" \
        if keep else scaled
    return [f"T.copy({s['Q']}[by * {p.bm}, 0], {q})",
            *([f"T.copy({q}, {queries})"] if s.get("q_frag") else []),
            f"T.clear({o})",
            f"T.clear({total})",
            f"T.fill({m}, -T.infinity(T.float32))",
            f"for k in T.Pipelined({trips}, num_stages={s['stages']}):",
            f"    T.copy({s['K']}[k * {p.bn}, 0], {kt})",
            f"    T.copy({s['V']}[k * {p.bn}, 0], {vt})",
            f"    T.clear({sc})",
            f"    T.gemm({queries}, {kt}, {sc}, transpose_B=True, "
            "policy=T.GemmWarpPolicy.FullRow)",
            f"    for i, j in T.Parallel({p.bm}, {p.bn}):",
            f"        {sc}[i, j] = {masked}",
            f"    T.copy({m}, {m_prev})",
            f"    T.reduce_max({sc}, {m}, dim=1, clear=False)",
            f"    for i in T.Parallel({p.bm}):",
            f"        {alpha}[i] = T.exp({m_prev}[i] - {m}[i])",
            f"    for i, j in T.Parallel({p.bm}, {p.bn}):",
            f"        {sc}[i, j] = T.exp({sc}[i, j] - {m}[i])",
            f"    T.reduce_sum({sc}, {rowsum}, dim=1)",
            f"    for i in T.Parallel({p.bm}):",
            f"        {total}[i] = {total}[i] * {alpha}[i] + {rowsum}[i]",
            f"    T.copy({sc}, {pr})",
            f"    for i, j in T.Parallel({p.bm}, {p.K}):",
            f"        {o}[i, j] = {o}[i, j] * {alpha}[i]",
            f"    T.gemm({pr}, {vt}, {o}, policy=T.GemmWarpPolicy.FullRow)",
            f"for i, j in T.Parallel({p.bm}, {p.K}):",
            f"    {o}[i, j] = {o}[i, j] / {total}[i]",
            f"T.copy({o}, {s['O']}[by * {p.bm}, 0])"]


def _run_attn(b, s):
    torch, p = b.torch, b.p
    rows = b.by * p.bm
    tiles = -(-p.N // p.bn)
    trips = min(tiles, -(-(b.by + 1) * p.bm // p.bn)) if s["causal"] else tiles
    keys = trips * p.bn
    q = b.window(s["Q"], [rows, 0], [p.bm, p.K])
    k = b.window(s["K"], [0, 0], [keys, p.K])
    v = b.window(s["V"], [0, 0], [keys, p.K])
    scores = (q @ k.T) * s["scale"]
    key = torch.arange(keys, dtype=torch.float64)[None, :]
    keep = (key < p.N).expand(p.bm, keys)
    if s["causal"]:
        keep = keep & (key <= rows + torch.arange(p.bm, dtype=torch.float64)[:, None])
    scores = torch.where(keep, scores, torch.tensor(-math.inf, dtype=torch.float64))
    weights = torch.exp(scores - scores.max(1, keepdim=True).values)
    total = weights.sum(1, keepdim=True)
    b.write(s["O"], [rows, 0], (weights @ v) / total, (weights @ v.abs()) / total)


def _emit_tperm(p, s):
    """Thread code: the first `active` threads write dst's elements by their index, each
    element e (row-major) from src's element (e * a + c) mod E, which another thread's
    step wrote; the others skip the loop (an `if` on the thread index). With `vec` = w > 1
    a thread writes runs of w elements in a `T.vectorized(w)` loop (wider than 16 bytes
    too: passes/cuda_vectors.py splits those)."""
    rows, cols = p.buffer_shape(p.buffer(s["dst"])["kind"])
    total, active, vec = rows * cols, s["active"], s.get("vec", 1)
    dtype = p.buffer(s["dst"])["dtype"]
    lines = ["tx = T.get_thread_binding()",
             f"for r in T.serial({-(-total // (active * vec))}):"]
    pad = "    "
    if active < p.threads:
        lines.append(f"    if tx < {active}:")
        pad += "    "
    if vec > 1:
        lines.append(f"{pad}for i in T.vectorized({vec}):")
        pad += "    "
        lines.append(f"{pad}e = (r * {active} + tx) * {vec} + i")
    else:
        lines.append(f"{pad}e = r * {active} + tx")
    lines.append(f"{pad}f = (e * {s['a']} + {s['c']}) % {total}")
    if total % (active * vec):
        lines.append(f"{pad}if e < {total}:")
        pad += "    "
    lines.append(f"{pad}{s['dst']}[e // {cols}, e % {cols}] = {s['src']}[f // {cols}, "
                 f"f % {cols}] * {s['scale']} + T.cast(e % 3, T.{dtype})")
    return lines


def _run_tperm(b, s):
    torch = b.torch
    shape = b.p.buffer_shape(b.p.buffer(s["dst"])["kind"])
    total = shape[0] * shape[1]
    e = torch.arange(total)
    f = (e * s["a"] + s["c"]) % total
    value = b.local[s["src"]].flatten()[f] * s["scale"] + (e % 3).double()
    size = b.size[s["src"]].flatten()[f] * s["scale"] + 2
    b.set(s["dst"], value.reshape(shape), size.reshape(shape))


# -- warp shuffles (family "threads")
#
# A "shfl" step is thread code: each thread loads a register (a "local" buffer of float32
# or int32) from an element of a shared tile, then a block-uniform `T.serial` loop (so each
# shuffle's exchange is stored and read again every round) updates it from other lanes with
# warp shuffles - every spelling tilelab takes, random widths, offsets, lane masks and
# source lanes (constants, counted by the round, or the thread's own; negative and past the
# segment as well) - and finally each thread writes its register into the destination tile
# at the elements congruent to its index. The reference reads the lanes by PTX's
# `shfl.sync` rule (`_ptx_source`), written from the PTX manual and CUDA's headers, not from
# tilelab's lowering.
#
# Which blocks: CUDA defines a shuffle's value only where the source lane is a thread that
# exists (and takes part); a block whose size is not a multiple of 32 ends with a partial
# warp whose missing lanes hold nothing. The generator keeps every width a divisor of the
# block's size (`validate` checks it): a segment then lies wholly inside the block or wholly
# past it, and every rule reads within the caller's segment, or, for xor, an earlier
# segment of the same warp (j <= the segment's last lane), or the caller itself - so
# every lane read exists. That allows blocks of 24, 40, 48, 80 or 112 threads with narrow
# widths, beside whole warps. Every thread reaches every shuffle (no `if` on the index
# around it, which tilelab refuses anyway), so the full mask is right for the lanes that
# exist; lanes past the block's end are treated as exited by CUDA.

SHUFFLES = ("xor", "down", "up", "sync", "sync_mask_first", "tvm", "tvm_up", "tvm_down",
            "tvm_xor")
# the PTX mode of each spelling
_SHUFFLE_MODE = {"xor": "bfly", "down": "down", "up": "up", "sync": "idx",
                 "sync_mask_first": "idx", "tvm": "idx", "tvm_up": "up",
                 "tvm_down": "down", "tvm_xor": "bfly"}


def _ptx_source(mode: str, lane: int, b: int, width: int) -> int:
    """The lane (0..31) whose value lane `lane` receives from `shfl.sync.<mode>` with
    operand `b`, as CUDA's __shfl*_sync(mask, var, b, width) issue it: c is
    ((32 - width) << 8) | 31, or (32 - width) << 8 for `up` (sm_30_intrinsics.hpp). The
    PTX manual's pseudocode, bit for bit."""
    bval = b & 0x1F
    cval = 0 if mode == "up" else 0x1F
    segmask = (32 - width) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask & 0x1F)
    min_lane = lane & segmask
    if mode == "up":
        j = lane - bval
        ok = j >= max_lane
    elif mode == "down":
        j = lane + bval
        ok = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        ok = j <= max_lane
    else:  # idx
        j = min_lane | (bval & ~segmask & 0x1F)
        ok = j <= max_lane
    return j if ok else lane


def _lane_arg(arg, t: int, r: int) -> int:
    """A shuffle's lane operand for thread `t` in round `r` (see `_render_lane_arg`)."""
    kind = arg[0]
    if kind == "k":
        return arg[1]
    if kind == "shr":
        return arg[1] >> r
    if kind == "lin":
        return r * arg[1] + arg[2]
    return t * arg[1] + arg[2]  # "tx"


def _render_lane_arg(arg) -> str:
    def plus(text, k):
        return text if k == 0 else f"{text} + {k}" if k > 0 else f"{text} - {-k}"

    kind = arg[0]
    if kind == "k":
        return repr(arg[1])
    if kind == "shr":
        return f"{arg[1]} >> r"
    if kind == "lin":
        return plus(f"r * {arg[1]}", arg[2])
    return plus(f"tx * {arg[1]}", arg[2])


def _render_shuffle(sh, value: str) -> str:
    fn, arg, w = sh["fn"], _render_lane_arg(sh["arg"]), sh["width"]
    full = "0xFFFFFFFF"
    if fn.startswith("tvm"):
        name = "tvm_warp_shuffle" + fn[3:]
        return f"T.{name}({full}, {value}, {arg}, {w}, {sh['warp_size']})"
    if fn == "sync_mask_first":
        return f"T.shfl_sync({full}, {value}, {arg}, {w})"
    name = "shfl_" + fn
    if sh.get("spelling") == "default" and w == 32:
        return f"T.{name}({value}, {arg})"
    if sh.get("spelling") == "keyword":
        return f"T.{name}({value}, {arg}, width={w})"
    if sh.get("spelling") == "mask" and fn != "sync":
        return f"T.{name}({value}, {arg}, {w}, {full})"
    return f"T.{name}({value}, {arg}, {w})"


def _emit_shfl(p, s):
    rows, cols = p.buffer_shape(p.buffer(s["src"])["kind"])
    total, reg = rows * cols, s["reg"]
    rtype = p.buffer(reg)["dtype"]
    dtype = p.buffer(s["dst"])["dtype"]
    # the register reads the part of the tile every block loads from inside the tensor
    vr, vc = min(rows, p.M), min(cols, p.N)
    f = f"(tx * {s['a']} + {s['c']}) % {vr * vc}"
    lines = ["tx = T.get_thread_binding()",
             f"{reg}[0] = T.cast({s['src']}[{f} // {vc}, {f} % {vc}], T.{rtype}) + "
             f"T.cast(tx % {s['spread']}, T.{rtype})"]
    pad = ""
    if s["rounds"]:
        lines.append(f"for r in T.serial({s['rounds']}):")
        pad = "    "
    for item in s["body"]:
        term = " + ".join(_render_shuffle(sh, f"{reg}[0]") for sh in item["shuffles"])
        if len(item["shuffles"]) > 1:
            term = f"({term})"
        v = f"{reg}[0]"
        value = {"+": f"{v} + {term}", "-": f"{term} - {v}", "max": f"T.max({v}, {term})",
                 "min": f"T.min({v}, {term})", "set": term}[item["combine"]]
        lines.append(f"{pad}{v} = {value}")
    lines.append(f"for q in T.serial({-(-total // p.threads)}):")
    lines.append(f"    e = q * {p.threads} + tx")
    pad = "    "
    if total % p.threads:
        lines.append(f"    if e < {total}:")
        pad += "    "
    lines.append(f"{pad}{s['dst']}[e // {cols}, e % {cols}] = T.cast({reg}[0], T.{dtype})")
    return lines


def _run_shfl(b, s):
    torch, p = b.torch, b.p
    shape = p.buffer_shape(p.buffer(s["src"])["kind"])
    total, threads = shape[0] * shape[1], p.threads
    rtype = p.buffer(s["reg"])["dtype"]
    t = torch.arange(threads)
    vr, vc = min(shape[0], p.M), min(shape[1], p.N)
    f = (t * s["a"] + s["c"]) % (vr * vc)
    f = f // vc * shape[1] + f % vc
    src = b.local[s["src"]].flatten()
    if rtype == "int32":  # a C cast: toward zero
        init = torch.trunc(src[f])
    else:
        init = b.rounded(src[f], rtype)
    value = b.rounded(init + (t % s["spread"]).double(), rtype)
    size = _larger(b.size[s["src"]].flatten()[f] + s["spread"] - 1, value)

    def sources(sh, r):
        out = []
        for thread in range(threads):
            lane = thread % 32
            j = _ptx_source(_SHUFFLE_MODE[sh["fn"]], lane,
                            _lane_arg(sh["arg"], thread, r), sh["width"])
            source = thread - lane + j
            if not 0 <= source < threads:
                raise ValueError(f"shuffle reads lane {source}, past the block's "
                                 f"{threads} threads: undefined on CUDA")
            out.append(source)
        return torch.tensor(out)

    for r in range(s["rounds"] or 1):
        for item in s["body"]:
            term = term_size = None
            for sh in item["shuffles"]:
                at = sources(sh, r)
                if term is None:
                    term, term_size = value[at], size[at]
                else:
                    term = b.rounded(term + value[at], rtype)
                    term_size = term_size + size[at]
            op = item["combine"]
            if op == "+":
                new, new_size = value + term, size + term_size
            elif op == "-":
                new, new_size = term - value, size + term_size
            elif op == "max":
                new, new_size = torch.maximum(value, term), torch.maximum(size, term_size)
            elif op == "min":
                new, new_size = torch.minimum(value, term), torch.maximum(size, term_size)
            else:
                new, new_size = term, term_size
            value = b.rounded(new, rtype)
            size = _larger(new_size, value)
    e = torch.arange(total)
    b.set(s["dst"], value[e % threads].reshape(shape), size[e % threads].reshape(shape))


_EMIT = {name.removeprefix("_emit_"): fn for name, fn in globals().items()
         if name.startswith("_emit_")}
_RUN = {name.removeprefix("_run_"): fn for name, fn in globals().items()
        if name.startswith("_run_")}


# ---------------------------------------------------------------- validity


def _reads(step) -> list[str]:
    """Buffers a step reads (they must have been written before)."""
    op = step["op"]
    names = [leaf[1] for leaf in _leaves(step.get("expr")) if leaf[0] == "ld"]
    if op in ("copy", "reduce", "store", "atomic", "scatter", "tperm", "shfl"):
        names.append(step["src"])
    if op == "subcopy":
        names += [step["src"], step["dst"]]
    if op == "reduce" and not step["clear"] or op == "fold":
        names.append(step["dst"])
    if step.get("flag"):
        names.append(step["flag"])  # an input tensor: it must still be there
    if step.get("mask"):
        names.append(step["mask"])
    return names


def validate(p: Program) -> bool:
    """Whether a (possibly edited) recipe is still a well-formed program."""
    written: set[str] = set()
    buffers = {b["name"] for b in p.buffers}
    tensors = {t["name"] for t in p.tensors}
    for step in p.steps:
        for name in _reads(step):
            if name in buffers and name not in written:
                return False
            if name not in buffers and name not in tensors:
                return False
        if step["op"] == "ew" and (step.get("guard") or step.get("flag") or
                                   step.get("mask")) and step["dst"] not in written:
            return False  # some blocks skip the loop: dst must hold something already
        if step["op"] == "tperm" and (step["active"] > p.threads or any(
                p.buffer(step[n])["scope"] != "shared" for n in ("src", "dst"))):
            return False  # thread code reads and writes shared tiles, on threads it has
        if step["op"] == "shfl" and (
                any(p.buffer(step[n])["scope"] != "shared" for n in ("src", "dst")) or
                any(p.threads % sh["width"] or sh["width"] not in (1, 2, 4, 8, 16, 32)
                    for item in step["body"] for sh in item["shuffles"])):
            return False  # every lane a shuffle reads exists: widths divide the block
        if step.get("dst") in buffers:
            written.add(step["dst"])
    return any(step["op"] in ("store", "gstore", "atomic", "scatter", "wsgemm", "attn")
               for step in p.steps)


# ---------------------------------------------------------------- generation


class _Gen:
    """Draws one program; `names` hands out buffer names in order."""

    def __init__(self, rng: random.Random, p: Program, dtype: str):
        self.rng, self.p, self.dtype = rng, p, dtype
        self.count = {"X": 0, "Y": 0, "s": 0, "f": 0, "l": 0}
        self.defined: list[dict] = []  # buffers written so far
        self.exact: set[str] = set()  # buffers holding loaded input values (safe to compare)
        # fragment vector -> the fragment tile it was reduced from (None: loaded or mixed).
        # Its elements live on the threads that held that tile's rows, so a T.Parallel
        # loop may broadcast it only while walking that tile (the softmax pattern).
        self.origin: dict = {}

    def tensor(self, kind, dtype, output=False, prefix=None):
        prefix = prefix or ("Y" if output else "X")
        self.count.setdefault(prefix, 0)
        name = f"{prefix}{self.count[prefix]}"
        self.count[prefix] += 1
        self.p.tensors.append({"name": name, "kind": kind, "dtype": dtype, "output": output})
        return name

    def buffer(self, scope, kind, dtype):
        prefix = scope[0]  # s, f or l
        name = f"{prefix}{self.count[prefix]}"
        self.count[prefix] += 1
        buf = {"name": name, "scope": scope, "kind": kind, "dtype": dtype}
        self.p.buffers.append(buf)
        return buf

    def step(self, **step):
        self.p.steps.append(step)
        dst = step.get("dst")
        if dst and any(b["name"] == dst for b in self.p.buffers):
            buf = self.p.buffer(dst)
            if buf not in self.defined:
                self.defined.append(buf)
            if step["op"] in ("load", "copy") and (step["op"] == "load" or
                                                   step["src"] in self.exact):
                self.exact.add(dst)
            elif step["op"] not in ("load", "copy"):
                self.exact.discard(dst)

    def scope(self):
        return self.rng.choice(("shared", "fragment"))

    # -- expressions

    def expr(self, operands: list, depth: int, is_int: bool):
        """A random expression over `operands` [(buffer name, access)]."""
        rng = self.rng
        if depth == 0 or rng.random() < 0.25:
            roll = rng.random()
            if roll < 0.75 and operands:
                name, access = rng.choice(operands)
                return ["ld", name, access]
            if roll < 0.9:
                return ["c", rng.choice((1, 2, -3)) if is_int else rng.choice((0.5, 2.0, -1.5))]
            return ["ix", rng.choice(("i", "j"))] if any(a in ("ij", "ji") for _, a in operands) \
                else ["ix", "i"]
        roll = rng.random()
        if roll < 0.6:
            op = rng.choice(("+", "-", "*", "max", "min"))
            return ["bin", op, self.expr(operands, depth - 1, is_int),
                    self.expr(operands, depth - 1, is_int)]
        if roll < 0.8:
            fn = rng.choice(("abs", "neg") if is_int else ("abs", "neg", "exp"))
            return ["un", fn, self.expr(operands, depth - 1, is_int)]
        # a select: compare values that every backend holds exactly (loaded inputs, indices)
        exact = [(n, a) for n, a in operands if n in self.exact]
        left, right = (["ld", *rng.choice(exact)], ["c", 0]) if exact else \
            _index_comparison(operands)
        return ["sel", rng.choice(("<", ">")), left, right,
                self.expr(operands, depth - 1, is_int), self.expr(operands, depth - 1, is_int)]

    def loop_operands(self, kind: str, dst: dict | None) -> list:
        """`operands_for`, less the fragment reads that would need another thread's data."""
        anchor = self.origin.get(dst["name"]) if dst and len(kind) == 1 else None
        out = []
        for name, access in self.operands_for(kind, None):
            buf = self.p.buffer(name)
            if buf["scope"] != "fragment" or access == "ij":
                out.append((name, access))
            elif len(kind) == 2:  # a broadcast vector: only over the tile it came from
                if dst and dst["scope"] == "fragment" and self.origin.get(name) == dst["name"]:
                    out.append((name, access))
            elif self.origin.get(name) == anchor:  # 1-d loops: vectors of one origin
                out.append((name, access))
        return out

    def operands_for(self, kind: str, dst_scope) -> list:
        """What a T.Parallel loop over a `kind` buffer may read, and how."""
        rows, cols = {"mn": ("m", "n"), "nm": ("n", "m"), "m": ("m", None),
                      "n": ("n", None)}[kind]
        out = []
        for b in self.defined:
            if b["kind"] == kind:
                out.append((b["name"], "ij" if cols else "i"))
            elif cols and b["kind"] == kind[::-1] and b["scope"] == "shared":
                out.append((b["name"], "ji"))  # transposed: any thread's element, so shared
            elif b["kind"] == rows and (cols or kind in ("m", "n")):
                out.append((b["name"], "i"))
            elif cols and b["kind"] == cols:
                out.append((b["name"], "j"))
        return out


def _compare_indices_instead(expr, name: str, operands: list):
    """`expr` with every select on buffer `name`'s values comparing indices instead: for a
    step applied over and over (a masked loop), whose later passes read values it computed
    itself - a value within rounding of the threshold would send one backend down one side
    and the reference down the other (seed 5001, program 131)."""
    if expr[0] in ("ld", "c", "ix"):
        return expr
    parts = [_compare_indices_instead(part, name, operands) if isinstance(part, list) else part
             for part in expr[2:]]
    if expr[0] == "sel" and expr[2][0] == "ld" and expr[2][1] == name:
        parts[0:2] = _index_comparison(operands)
    return [expr[0], expr[1], *parts]


def _index_comparison(operands: list) -> tuple[list, list]:
    """The two sides of a select that compares loop indices (exact on every backend)."""
    left = ["ix", "i"]
    right = ["ix", "j" if any(a in ("ij", "ji") for _, a in operands) else "i"]
    return left, (["c", 3] if right == left else right)


def _sizes(rng: random.Random, block: int) -> int:
    """An extent with a tail: up to three blocks, rarely a whole number of them."""
    if rng.random() < 0.2:
        return block * rng.randint(1, 2)
    return rng.randint(1, 3 * block)


FAMILIES = ("", "hopper", "roles", "attention", "threads")


def generate(seed: int, index: int, family: str = "") -> Program:
    """Program `index` of `seed`: the same recipe on every machine. The family "hopper"
    draws only GEMMs whose tiles sm_90a can feed to warpgroup MMA by TMA (16-bit inputs,
    whole warpgroups, 64-row tiles, rows a multiple of 16 bytes apart, 2-4 stages): the
    paths the other programs seldom reach (its own numbering: a program of one family says
    nothing of the other's)."""
    if family == "hopper":
        return _gemm_program(random.Random(f"tilelab-difftest-hopper:{seed}:{index}"), seed,
                             index, hopper=True)
    if family == "roles":
        return _roles_program(random.Random(f"tilelab-difftest-roles:{seed}:{index}"), seed,
                              index)
    if family == "attention":
        return _attention_program(random.Random(f"tilelab-difftest-attention:{seed}:{index}"),
                                  seed, index)
    if family == "threads":
        return _threads_program(random.Random(f"tilelab-difftest-threads:{seed}:{index}"),
                                seed, index)
    if family:
        raise ValueError(f"no program family {family!r}; there are {FAMILIES}")
    rng = random.Random(f"tilelab-difftest:{seed}:{index}")
    family = rng.choice(("tiles", "tiles", "tiles", "gemm", "ksum"))
    if family == "gemm":
        return _gemm_program(rng, seed, index)
    return _tile_program(rng, seed, index, with_ksum=family == "ksum")


def _tile_start(rng, seed, index, family="") -> tuple:
    """A tile program's element type, tiles, sizes and threads: (generator, dtype, the
    accumulator's dtype, integer?)."""
    dtype = rng.choice(DTYPES)
    is_int = dtype == "int32"
    bm, bn = rng.choice((8, 16, 32, 64)), rng.choice((8, 16, 32, 64))
    p = Program(seed, index, M=_sizes(rng, bm), N=_sizes(rng, bn), K=0, bm=bm, bn=bn, bk=16,
                threads=rng.choice((32, 64, 128, 256)), family=family)
    return _Gen(rng, p, dtype), dtype, "int32" if is_int else "float32", is_int


def _tile_program(rng, seed, index, with_ksum=False) -> Program:
    g, dtype, acc, is_int = _tile_start(rng, seed, index)
    p = g.p
    # inputs, each loaded into a buffer of its own (a shifted window now and then)
    for kind in ["mn"] + rng.sample(["mn", "nm", "vm", "vn"], rng.randint(0, 2)):
        name = g.tensor(kind, dtype)
        local = {"mn": "mn", "nm": "nm", "vm": "m", "vn": "n"}[kind]
        buf = g.buffer(g.scope(), local, dtype)
        shift = [rng.choice((0, 0, 1, 5)), rng.choice((0, 0, 3))] if rng.random() < 0.3 \
            else [0, 0]
        g.step(op="load", dst=buf["name"], src=name, shift=shift[:len(p.tensor_shape(kind))])
    if with_ksum:
        p.K = _sizes(rng, 16)
        p.bk = rng.choice((8, 16, 32))
        src = g.tensor("a", dtype)
        stage = g.buffer("shared", "mk", dtype)
        tmp = g.buffer("fragment", "mk", dtype)
        dst = g.buffer("fragment", "m", acc)
        g.step(op="ksum", dst=dst["name"], src=src, stage=stage["name"], tmp=tmp["name"],
               stages=rng.randint(1, 4))
    for _ in range(rng.randint(1, 5)):
        _random_step(g, dtype, acc, is_int)
    _recopy(g, random.Random(f"tilelab-difftest-recopy:{seed}:{index}"))
    _outputs(g, dtype, acc)
    return p


def _recopy(g: _Gen, rng: random.Random):
    """Now and then: a float fragment copied into a tile of another float type, changed in
    place, and copied into that tile again - the second copy must store the new values
    (TVM's CUDA code generator once reused the first copy's vector temporaries there:
    passes/fresh_vector_loads.py). Drawn from a generator of its own, so that the rest of a
    seed's programs is what it was before (thirty-ninth session)."""
    frags = [b for b in g.defined if b["scope"] == "fragment" and b["kind"] == "mn" and
             b["dtype"] in FLOATS]
    if not frags or rng.random() < 0.7:
        return
    src = rng.choice(frags)
    dst = g.buffer(rng.choice(("shared", "fragment")), "mn",
                   rng.choice([t for t in FLOATS if t != src["dtype"]]))
    g.step(op="copy", dst=dst["name"], src=src["name"])
    g.step(op="ew", dst=src["name"], expr=["bin", rng.choice(("*", "+")),
                                           ["ld", src["name"], "ij"],
                                           ["c", rng.choice((2.0, -1.5, 0.5))]])
    g.step(op="copy", dst=dst["name"], src=src["name"])


def _threads_program(rng, seed, index) -> Program:
    """Shared tiles rewritten by thread code (`tperm` steps, and warp shuffles: `shfl`
    steps) between the general mix's tile steps. Whether a `tperm` step is vectorized
    comes from a generator of its own, so that the rest of a seed's programs is what it
    was before steps could be (twenty-eighth session)."""
    widths = random.Random(f"tilelab-difftest-threads-vec:{seed}:{index}")
    g, dtype, acc, is_int = _tile_start(rng, seed, index, family="threads")
    p = g.p
    shuffles = rng.random() < 0.7
    if shuffles:  # 1 to 4 warps (8 now and then), or a partial last warp (see the comment
        # above _emit_shfl); one warp found TVM's FlattenBuffer dividing by zero on the warp
        # base `tx - tx % 32` (seed 7 of --family threads, programs 22 and 48)
        p.threads = rng.choice((32, 64, 96, 128, 128, 256, 24, 40, 48, 80, 112))
    src = g.buffer("shared", "mn", dtype)
    g.step(op="load", dst=src["name"], src=g.tensor("mn", dtype), shift=[0, 0])
    for turn in range(rng.randint(1, 3)):
        dst = g.buffer("shared", "mn", dtype)
        if shuffles and (turn == 0 or rng.random() < 0.5):
            _shfl_step(g, src, dst, is_int)
        else:
            g.step(op="tperm", dst=dst["name"], src=src["name"], a=rng.choice((1, 3, 5, 7)),
                   c=rng.randrange(p.bm * p.bn), scale=rng.choice((1, 2, 3)),
                   active=rng.choice([32 * w for w in range(1, p.threads // 32 + 1)] or
                                     [p.threads]),
                   vec=widths.choice((1, 1, 2, 4, 8, 16, 32)))
        src = dst
        if rng.random() < 0.5:
            _random_step(g, dtype, acc, is_int)
    _outputs(g, dtype, acc)
    return p


def _shfl_step(g: _Gen, src: dict, dst: dict, is_int: bool):
    """A `shfl` step from shared tile `src` into `dst` (see `_emit_shfl`)."""
    rng, p = g.rng, g.p
    # an int32 register from a float tile only where its values are loaded inputs: a
    # computed value near an integer could truncate either way on either side
    int_reg = rng.random() < (0.7 if is_int else 0.3 if src["name"] in g.exact else 0)
    reg = g.buffer("local", "local", "int32" if int_reg else "float32")
    widths = [w for w in (1, 2, 4, 8, 16, 32) if p.threads % w == 0]
    rounds = rng.choice((0, 1, 2, 3, 4, 5))  # 0: no loop, the body once

    def lane_arg(fn, width):
        roll = rng.random()
        if roll < 0.35:  # a constant: in the segment, past it, or negative
            return ["k", rng.choice((0, 1, width - 1, width // 2, width, width + 1, 31, 33,
                                     -1, -width, rng.randint(-40, 40)))]
        if roll < 0.55 and rounds:  # halving by round: the butterfly / tree pattern
            return ["shr", rng.choice((width // 2 or 1, width, 16, 32))]
        if roll < 0.75 and rounds:
            return ["lin", rng.choice((1, 2, 3, -1, -5)), rng.randint(-8, 8)]
        # the thread's own lane number in it: different for each lane
        if fn in ("down", "up", "tvm_up", "tvm_down") and rng.random() < 0.5:
            return ["tx", rng.choice((0, 1)), rng.randint(-3, 40)]
        return ["tx", rng.choice((1, 3, -1, 5, 7)), rng.randint(-40, 40)]

    def shuffle():
        fn = rng.choice(SHUFFLES)
        width = rng.choice(widths)
        sh = {"fn": fn, "width": width, "arg": lane_arg(fn, width)}
        if fn.startswith("tvm"):
            sh["warp_size"] = rng.choice([w for w in (width, 32) if w >= width])
        else:
            sh["spelling"] = rng.choice(("default", "keyword", "mask", "plain"))
        return sh

    body = [{"shuffles": [shuffle() for _ in range(rng.choice((1, 1, 1, 2)))],
             "combine": rng.choice(("+", "+", "-", "max", "min", "set"))}
            for _ in range(rng.choice((1, 1, 2, 3) if rounds <= 2 else (1, 1, 2)))]
    rows, cols = p.buffer_shape(src["kind"])
    g.step(op="shfl", dst=dst["name"], src=src["name"], reg=reg["name"],
           a=rng.choice((1, 3, 5, 7)), c=rng.randrange(rows * cols),
           spread=rng.choice((7, 13, 32)), rounds=rounds, body=body)


def _random_step(g: _Gen, dtype: str, acc: str, is_int: bool):
    rng, p = g.rng, g.p
    roll = rng.random()
    tiles = [b for b in g.defined if b["kind"] in ("mn", "nm")]
    if roll < 0.15 and g.defined:  # a copy between scopes
        src = rng.choice(g.defined)
        dst = g.buffer(rng.choice(("shared", "fragment")), src["kind"], src["dtype"])
        g.step(op="copy", dst=dst["name"], src=src["name"])
    elif roll < 0.25 and tiles:  # a sub-tile at an offset, into a filled tile
        src = rng.choice(tiles)
        dst = g.buffer(g.scope(), src["kind"], src["dtype"])
        g.step(op="fill", dst=dst["name"], value=rng.choice((0, 1.5) if not is_int else (0, 2)))
        rows, cols = p.buffer_shape(src["kind"])
        h, w = rng.randint(1, rows), rng.randint(1, cols)
        g.step(op="subcopy", dst=dst["name"], src=src["name"],
               **{"from": [rng.randint(0, rows - h), rng.randint(0, cols - w)],
                  "to": [rng.randint(0, rows - h), rng.randint(0, cols - w)],
                  "size": [h, w]})
    elif roll < 0.45 and tiles and p.threads & (p.threads - 1) == 0:  # a reduction over
        # either dimension (not with a thread count that is not a power of two, 96 or a
        # partial warp: "this reduction's threads do not form a shuffle pattern" on CUDA;
        # seed 263 of --family threads, program 232, on the H200)
        src = rng.choice(tiles)
        if src["scope"] == "shared" and rng.random() < 0.4:  # read from shared memory itself
            dim = rng.randint(0, 1)
            dst = g.buffer(rng.choice(("fragment", "shared")), src["kind"][1 - dim], acc)
            g.step(op="reduce", dst=dst["name"], src=src["name"],
                   kind=rng.choice(REDUCE_KINDS), dim=dim, clear=True)
            return
        if src["scope"] != "fragment":
            frag = g.buffer("fragment", src["kind"], src["dtype"])
            g.step(op="copy", dst=frag["name"], src=src["name"])
            src = frag
        dim = rng.randint(0, 1)
        kind = src["kind"][1 - dim]
        existing = [b for b in g.defined if b["kind"] == kind and b["scope"] == "fragment"
                    and b["dtype"] == acc and g.origin.get(b["name"]) == src["name"]]
        if rng.random() < 0.3:  # the same reduction written as a loop that folds
            _fold(g, src, dim, existing, acc, is_int)
        elif existing and rng.random() < 0.3:
            dst = rng.choice(existing)
            g.step(op="reduce", dst=dst["name"], src=src["name"],
                   kind=rng.choice(REDUCE_KINDS), dim=dim, clear=False)
        else:
            dst = g.buffer("fragment", kind, acc)
            g.step(op="reduce", dst=dst["name"], src=src["name"],
                   kind=rng.choice(REDUCE_KINDS), dim=dim, clear=True)
            g.origin[dst["name"]] = src["name"]
    else:  # an elementwise loop: permuted, transposed and broadcast reads
        kind = rng.choice(["mn", "mn", "nm", "m", "n"])
        scope = g.scope()
        if not g.operands_for(kind, scope):
            kind = "mn"
        in_place = [b for b in g.defined if b["kind"] == kind and b["scope"] == scope]
        reduced = [g.p.buffer(t) for t in g.origin.values() if t and g.p.buffer(t)["kind"] ==
                   kind]
        guard = 0
        if reduced and rng.random() < 0.5:  # softmax-like: a tile updated with its own rows'
            dst = rng.choice(reduced)        # (or columns') reductions
        elif in_place and rng.random() < 0.3:
            dst = rng.choice(in_place)
            if rng.random() < 0.5:
                guard = rng.randint(1, 2)
        else:
            out_dtype = dtype if rng.random() < 0.8 else acc
            dst = g.buffer(scope, kind, out_dtype)
        operands = g.loop_operands(kind, dst if dst in g.defined else None)
        if dst not in g.defined and dst["scope"] == "fragment" and len(kind) == 1:
            vectors = [n for n, a in operands if g.p.buffer(n)["scope"] == "fragment"]
            g.origin[dst["name"]] = g.origin.get(vectors[0]) if vectors else None
        tmp = None
        if rng.random() < 0.15:
            tmp = g.buffer("local", "local", dst["dtype"])["name"]
        # a shared destination may not be read transposed in its own loop
        operands = [(n, a) for n, a in operands if not (n == dst["name"] and a != "ij")]
        expr = g.expr(operands, rng.randint(1, 2 if is_int else 3), is_int)
        step = {"op": "ew", "dst": dst["name"], "expr": expr}
        if guard:
            step["guard"] = guard
            inputs = [t for t in g.p.tensors if not t["output"] and t["kind"] == "mn"]
            if inputs and rng.random() < 0.5:  # a condition on an input's element instead
                step["flag"] = rng.choice(inputs)["name"]
            elif rng.random() < 0.8:  # or a loop over a block's flags, kept in registers
                flags = g.buffer("fragment", "mask", "int32")
                g.step(op="load", dst=flags["name"], src=g.tensor("mask", "int32"))
                del step["guard"]
                expr = _compare_indices_instead(expr, dst["name"], operands)
                step.update(mask=flags["name"], expr=["bin", "+", expr, ["ix", "k"]])
        if tmp:
            step["tmp"] = tmp
        g.step(**step)


def _fold(g: _Gen, src: dict, dim: int, existing: list, acc: str, is_int: bool):
    """`for i, j in T.Parallel(...): v[i] = v[i] + expr` over fragment tile `src`: a vector
    the loop folds dimension `dim` into, cleared first or one reduced from `src` before.
    Where the GPU's threads share the iterations of one element this is a reduction across
    them (spill_fragments.as_reduction); the CPU runs it in order."""
    rng = g.rng
    if existing and rng.random() < 0.5:
        dst = rng.choice(existing)
    else:
        dst = g.buffer("fragment", src["kind"][1 - dim], acc)
        g.step(op="fill", dst=dst["name"], value=0)
        g.origin[dst["name"]] = src["name"]
    operands = [(n, a) for n, a in g.loop_operands(src["kind"], None) if n != dst["name"]]
    expr = g.expr(operands, rng.randint(0, 2), is_int)
    if not any(leaf[0] == "ld" for leaf in _leaves(expr)):
        expr = ["bin", "*", ["ld", src["name"], "ij"], expr]
    g.step(op="fold", dst=dst["name"], over=src["kind"], expr=expr, dim=dim,
           kind=rng.choice(("sum", "max", "min")), swap=rng.random() < 0.5)


def _outputs(g: _Gen, dtype: str, acc: str):
    """Store a few of the buffers, and sometimes add partial results atomically."""
    rng = g.rng
    candidates = [b for b in g.defined if b["kind"] not in ("local", "mask")]
    chosen = rng.sample(candidates, min(len(candidates), rng.randint(1, 3)))
    if g.defined[-1] not in chosen and g.defined[-1] in candidates:
        chosen.append(g.defined[-1])
    for b in chosen:
        kind = {"mn": "mn", "nm": "nm", "m": "om", "n": "on"}[b["kind"]]
        out = g.tensor(kind, b["dtype"], output=True)
        g.step(op="store", dst=out, src=b["name"])
    tiles = [b for b in g.defined if b["kind"] == "mn"]
    vectors = [b for b in g.defined if b["kind"] in ("m", "n") and b["dtype"] == acc]
    if vectors and rng.random() < 0.3:
        vec = rng.choice(vectors)
        out = g.tensor("vm" if vec["kind"] == "m" else "vn", acc, output=True)
        g.step(op="atomic", dst=out, src=vec["name"], sliced=rng.random() < 0.5)
    if tiles and rng.random() < 0.2:
        out = g.tensor("hist", acc, output=True)
        g.step(op="scatter", dst=out, src=rng.choice(tiles)["name"])
    if tiles and rng.random() < 0.2:
        operands = g.loop_operands("mn", None)
        out = g.tensor("mn", dtype, output=True)
        g.step(op="gstore", dst=out, expr=g.expr(operands, 2, dtype == "int32"))


def _gemm_program(rng, seed, index, hopper: bool = False) -> Program:
    dtype = rng.choice(("float16", "bfloat16"))
    threads = rng.choice((128, 128, 256) if hopper else (32, 64, 128, 128, 256))
    warps = threads // 32
    # tile sizes that `warps` warps can split in 16x8 pieces under some policy
    while True:
        bm, bn = rng.choice((64, 128) if hopper else (16, 32, 64, 128)), \
            rng.choice((64, 128, 256) if hopper else (16, 32, 64, 128))
        policies = [pol for pol in POLICIES if _splits(pol, bm, bn, warps)]
        # a wgmma accumulator stays in registers: at most 128 of them a thread (128 x 256
        # on 128 threads needs 256, and ptxas gives up: seed 0, program 640)
        if policies and bm * bn <= (min(128 * 256, 128 * threads) if hopper else 64 * 128):
            break
    bk = rng.choice((32, 64) if hopper else (16, 32, 64))

    def size(block):  # TMA needs rows a multiple of 16 bytes apart: 8 16-bit elements
        extent = _sizes(rng, block)
        return -(-extent // 8) * 8 if hopper else extent

    p = Program(seed, index, M=size(bm), N=size(bn), K=size(bk), bm=bm, bn=bn, bk=bk,
                threads=threads, family="hopper" if hopper else "")
    g = _Gen(rng, p, dtype)
    step = {"op": "gemm", **_gemm_operands(g, dtype), "policy": rng.choice(policies),
            "stages": rng.randint(2 if hopper else 1, 4), "clear_accum": rng.random() < 0.2}
    if not step["transpose_A"] and rng.random() < 0.2:  # the A operand from registers
        step["a_frag"] = g.buffer("fragment", "mk", dtype)["name"]
    g.step(**step)
    g.exact.discard(step["dst"])
    vec = None
    if rng.random() < 0.4:  # an epilogue: bias and scale, in a second buffer
        bias = g.tensor("vn", dtype)
        vec = g.buffer("shared", "n", dtype)
        g.step(op="load", dst=vec["name"], src=bias, shift=[0])
        dst = g.buffer(g.scope(), "mn", rng.choice(("float32", dtype)))
        scaled = ["bin", "*", ["ld", step["dst"], "ij"], ["c", 0.5]]
        g.step(op="ew", dst=dst["name"], expr=["bin", "+", scaled, ["ld", vec["name"], "j"]])
    _outputs(g, dtype, "float32")
    if hopper and rng.random() < 0.3:  # persistent blocks, the pipeline running across tiles
        walk = [rng.choice((1, 2, 3, 132)), rng.choice((1, 2, 3, 8))]
        # a walk keeps the slots apart from the epilogue's tiles: only where both fit (seed
        # 31, program 53: 4 slots of 48 KB beside a 128 KB tile, refused for 321 KB)
        if _shared_bytes(p, {step["a"]: step["stages"], step["b"]: step["stages"]}) <= \
                WALK_SHARED_BYTES:
            p.walk = walk
    if vec is not None and rng.random() < 0.5:
        # the bias in registers instead, as TileLang's epilogues keep it: a column vector
        # laid out as the accumulator's columns, each thread holding the ones it adds
        # (drawn last, so that a seed's other choices stay what they were before)
        vec["scope"] = "fragment"
    return p


WALK_SHARED_BYTES = 220 * 1024  # an sm_90a block's 227 KB, less room for mbarriers and starts


def _shared_bytes(p: Program, copies: dict) -> int:
    """The bytes of `p`'s shared tiles, `copies[name]` of a tile that has slots."""
    from ..ir.dtypes import itemsize

    return sum(math.prod(p.buffer_shape(b["kind"])) * itemsize(b["dtype"]) *
               copies.get(b["name"], 1) for b in p.buffers if b["scope"] == "shared")


def _gemm_operands(g: _Gen, dtype: str, slotted: bool = False) -> dict:
    """A GEMM step's tensors and tiles: A and B (each transposed with probability 0.3),
    their shared tiles (`slotted`: with a leading slot dimension) and the accumulator."""
    ta, tb = g.rng.random() < 0.3, g.rng.random() < 0.3
    a_name = g.tensor("at" if ta else "a", dtype)
    b_name = g.tensor("bt" if tb else "b", dtype)
    slot = "s" if slotted else ""
    a = g.buffer("shared", slot + ("km" if ta else "mk"), dtype)
    b = g.buffer("shared", slot + ("nk" if tb else "kn"), dtype)
    c = g.buffer("fragment", "mn", "float32")
    return {"dst": c["name"], "A": a_name, "B": b_name, "a": a["name"], "b": b["name"],
            "transpose_A": ta, "transpose_B": tb}


def _roles_program(rng, seed, index) -> Program:
    """A GEMM with warp roles by hand (`_emit_wsgemm`): one producer warpgroup, a consumer
    role of one or two warpgroups, either written first in the block's numbering."""
    dtype = rng.choice(("float16", "bfloat16"))
    consumers = rng.choice((1, 1, 2))
    producer_first = rng.random() < 0.5
    producer = 0 if producer_first else consumers
    consumer = list(range(1, consumers + 1)) if producer_first else list(range(consumers))
    warps = 4 * consumers
    while True:
        bm, bn = rng.choice((64, 128)), rng.choice((64, 128, 256))
        policies = [pol for pol in POLICIES if _splits(pol, bm, bn, warps)]
        if policies and bm * bn <= 128 * 128 * consumers:  # <= 128 accumulators a thread
            break
    bk = rng.choice((32, 64))

    def size(block):  # rows a multiple of 16 bytes apart, so that TMA may copy them
        return -(-_sizes(rng, block) // 8) * 8

    p = Program(seed, index, M=size(bm), N=size(bn), K=size(bk), bm=bm, bn=bn, bk=bk,
                threads=128 * (consumers + 1), family="roles", slots=rng.randint(1, 4))
    g = _Gen(rng, p, dtype)
    operands = _gemm_operands(g, dtype, slotted=True)
    out = g.tensor("mn", rng.choice(("float32", dtype)), output=True)
    step = {"op": "wsgemm", **operands, "out": out, "policy": rng.choice(policies),
            "producer": producer, "consumer": consumer, "clear_accum": rng.random() < 0.2,
            "scale": rng.choice((None, 0.5, -2.0))}
    if not step["transpose_A"] and rng.random() < 0.2:  # A from the consumer's registers
        step["a_frag"] = g.buffer("fragment", "mk", dtype)["name"]
    # drawn last, so that a seed's other choices stay what they were before these came in
    step["whole_loops"] = rng.random() < 0.5  # each role its own loop over every K tile
    step["consumer_first"] = step["whole_loops"] and rng.random() < 0.5
    step["thread_copies"] = rng.random() < 0.3  # the producer's threads copy (T.copy)
    if step["whole_loops"] and consumers == 2 and not step.get("a_frag") and \
            _splits(step["policy"], bm, bn, 4) and bm * bn <= 128 * 128 and rng.random() < 0.5:
        # two consumer roles, a warpgroup each, both taking every slot (as DeepSeek's sparse
        # MLA kernels): each multiplies the whole tile into its own accumulator and output
        step.update(two_consumers=True, dst2=g.buffer("fragment", "mn", "float32")["name"],
                    out2=g.tensor("mn", g.p.tensor(out)["dtype"], output=True))
    g.step(**step)
    return p


def _attention_program(rng, seed, index) -> Program:
    """FlashAttention's forward loop (`_emit_attn`): two T.gemm with an online softmax
    between them, the loop that a warp-specialized split with register moves and
    warpgroup turns was built for. One warpgroup on 64-row blocks, or two on 128 rows;
    head dim 64 or 128 (a whole K tile); causal (a block-dependent trip count) or not;
    query and key counts with tails, now and then two more query blocks (so that blocks
    past the first two may pair in clusters, pipeline_loops.Roles.pair); 1-3 stages, as
    many as shared memory holds; now and then Q kept in registers (the same registers as
    operand A in every iteration: ptxas once gave them to P, passes/keep_wgmma_operands.py)."""
    dtype = rng.choice(("float16", "bfloat16"))
    threads = rng.choice((128, 256, 256))  # two consumer warpgroups: the turns
    bm = 64 if threads == 128 else 128
    bn = rng.choice((64, 128)) if threads == 256 else 64  # S: at most 64 registers a thread
    d = rng.choice((64, 128))
    causal = rng.random() < 0.4
    M = _sizes(rng, bm)  # noqa: N806
    N = M if causal else _sizes(rng, bn)  # noqa: N806 - causal: a key per query row
    stages = rng.choice((1, 2, 2, 3, 3))  # pipelined mostly: the split needs it
    p = Program(seed, index, M=M, N=N, K=d, bm=bm, bn=bn, bk=d, threads=threads,
                family="attention")
    g = _Gen(rng, p, dtype)
    q, k, v = g.tensor("a", dtype), g.tensor("bt", dtype), g.tensor("bt", dtype)
    out = g.tensor("a", rng.choice(("float32", dtype)), output=True)
    tiles = [g.buffer("shared", "mk", dtype), g.buffer("shared", "nk", dtype),
             g.buffer("shared", "nk", dtype), g.buffer("fragment", "mn", "float32"),
             g.buffer("fragment", "mn", dtype), g.buffer("fragment", "mk", "float32")] + \
        [g.buffer("fragment", "m", "float32") for _ in range(5)]
    while stages > 1 and _shared_bytes(p, {tiles[1]["name"]: stages,
                                           tiles[2]["name"]: stages}) > WALK_SHARED_BYTES:
        stages -= 1  # as many slots of K and V as shared memory holds beside Q
    # drawn last, so that the rest of each seed's programs stays as it was
    in_registers = {"q_frag": g.buffer("fragment", "mk", dtype)["name"]} \
        if rng.random() < 0.3 else {}
    if rng.random() < 0.25:  # two more query blocks: blocks paired in clusters past the first
        p.M += 2 * bm
        if causal:  # a key per query row
            p.N = p.M
    g.step(op="attn", Q=q, K=k, V=v, O=out, tiles=[t["name"] for t in tiles],
           causal=causal, stages=stages, scale=1 / math.sqrt(d), **in_registers)
    return p


def _splits(policy: str, m: int, n: int, warps: int) -> bool:
    from ..ops.gemm import warp_grid

    try:
        warp_grid(policy, m, n, warps)
    except Exception:  # noqa: BLE001 - no split of this tile among these warps
        return False
    return True
