"""Warp roles on the CPU: each role runs until it must wait, then the next takes its turn.

On a GPU the roles of a block (`with T.ws(k)`, or the branches of `if tx < 128:`) run
at once and meet at mbarriers (ops/barrier.py): a role that waits for a phase stalls
until another role's arrivals complete it. The CPU runs a block on one thread. Roles
written inside a loop, one iteration's share each, can run one after another in the
order written - the producer's copy, then the consumer's multiply. Roles that each run
the whole loop, as TileLang's warp-specialized kernels are written (the producer copies
every tile, the consumer multiplies every tile), cannot: the producer would wait for a
slot the consumer has not freed yet, and the consumer has not started.

So side-by-side roles that wait become a small scheduler, the roles its coroutines:

* each role's code is cut into **steps** at its waits. Everything between two waits is
  one step; a loop or an `if` with a wait inside becomes steps that jump (the loop's
  variable kept in memory, as is a value bound before a wait and used after it), and
  tiles allocated inside are allocated before the roles start;
* the roles **take turns**: a role runs step after step until it reaches a wait whose
  phase has not completed, then the next role runs, round after round, until every role
  is done. A round in which no role moves means that every role waits for another: the
  kernel stops with an error at each wait still waiting, where a GPU would hang.

Roles that ran in the order written run as before (the first never waits for a later
one), and the results are the ones a GPU computes in any order its warps run: the roles
meet only at the barriers. A wait outside such a group (one role, or every thread) must
find its phase complete when it is reached, as before.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.builder import seq
from ..ir.keys import WARP_ROLE
from ..ir.tile_ops import is_tile_call
from ..ir.visit import keep_user_errors, rewrite, substitute, walk
from ..ops._lowering import check
from ..ops.barrier import phase_completed, where

DONE = -1  # the step number of a role that has finished


class _Unsupported(Exception):
    """A wait where the roles cannot be cut into steps (inside a T.Parallel loop, say):
    the group keeps running in the order written."""


def _waits(stmt) -> list:
    found = []
    walk(stmt, TilePrimitiveCall, lambda c: found.append(c)
         if is_tile_call(c, "barrier_wait") else None)
    return found


def has_waits(func) -> bool:
    """Does the program wait at an mbarrier anywhere (else it has no roles to take turns)?"""
    return bool(_waits(func.body))


def _int32(name: str):
    return tirx.decl_buffer((1,), "int32", name=name, scope="local")


def _load(buffer):
    return tirx.BufferLoad(buffer, [0])


def _store(buffer, value):
    return tirx.BufferStore(buffer, tirx.const(value, "int32") if isinstance(value, int)
                            else value, [0])


class _Role:
    """One role cut into steps: `steps[n]` is step n's statement, which ends by setting
    the role's next step (`self.step`), or, at a wait not yet complete, `blocked`."""

    def __init__(self, attr, number: str, blocked):
        self.first, self.end = attr.node, attr.value
        self.step = _int32(f"role{number}_step")
        self.blocked = blocked
        self.steps: list = []
        self.allocations: list = []  # tiles and kept values, allocated before the roles
        self.waits: list = []  # (step, the T.barrier_wait)
        self.entry = self.cut(attr.body, DONE)

    def _new(self) -> int:
        self.steps.append(None)
        return len(self.steps) - 1

    def goto(self, target):
        return _store(self.step, target)

    def _kept(self, name: str, dtype: str):
        buffer = tirx.decl_buffer((1,), dtype, name=f"{name}_kept", scope="local")
        self.allocations.append(buffer)
        return buffer

    def cut(self, stmt, after) -> int:
        """The first step of `stmt`, whose last step goes on to `after` (CPS, backwards)."""
        if not _waits(stmt):
            n = self._new()
            self.steps[n] = seq([stmt, self.goto(after)])
            return n
        if is_tile_call(stmt, "barrier_wait"):
            n = self._new()
            self.steps[n] = tirx.IfThenElse(phase_completed(stmt), self.goto(after),
                                            _store(self.blocked, 1))
            self.waits.append((n, stmt))
            return n
        if isinstance(stmt, tirx.SeqStmt):
            return self._cut_list(list(stmt.seq), after)
        if isinstance(stmt, tirx.For) and stmt.kind in (tirx.ForKind.SERIAL,
                                                          tirx.ForKind.UNROLLED):
            counter = self._kept(stmt.loop_var.name, str(stmt.loop_var.ty))
            head, latch, start = self._new(), self._new(), self._new()
            body = self.cut(substitute(stmt.body, {stmt.loop_var: _load(counter)}), latch)
            self.steps[start] = seq([_store(counter, stmt.min), self.goto(head)])
            self.steps[head] = self.goto(tirx.Select(
                tirx.LT(_load(counter), stmt.min + stmt.extent), body, after))
            self.steps[latch] = seq([_store(counter, _load(counter) + 1), self.goto(head)])
            return start
        if isinstance(stmt, tirx.While):
            head = self._new()
            body = self.cut(stmt.body, head)
            self.steps[head] = self.goto(tirx.Select(stmt.condition, body, after))
            return head
        if isinstance(stmt, tirx.IfThenElse):
            test = self._new()
            then = self.cut(stmt.then_case, after)
            other = self.cut(stmt.else_case, after) if stmt.else_case is not None else after
            self.steps[test] = self.goto(tirx.Select(stmt.condition, then, other))
            return test
        raise _Unsupported(type(stmt).__name__)

    def _cut_list(self, stmts: list, after) -> int:
        """A statement list: allocations go before the roles, a value bound before a
        wait and used after it is kept in memory, runs without waits are one step."""
        units, run = [], []
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer)):
                self.allocations.append(stmt)
                continue
            if isinstance(stmt, tirx.Bind) and _waits(seq(stmts[i + 1:])):
                if not str(stmt.var.ty).startswith(("int", "uint", "float", "bool")):
                    raise _Unsupported(f"a {stmt.var.ty} bound across a wait")  # a pointer
                kept = self._kept(stmt.var.name, str(stmt.var.ty))
                stmts[i + 1:] = [substitute(s, {stmt.var: _load(kept)}) for s in stmts[i + 1:]]
                stmt = _store(kept, stmt.value)
            if _waits(stmt):
                if run:
                    units.append(seq(run))
                    run = []
                units.append(stmt)
            else:
                run.append(stmt)
        if run:
            units.append(seq(run))
        for unit in reversed(units):
            after = self.cut(unit, after)
        return after

    def run(self, moved):
        """Steps until the role is done or waits: `while` over a chain of `if step == n`,
        each step inside the role's mark (the later passes lower it for the role)."""
        dispatch = None
        for n in reversed(range(len(self.steps))):
            body = tirx.AttrStmt(self.first, WARP_ROLE, self.end, self.steps[n])
            dispatch = tirx.IfThenElse(tirx.EQ(_load(self.step), n), body, dispatch)
        turn = seq([dispatch, tirx.IfThenElse(tirx.EQ(_load(self.blocked), 0),
                                              _store(moved, 1), None)])
        running = tirx.And(tirx.NE(_load(self.step), DONE), tirx.EQ(_load(self.blocked), 0))
        return seq([_store(self.blocked, 0), tirx.While(running, turn)])


