"""Warp roles: `with T.ws(k)` (or a branch of `if tx < 128:`) becomes its threads' own code.

A program may split its block by hand, as TileLang's warp-specialized kernels do:
warpgroup 1 copies tiles, warpgroup 0 multiplies, and the two hand tiles over
through mbarriers (ops/barrier.py). Until this pass, a role is a mark around its
statements (`tilelab.warp_role`, threads [first, end)), and its tile ops have been
lowered for the role's threads numbered from 0 (`rtx = threadIdx.x - first`;
passes/lower_tile_ops_to_threads.py). TVM's ThreadSync has then placed its
barriers as if every thread ran every statement, which it cannot do inside an `if`.

Here, after ThreadSync, each mark becomes what it stands for:

    if first <= threadIdx.x < end:        (the other threads skip the role)
        rtx = threadIdx.x - first
        ...                               every __syncthreads of the role's body is
                                          now `bar.sync 2 + i, end - first`: a
                                          barrier of the role's threads only (i
                                          numbers the kernel's thread ranges)

A barrier between statements outside the roles stays a barrier of the whole block
(every thread reaches it). Named barrier 0 is __syncthreads and 1 the automatic
producer/consumer split's (passes/specialize_warps.py); roles take 2 and up.

A barrier ThreadSync put between two roles of different threads goes: the roles run
side by side, and what one hands the other goes through the program's mbarriers. Kept,
it would deadlock a producer that runs its whole loop: the producer waits for a slot
the consumer frees, while the consumer waits at the barrier for the producer to finish.
(Index arithmetic that the roles after it share may stand between the barrier and them:
TVM binds it once, before the roles.)
"""

from __future__ import annotations

from tvm import tirx

from ..errors import TileLabCompileError
from ..ir.keys import role_threads
from ..ir.tile_ops import loaded
from ..ir.visit import keep_user_errors, rewrite, walk
from ..ops._lowering import extern, is_sync, narrow_barriers

FIRST_ROLE_BARRIER = 2  # named barriers 0 (__syncthreads) and 1 (specialize_warps) are taken


LAST_ROLE_BARRIER = 13  # 14 and 15: the turns of two consumer warpgroups (specialize_warps)


def _ranges(stmt) -> list:
    """The distinct thread ranges of the roles in `stmt`, in order: range i takes named
    barrier FIRST_ROLE_BARRIER + i (roles of the same threads share theirs)."""
    found = set()
    walk(stmt, tirx.AttrStmt, lambda a: found.add(role_threads(a)))
    ranges = sorted(r for r in found if r is not None)
    if FIRST_ROLE_BARRIER + len(ranges) - 1 > LAST_ROLE_BARRIER:
        raise TileLabCompileError(
            f"the kernel splits its block into {len(ranges)} different groups of threads; "
            f"a block has named barriers for {LAST_ROLE_BARRIER - FIRST_ROLE_BARRIER + 1}",
            hint="use fewer distinct roles (T.ws, or ifs on the thread index)")
    return ranges


def _split(attr, ranges):
    if role_threads(attr) is None:
        return attr
    first, end = role_threads(attr)
    rtx = attr.body[0].value  # the role's first statement: rtx = threadIdx.x - first
    body = narrow_barriers(attr.body, extern(
        "tl::role_sync", tirx.const(FIRST_ROLE_BARRIER + ranges.index((first, end)), "int32"),
        tirx.const(end - first, "int32")))
    inside = tirx.And(tirx.GE(rtx, 0), tirx.LT(rtx, end - first))
    return tirx.IfThenElse(inside, body, None)


def _passable(stmt) -> bool:
    """A barrier, or a binding of a value that reads no memory (index arithmetic that TVM's
    common subexpression elimination put before the roles that share it)."""
    return is_sync(stmt) or isinstance(stmt, tirx.Bind) and not loaded(stmt.value)


def _role_range(stmts, last: bool):
    """The threads of the role the statements `stmts` start with (`last`: end with), past
    barriers and such bindings; None if they start with something else."""
    stmt = next((s for s in (reversed(stmts) if last else stmts) if not _passable(s)), None)
    while isinstance(stmt, tirx.SeqStmt):
        stmt = stmt.seq[-1 if last else 0]
    return role_threads(stmt)


def _side_by_side(seq):
    """`seq` without the barriers between two roles of threads that do not overlap."""
    stmts = list(seq.seq)
    keep = []
    for i, stmt in enumerate(stmts):
        if is_sync(stmt):
            a = _role_range(stmts[:i], last=True)
            b = _role_range(stmts[i + 1:], last=False)
            if a and b and (a[1] <= b[0] or b[1] <= a[0]):
                continue
        keep.append(stmt)
    return seq if len(keep) == len(stmts) else tirx.SeqStmt(keep)


def has_roles(stmt) -> bool:
    found = []
    walk(stmt, tirx.AttrStmt, lambda a: found.append(a) if role_threads(a) else None)
    return bool(found)


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.WarpRoles")
@keep_user_errors
def WarpRoles(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects thread-level code after ThreadSync; leaves no role marks."""
    if not has_roles(func.body):
        return func
    ranges = _ranges(func.body)
    body = rewrite(func.body, tirx.SeqStmt, _side_by_side)
    return func.with_body(rewrite(body, tirx.AttrStmt, lambda a: _split(a, ranges)))
