"""Shared-memory bank conflicts, computed from a tile's layout and the kernel's accesses.

Shared memory is 32 banks of 4 bytes: byte address `a` lives in bank
`(a // 4) % 32`. A warp instruction is served in *phases*: all 32 lanes at
once when each lane moves at most 4 bytes, 16 lanes for 8 bytes, 8 lanes (a
quarter warp) for 16 bytes - one phase moves at most 128 bytes. Inside a
phase, lanes that touch *different* 4-byte words of the *same* bank are served
one after another; lanes touching the same word share it (a broadcast). The
**conflict degree** of a phase is the largest number of different words any
one bank must serve. For 16-byte accesses this reads: a phase is
conflict-free when its 8 addresses fall in 8 different 16-byte bank groups
(banks 4g..4g+3), and its degree is the largest number of different addresses
that share a group. An instruction's degree is the largest over its phases;
1 means conflict-free, 4 means that phase takes four times as long.

Which addresses a warp instruction touches follows from how tilelab lowers
tile ops (tilelab/ops/copy.py and gemm.py). The compiler records, for every
copy through shared memory, the vector width and instruction its lowering
uses, and for every GEMM its instruction (`trace.instructions`, written when
layouts are inferred: a CPU compile records what the CUDA lowering would do);
this module replays those records, it does not decide them again:

* a copy between global and shared memory is cooperative: thread t moves the
  t-th 16-byte chunk of the tile in row-major order, so one warp instruction
  covers 32 consecutive chunks;
* a copy between a fragment and shared memory is per thread: each thread
  moves its own registers, a few consecutive ones at a time, so instruction
  `g` of a warp has lane l touch the element of register group g of thread l;
* on sm_90 a fragment that holds 8x8 matrices as MMA accumulators do is stored with
  `stmatrix.x4`: lane l gives the address of row l % 8 of matrix l // 8 (16 bytes);
  a copy of a part of a fragment into a tile of the part's size (a GEMM's sums stored in
  parts of rows or of columns) is replayed for one part, in the tile's coordinates;
* `T.gemm` reads its shared operands with `ldmatrix`, where every lane gives
  the address of one 16-byte row piece of an 8x8 matrix: `.x4` for A (lane l
  addresses row l % 16, chunk l // 16 of a 16x16 tile), `.x2.trans` for a KxN
  B (row l % 16 of a 16x8 tile), `.x2` for an NxK B (row l % 8, chunk
  (l // 8) % 2).

Every access is replayed on the tile twice, row-major and swizzled (16-byte
chunks of each row XOR-permuted with the row number): the classic case is an
fp16 tile 32 elements wide read down a column by ldmatrix - rows are 64 bytes
apart, so eight consecutive rows hit only two bank groups, 4 rows each: a
4-way conflict, which the swizzle removes.
"""

from __future__ import annotations

import numpy as np

from ..ir.layout import Layout
from .layouts import bank_color, buffer_info, dtype_bits, grid_shape, layout_tables, thread_color
from .scene import Scene, escape
from .view import View, trace_field