def _take_turns(roles_attrs: list, number: int):
    """The statements that run a group of roles by turns (None: keep them in order)."""
    blocked, moved = _int32(f"roles{number}_blocked"), _int32(f"roles{number}_moved")
    try:
        roles = [_Role(attr, f"{number}_{i}", blocked) for i, attr in enumerate(roles_attrs)]
    except _Unsupported:
        return None
    allocations = [blocked, moved] + [r.step for r in roles]
    hoisted = []
    for role in roles:
        for item in role.allocations:
            if isinstance(item, tirx.Buffer):
                allocations.append(item)
            else:
                hoisted.append(item)
    rounds = tirx.While(tirx.NE(_load(moved), 0), seq(
        [_store(moved, 0)] + [role.run(moved) for role in roles]))
    stuck = [check(tirx.NE(_load(role.step), n), "T.barrier_wait: every warp role waits "
                   "for another here (a GPU would wait forever)", where(call))
             for role in roles for n, call in role.waits]
    return [*(tirx.AllocBuffer(b) for b in allocations), *hoisted,
            *(role.goto(role.entry) for role in roles), _store(moved, 1), rounds, *stuck]


def _is_role(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WARP_ROLE


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.RoleTurns")
@keep_user_errors
def RoleTurns(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """Side-by-side warp roles with waits run by turns (the module doc); others as before."""
    groups = [0]

    def on_list(stmts):
        out, items, i = [], list(stmts.seq), 0
        while i < len(items):
            if not _is_role(items[i]):
                out.append(items[i])
                i += 1
                continue
            j = i
            while j < len(items) and _is_role(items[j]):
                j += 1
            group, i = items[i:j], j
            turns = None
            if len(group) > 1 and any(_waits(r) for r in group):
                groups[0] += 1
                turns = _take_turns(group, groups[0])
            out.extend(group if turns is None else turns)
        return seq(out)

    return func.with_body(rewrite(func.body, tirx.SeqStmt, on_list))
