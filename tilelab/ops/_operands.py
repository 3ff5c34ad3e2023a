"""Turning what users pass to tile primitives into regions, or explaining why not."""

from __future__ import annotations

from tvm import tirx

from ..errors import TileLabTypeError
from ..ir.tile_ops import Region, _const_int, is_buffer, is_load


def operand(value, primitive: str) -> Region | tirx.BufferLoad:
    if isinstance(value, Region):
        return value
    if is_buffer(value):
        return Region.whole(value)
    if is_load(value):
        return value  # a start point; extents come from the other operand
    raise TileLabTypeError(
        f"T.{primitive} expects buffers or buffer regions like A[i, 0] or A[0:64, k:k + 32], "
        f"got {type(value).__name__}")


def point_to_region(point: tirx.BufferLoad, extents: list) -> Region:
    buffer = point.source
    rank = len(buffer.shape)
    extents = [e for e in extents if _const_int(e) != 1] if len(extents) > rank else list(extents)
    if len(extents) > rank:
        raise TileLabTypeError(f"a {len(extents)}-d tile does not fit in {buffer.name}, which "
                               f"has {rank} dimension(s)")
    full = [1] * (rank - len(extents)) + list(extents)
    return Region(buffer, tuple(point.indices), tuple(full))


def _describe(region: Region) -> str:
    dims = ", ".join(str(e) for e in region.extents)
    return f"{region.buffer.name} ({dims})"


def resolve_pair(src, dst, primitive: str) -> tuple[Region, Region]:
    """Turn copy operands into two regions of matching extents, or explain why not."""
    src, dst = operand(src, primitive), operand(dst, primitive)
    if is_load(src) and is_load(dst):
        raise TileLabTypeError(f"T.{primitive}: at least one side must be a whole buffer or a "
                               "region with extents")
    if is_load(src):
        src = point_to_region(src, list(dst.extents))
    if is_load(dst):
        dst = point_to_region(dst, list(src.extents))
    a, b = src.squeezed_extents(), dst.squeezed_extents()
    same = len(a) == len(b) and all(
        _const_int(x) is None or _const_int(y) is None or _const_int(x) == _const_int(y)
        for x, y in zip(a, b))
    if not same:
        raise TileLabTypeError(
            f"T.{primitive}: source {_describe(src)} and destination {_describe(dst)} have "
            "different extents",
            hint="the two sides must hold the same number of elements along each dimension")
    return src, dst


def _level(region: Region) -> int:
    """How far from the threads a region's memory is: registers 0, shared 1, global 2."""
    scope = region.scope
    return 2 if scope == "global" else 1 if scope.startswith("shared") else 0


def grown_source(src, dst) -> Region | None:
    """TileLang's rule for a copy between two regions of different sizes: the copy covers
    the region nearer the threads (registers, then shared memory), and the other region
    grows from its start to the same size. tilelab follows it where the grown region is
    the source: a global tensor is read past the region named (zeros past the tensor's
    edge); a tile must hold the grown region. A copy never writes past the region it
    names, and a region larger than the one nearer the threads is not cut down (TileLang
    would copy part of it): those stay errors. Returns the grown source, or None where
    the rule does not apply (the regions then match, or are refused as they stand)."""
    if not (isinstance(src, Region) and isinstance(dst, Region)) or \
            _level(src) <= _level(dst):
        return None
    have = [_const_int(e) for e in src.squeezed_extents()]
    want = [_const_int(e) for e in dst.squeezed_extents()]
    if len(have) != len(want) or None in have + want or have == want or \
            any(h > w for h, w in zip(have, want)):
        return None
    wanted = iter(want)
    extents = tuple(next(wanted) if _const_int(e) != 1 else e for e in src.extents)
    if src.scope != "global" and any(
            _const_int(st) is None or _const_int(st) + int(_const_int(e)) > int(_const_int(n))
            for st, e, n in zip(src.starts, extents, src.buffer.shape)):
        return None  # past the end of a tile: refused as different extents
    return Region(src.buffer, src.starts, extents)


def tile_2d(value, primitive) -> tuple[Region, tuple]:
    """A 2-d tile operand: a whole 2-d buffer, one 2-d tile of a buffer with more
    dimensions (`A_s[stage, :, :]`: leading indices of extent 1), or a rectangle of a
    shared tile's last two dimensions (`Q_s[:, 0:512]`, `K_s[stage, :, 64:128]`) at
    constant offsets. A fragment is taken whole: its elements are spread over the
    threads by the layout of the whole tile. Returns the region and its (rows, columns)."""
    if is_buffer(value):
        return Region.whole(value), whole_2d(value, primitive)
    region = value if isinstance(value, Region) else None
    if region is None:
        raise TileLabTypeError(f"T.{primitive} takes tiles (buffers, or one 2-d tile of a "
                               f"buffer such as A_s[k % 2, :, :]), got {type(value).__name__}")
    shape = [_const_int(e) for e in region.buffer.shape]
    starts = [_const_int(s) for s in region.starts[-2:]]
    tile = tuple(int(_const_int(e) or 0) for e in region.extents[-2:])
    whole = list(tile) == shape[-2:] and starts == [0, 0]
    inside = None not in starts and all(
        0 < e and st + e <= int(n or 0) for st, e, n in zip(starts, tile, shape[-2:]))
    shared = region.scope.startswith("shared")
    if len(shape) < 2 or any(_const_int(e) != 1 for e in region.extents[:-2]) or \
            not (whole or shared and inside):
        what = "a fragment is taken whole" if not shared else \
            "a part of a shared tile must lie inside it, at constant offsets"
        raise TileLabTypeError(
            f"T.{primitive} takes 2-d tiles and, of shared tiles, rectangles of their last "
            f"two dimensions; this is a {'x'.join(str(e) for e in region.extents)} part of "
            f"{region.buffer.name} ({'x'.join(str(e) for e in shape)}): {what}",
            hint="index the leading dimensions (A_s[k % 2, :, :]), slice a shared tile's "
                 "rows or columns by constants (Q_s[:, 0:64]), or copy the part into a "
                 "tile of its own")
    return region, tile


def whole_2d(buffer, primitive):
    if not is_buffer(buffer):
        raise TileLabTypeError(f"T.{primitive} takes whole buffers (tiles), got "
                               f"{type(buffer).__name__}")
    shape = tuple(int(_const_int(e)) for e in buffer.shape)
    if len(shape) != 2:
        raise TileLabTypeError(f"T.{primitive} needs 2-d tiles; {buffer.name} has shape {shape}")
    return shape


def whole_shape(buffer, primitive):
    if not is_buffer(buffer):
        raise TileLabTypeError(f"T.{primitive} takes whole buffers, got {type(buffer).__name__}")
    return tuple(int(_const_int(e)) for e in buffer.shape)