def lanes_per_phase(lane_bytes: int) -> int:
    """How many lanes one phase serves: 128 bytes' worth, at most the whole warp."""
    return min(32, 128 // max(lane_bytes, 4))


def conflict_degree(addresses, lane_bytes: int) -> int:
    """Degree of one warp instruction: `addresses[lane]` is a byte address or None (idle lane)."""
    per_phase = lanes_per_phase(lane_bytes)
    degree = 1
    for start in range(0, len(addresses), per_phase):
        words_of_bank: dict[int, set] = {}
        for address in addresses[start:start + per_phase]:
            if address is None:
                continue
            for word in range(address // 4, (address + max(lane_bytes, 1) - 1) // 4 + 1):
                words_of_bank.setdefault(word % 32, set()).add(word)
        if words_of_bank:
            degree = max(degree, max(len(words) for words in words_of_bank.values()))
    return degree


def _offsets_2d(layout_json: dict, rows: int, cols: int, bits: int) -> np.ndarray:
    """Element offsets of a memory layout (or its JSON) as a rows x cols table."""
    tables = layout_tables(layout_json, bits)
    return np.asarray(tables["offsets"]).reshape(rows, cols)


def byte_addresses(layout_json: dict, access: dict) -> list[list]:
    """For each instruction of `access`, each lane's byte address on the layout (None: idle)."""
    shape = layout_json["shape"]
    rows, cols = grid_shape(shape)
    size = access["element_bytes"]
    offsets = _offsets_2d(layout_json, rows, cols, layout_json.get("dtype_bits") or size * 8)
    return [[None if lane is None else int(offsets[lane[0], lane[1]]) * size
             for lane in instruction] for instruction in access["instructions"]]


def bank_conflicts(layout_json: dict, access: dict) -> list[int]:
    """Conflict degree of every warp instruction of `access` on a shared layout.

    `layout_json` is a memory layout's JSON (`Layout.to_json()`, an entry of
    `trace.layouts`, or the `layout` of a layout payload). `access` has
    `lane_bytes` (bytes each lane moves), `element_bytes`, and `instructions`:
    per warp instruction, 32 entries of `[row, col]` (the first element the
    lane touches, in the tile's logical rows and columns) or None.
    """
    return [conflict_degree(addresses, access["lane_bytes"])
            for addresses in byte_addresses(layout_json, access)]


# ---------------------------------------------------------------- accesses of a kernel


def _cooperative(name, rows, cols, size, record) -> dict:
    """Thread t moves chunk t (v elements) of the tile in row-major order; 32 chunks a warp."""
    v = record["vector"]
    chunks = rows * cols // v
    instructions = [[list(divmod(q * v, cols)) if q < chunks else None
                     for q in range(32 * w, 32 * w + 32)] for w in range(-(-chunks // 32))]
    return {"name": name, "instruction": record["instruction"] + " (cooperative copy)",
            "lane_bytes": v * size, "element_bytes": size, "instructions": instructions}


def _held(rows, cols, fragment, record) -> dict | None:
    """(thread, register) -> (row, col, copy) of the shared tile that the element reaches: the
    fragment's own coordinates where it is the tile's size, else those less the start of the
    copied region (`record["region"]`, the fragment's side; a start that is not a constant,
    `c[part * 64:(part + 1) * 64]`, is taken as 0 - each part meets the tile alike)."""
    shape = list(fragment.get("shape") or [])
    thread = np.asarray(fragment["thread"])
    region = record.get("region")
    if thread[0].size == rows * cols:
        starts, extents = [0, 0], [rows, cols]
        shape = [rows, cols]
    elif len(shape) == 2 and region and [e for _, e in region] == [rows, cols]:
        starts, extents = [s or 0 for s, _ in region], [rows, cols]
    else:
        return None
    thread = thread.reshape(-1, *shape)
    local = np.asarray(fragment["local"]).reshape(thread.shape)
    held = {}
    for rep, r, c in np.ndindex(*thread.shape):
        r0, c0 = r - starts[0], c - starts[1]
        if 0 <= r0 < extents[0] and 0 <= c0 < extents[1]:
            held[(int(thread[rep, r, c]), int(local[rep, r, c]))] = (r0, c0, rep)
    return held


def _fragment_copy(name, rows, cols, size, fragment, record, writing) -> dict | None:
    """Each thread moves its own registers, v consecutive ones at a time."""
    held = _held(rows, cols, fragment, record)
    if held is None:
        return None
    threads, registers = fragment["threads"], fragment["local_size"]
    v = record["vector"]
    instructions = []
    for reg in range(0, registers, v):
        for warp in range(threads // 32):
            lanes = []
            for lane in range(32):
                e = held.get((warp * 32 + lane, reg))
                # only the first copy of a replicated element is written back
                lanes.append(None if e is None or (writing and e[2] != 0) else [e[0], e[1]])
            if any(lane is not None for lane in lanes):
                instructions.append(lanes)
    return {"name": name, "instruction": f"{record['instruction']} (per thread, "
            f"{'from' if writing else 'to'} registers)", "lane_bytes": v * size,
            "element_bytes": size, "instructions": instructions}


def _stmatrix(name, rows, cols, size, fragment, record) -> dict | None:
    """stmatrix.x4: per warp and group of eight registers, lane l addresses row l % 8 of
    matrix l // 8 - the row whose first elements lane 4 (l % 8) holds in pair l // 8."""
    held = _held(rows, cols, fragment, record)
    if held is None:
        return None
    instructions = []
    for reg in record["groups"]:
        for warp in range(fragment["threads"] // 32):
            lanes = [held.get((warp * 32 + lane % 8 * 4, reg + lane // 8 * 2))
                     for lane in range(32)]
            if all(lane is not None for lane in lanes):  # (a group of the part the replay shows)
                instructions.append([[r, c] for r, c, _ in lanes])
    return {"name": name, "instruction": f"{record['instruction']} (per warp, from registers)",
            "lane_bytes": 16, "element_bytes": size, "instructions": instructions}


def _ldmatrix(name, role, size, cfg, accumulator, k) -> dict:
    """The ldmatrix instructions T.gemm issues on its A or B tile, for every warp and k-step."""
    wm, wn = accumulator["warps"]
    tile_m, tile_n = accumulator["m"] // wm, accumulator["n"] // wn
    transposed = bool(cfg.get("transpose_A" if role == "A" else "transpose_B"))
    instructions = []
    for warp in range(wm * wn):
        warp_m, warp_n = divmod(warp, wn)
        for kk in range(k // 16):
            if role == "A":
                for mi in range(tile_m // 16):
                    m0 = warp_m * tile_m + mi * 16
                    if not transposed:  # A is MxK
                        lanes = [[m0 + lane % 16, kk * 16 + lane // 16 * 8] for lane in range(32)]
                    else:  # A is KxM
                        lanes = [[kk * 16 + lane % 8 + lane // 16 * 8, m0 + lane // 8 % 2 * 8]
                                 for lane in range(32)]
                    instructions.append(lanes)
            else:
                for ni in range(tile_n // 8):
                    n0 = warp_n * tile_n + ni * 8
                    if not transposed:  # B is KxN; lanes 16..31 give no address for .x2
                        lanes = [[kk * 16 + lane % 16, n0] for lane in range(16)]
                    else:  # B is NxK
                        lanes = [[n0 + lane % 8, kk * 16 + lane // 8 % 2 * 8]
                                 for lane in range(16)]
                    instructions.append(lanes + [None] * 16)
    if role == "A":
        instruction = "ldmatrix.x4" + (".trans" if transposed else "")
    else:
        instruction = "ldmatrix.x2" + ("" if transposed else ".trans")
    return {"name": name, "instruction": f"{instruction} (16 B per lane)", "lane_bytes": 16,
            "element_bytes": size, "instructions": instructions}


def shared_accesses(trace, buffer: str) -> list[dict]:
    """The warp-level accesses of the lowered kernel to shared tile `buffer` (see module
    doc), as the compiler recorded them (`trace.instructions`): each copy's vector width
    and instruction, each GEMM's instruction."""
    program = trace_field(trace, "program") or {}
    layouts = trace_field(trace, "layouts") or {}
    records = trace_field(trace, "instructions") or []
    info = buffer_info(trace, buffer)
    rows, cols = grid_shape(info["shape"])
    size = dtype_bits(info["dtype"]) // 8
    accesses = []
    for op in program.get("ops", []):
        loc = str(op.get("config", {}).get("loc", ""))
        if op["op"] == "copy" and op["reads"] and op["writes"]:
            src, dst = op["reads"][0], op["writes"][0]
            if buffer not in (src, dst) or src == dst:
                continue
            record = _record(records, "copy", loc, src=src, dst=dst)
            if record is None or record["kind"] == "tma":
                continue  # TMA writes the tile itself: no thread's store touches it
            writing = dst == buffer
            other = buffer_info(trace, src if writing else dst)
            name = f"copy({src}, {dst})"
            if record["kind"] in ("registers", "stmatrix"):
                fragment = layouts.get(other["name"])
                if fragment and "thread" in fragment:
                    access = _stmatrix(name, rows, cols, size, fragment, record) \
                        if record["kind"] == "stmatrix" else \
                        _fragment_copy(name, rows, cols, size, fragment, record, writing)
                    if access:
                        accesses.append(access)
            else:
                accesses.append(_cooperative(name, rows, cols, size, record))
        elif op["op"] == "gemm" and len(op["reads"]) >= 2 and op["writes"]:
            record = _record(records, "gemm", loc, a=op["reads"][0], b=op["reads"][1])
            if record is None or record["instruction"] != "mma.sync":
                continue  # wgmma reads shared memory itself; fma reads no 16-byte rows
            a, b, c = op["reads"][0], op["reads"][1], op["writes"][0]
            accumulator = (layouts.get(c) or {}).get("recipe", {})
            a_info = buffer_info(trace, a)
            a_shape = grid_shape(a_info["shape"])
            k = a_shape[0] if op["config"].get("transpose_A") else a_shape[1]
            for role, operand in (("A", a), ("B", b)):
                if operand == buffer:
                    accesses.append(_ldmatrix(f"gemm {role} operand ({op['reads'][0]} @ "
                                              f"{op['reads'][1]})", role, size, op["config"],
                                              accumulator, k))
    return accesses


def _record(records: list, op: str, loc: str, **names) -> dict | None:
    """The compiler's record of an op, by its buffers (and its line, where known: a copy a
    software pipeline issued again keeps its buffers)."""
    matching = [r for r in records if r.get("op") == op and
                all(r.get(k) == v for k, v in names.items())]
    at_line = [r for r in matching if loc and str(r.get("loc", "")) == loc]
    return (at_line or matching or [None])[0]


# ---------------------------------------------------------------- the view

NO_ACCESSES = ("no thread reads or writes it with its own loads and stores (TMA copies and "
               "warpgroup MMA move shared memory without them)")


def bank_conflict_view(trace, buffer: str) -> BankConflictView:
    """Bank conflicts of every access to shared tile `buffer`, row-major vs swizzled."""
    from ..errors import TileLabError

    info = buffer_info(trace, buffer)
    if not info["scope"].startswith("shared") or not all(isinstance(s, int)
                                                        for s in info["shape"]):
        shared = [b["name"] for b in (trace_field(trace, "program") or {}).get("buffers", [])
                  if b["scope"].startswith("shared")]
        raise TileLabError(f"{buffer!r} is not a shared-memory tile of this kernel",
                           hint=f"shared tiles: {', '.join(shared) or 'none'}")
    chosen = (trace_field(trace, "layouts") or {}).get(buffer)
    return BankConflictView(trace_field(trace, "kernel", ""), info, chosen,
                            shared_accesses(trace, buffer))


class BankConflictView(View):
    """Payload `{buffer, accesses}`: each access on the swizzled layout and on row-major.

    A tile with a layout of the user's own (`T.annotate_layout`) is scored on
    that layout too, in the table and pictures (the payload keeps the pair).
    """

    view = "bank_conflicts"

    def __init__(self, kernel: str, info: dict, chosen: dict | None, accesses: list[dict]):
        super().__init__(kernel)
        self.info, self.accesses = info, accesses
        self.chosen = (chosen or {}).get("kind", "row_major")
        rows, cols = grid_shape(info["shape"])
        bits = dtype_bits(info["dtype"])
        self.layouts = {"row-major": {"kind": "row_major", "shape": [rows, cols],
                                      "dtype_bits": bits},
                        "swizzled": dict(Layout.swizzled((rows, cols), bits).to_json(),
                                         dtype_bits=bits)}
        if self.chosen not in ("row_major", "swizzled"):
            self.layouts["this kernel's"] = dict(chosen, dtype_bits=bits)
        self.degrees = {(i, name): bank_conflicts(layout, access)
                        for i, access in enumerate(accesses)
                        for name, layout in self.layouts.items()}

    def payload(self) -> dict:
        rows = []
        for i, access in enumerate(self.accesses):
            for swizzled in (True, False):
                degrees = self.degrees[(i, "swizzled" if swizzled else "row-major")]
                rows.append({"name": access["name"], "instruction": access["instruction"],
                             "swizzled": swizzled, "conflict_degree_per_instruction": degrees,
                             "max_degree": max(degrees, default=1)})
        return {"buffer": self.info["name"], "accesses": rows}

    def title(self) -> str:
        layout = {"row_major": "row-major", "swizzled": "swizzled"}.get(
            self.chosen, f"a {self.chosen} layout")
        return (f"Bank conflicts of {self.info['name']}: {self.info['dtype']} "
                f"{self.info['shape']} in shared memory (the kernel uses {layout})")

    def text(self) -> str:
        lines = [f"{self.kernel + ': ' if self.kernel else ''}{self.title()}"]
        for i, access in enumerate(self.accesses):
            scores = ", ".join(f"{name} {_words(max(self.degrees[(i, name)], default=1))}"
                               for name in self.layouts)
            lines.append(f"  {access['name']}, {access['instruction']}: {scores}")
        if not self.accesses:
            lines.append(f"  {NO_ACCESSES}")
        return "\n".join(lines)

    def body_html(self) -> str:
        head = ("<tr><th>access</th><th>instruction</th><th>warp instructions</th>"
                + "".join(f"<th>{escape(name)}</th>" for name in self.layouts) + "</tr>")
        body = []
        for i, access in enumerate(self.accesses):
            cells = []
            for name in self.layouts:
                degrees = self.degrees[(i, name)]
                worst = max(degrees, default=1)
                bad = sum(d > 1 for d in degrees)
                css = "tl-bad" if worst > 1 else "tl-good"
                cells.append(f'<td><span class="{css}">{escape(_words(worst))}</span>'
                             f"{f' in {bad} of {len(degrees)}' if bad else ''}</td>")
            body.append(f"<tr><td>{escape(access['name'])}</td>"
                        f"<td>{escape(access['instruction'])}</td>"
                        f"<td>{len(access['instructions'])}</td>{''.join(cells)}</tr>")
        table = (f'<table class="tl-table">{head}{"".join(body)}</table>' if body else
                 f'<p class="tl-note">{escape(NO_ACCESSES[0].upper() + NO_ACCESSES[1:])}.</p>')
        note = ('<p class="tl-note">32 banks of 4 bytes. A warp instruction is served 128 '
                "bytes at a time: 8 lanes per phase for 16-byte accesses, 16 for 8 bytes, 32 "
                "for 4 bytes or less. The degree is the largest number of different 4-byte "
                "words one bank must serve in a phase (1 = conflict-free; for 16-byte accesses: "
                "different addresses in one 16-byte bank group). The pictures show the worst "
                "instruction of each access, phase by phase: one column per bank group, "
                "lanes that wait for each other stacked.</p>")
        return f'{note}{table}<div class="tl-scroll">{self.scene(title=False).to_svg()}</div>'

    # -- the picture

    def scene(self, title: bool = True) -> Scene:
        scene = Scene(0, 0)
        y = 4.0
        if title:
            scene.text(4, 12, self.title(), size=13, bold=True)
            y = 28.0
        y, width = self._chunk_maps(scene, y)
        for i, access in enumerate(self.accesses):
            degrees = self.degrees[(i, "row-major")]
            worst = int(np.argmax(degrees)) if degrees else 0
            scene.text(4, y + 8, f"{access['name']}: {access['instruction']} - "
                       f"instruction {worst} of {len(degrees)}", size=12, bold=True)
            y += 22
            x, height = 4.0, 0.0
            for name, layout in self.layouts.items():
                addresses = byte_addresses(layout, access)[worst]
                w, h = _phase_panel(scene, x, y, addresses, access, worst, name)
                x += w + 24
                height = max(height, h)
            width = max(width, x)
            y += height + 14
        scene.width, scene.height = max(width, 480), y + 4
        return scene

    def _chunk_maps(self, scene: Scene, y: float):
        """The first rows of the tile, one cell per 16-byte chunk, colored by bank group."""
        rows, cols = grid_shape(self.info["shape"])
        size = dtype_bits(self.info["dtype"]) // 8
        per_chunk = 16 // size if size <= 16 else 1
        if per_chunk < 1 or cols % per_chunk:
            return y, 0
        chunks, shown = cols // per_chunk, min(rows, 16)
        cell = 30 if chunks <= 8 else 22
        scene.text(4, y + 8, "Bank group (4 banks = 16 bytes) of each 16-byte chunk, first "
                   f"{shown} rows", size=12, bold=True)
        y += 28
        x = 30.0
        for k, (name, layout) in enumerate(self.layouts.items()):
            offsets = _offsets_2d(layout, rows, cols, size * 8)
            scene.text(x, y, name, size=11, bold=True)
            for r in range(shown):
                if k == 0:
                    scene.text(x - 4, y + 14 + (r + 0.5) * 18, str(r), size=9, anchor="end",
                               color="#555555")
                for c in range(chunks):
                    group = int(offsets[r, c * per_chunk]) * size // 16 % 8
                    scene.rect(x + c * cell, y + 14 + r * 18, cell, 18, bank_color(group * 4),
                               stroke="#ffffff", stroke_width=1, group="chunks")
                    scene.text(x + (c + 0.5) * cell, y + 14 + (r + 0.5) * 18, str(group),
                               size=9, anchor="middle", group="chunk-labels")
            x += max(chunks * cell, 110) + 40
        scene.text(30, y + 14 + shown * 18 + 10, "columns: the tile's 16-byte chunks in "
                   "logical order; number: the bank group the chunk is stored in",
                   size=10, color="#444444")
        return y + 14 + shown * 18 + 28, x


def _words(degree: int) -> str:
    return "conflict-free" if degree <= 1 else f"{degree}-way"


def _phase_panel(scene: Scene, x0, y0, addresses, access, index, label):
    """One instruction's phases: columns = bank slots, lanes with different words stacked."""
    lane_bytes = access["lane_bytes"]
    unit = max(lane_bytes, 4)
    columns = 128 // unit
    per_phase = lanes_per_phase(lane_bytes)
    box_w, box_h = (40, 26) if columns <= 16 else (26, 18)
    lanes = access["instructions"][index]
    degree = conflict_degree(addresses, lane_bytes)
    scene.text(x0, y0 + 6, f"{label}: {_words(degree)}", size=11, bold=True,
               color="#b52b27" if degree > 1 else "#2b7a2b")
    y = y0 + 18
    slot = "bank group" if unit == 16 else ("bank pair" if unit == 8 else "bank")
    for c in range(columns):
        scene.text(x0 + 58 + (c + 0.5) * box_w, y + 6, str(c), size=9, anchor="middle",
                   color="#555555")
    scene.text(x0, y + 6, slot, size=9, color="#555555")
    y += 14
    for start in range(0, 32, per_phase):
        phase = [(lane, addresses[lane]) for lane in range(start, min(start + per_phase, 32))
                 if addresses[lane] is not None]
        if not phase:
            continue
        stacks: dict[int, list] = {}  # column -> distinct addresses, each with its lanes
        for lane, address in phase:
            stack = stacks.setdefault(address // unit % columns, [])
            for entry in stack:
                if entry[0] == address:
                    entry[1].append(lane)
                    break
            else:
                stack.append((address, [lane]))
        depth = max(len(s) for s in stacks.values())
        scene.text(x0, y + box_h / 2, f"lanes {start}-{start + per_phase - 1}", size=9)
        for c, stack in stacks.items():
            for level, (_, sharing) in enumerate(stack):
                r, col = lanes[sharing[0]]
                scene.rect(x0 + 58 + c * box_w, y + level * box_h, box_w, box_h,
                           thread_color(sharing[0]), stroke="#b52b27" if level else "#ffffff",
                           stroke_width=2 if level else 1, group="lanes")
                scene.text(x0 + 58 + (c + 0.5) * box_w, y + level * box_h + box_h * 0.32,
                           "L" + ",".join(str(s) for s in sharing[:2]), size=8,
                           anchor="middle")
                if box_h > 20:
                    scene.text(x0 + 58 + (c + 0.5) * box_w, y + level * box_h + box_h * 0.72,
                               f"{r},{col}", size=7.5, anchor="middle", color="#333333")
        y += depth * box_h + 6
    return 58 + columns * box_w, y - y0

