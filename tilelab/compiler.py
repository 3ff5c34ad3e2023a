"""Compilation: a traced tile program in, a runnable kernel and its Trace out.

The steps, top to bottom:

1. the front end has already produced a `TileProgram` (TIR with tile ops);
2. `compile_program` looks the program up in the compile cache (keyed by its
   IR text, the target, the pass settings and the compiler's own source);
3. on a miss, the target's backend (`backends.backend_for`: cpu or cuda) runs
   its pass list - tilelab's tile-level passes first, then TVM's generic
   lowering - while an instrument records the IR after every pass into the
   Trace;
4. the backend finishes the generated code into a kernel (a shared library, a
   cubin), and the artifact plus the Trace are cached.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from .backends import CompiledArtifact, backend_for
from .cache import cache_key, default_cache
from .errors import TileLabCompileError, TileLabError, TileLabTypeError
from .ir.keys import (
    LAYOUT_PLAN,
    PIPELINE_PLAN,
    PROGRAM_CONFIGS,
    SOURCE_FILE,
    PassConfigKey,
    facts_in,
)
from .trace import PassRecord, Trace

# Other spellings of tilelab's keys (TileLang's and TVM's names for the same setting).
CONFIG_ALIASES = {"tirx.disable_vectorize": PassConfigKey.TL_DISABLE_VECTORIZE.value,
                  "tir.disable_vectorize": PassConfigKey.TL_DISABLE_VECTORIZE.value}

# TileLang's keys that tilelab does not implement: accepted, with one warning each, so
# that TileLang programs compile as written.
TILELANG_ONLY_CONFIGS = frozenset("""
    tl.Simplify tl.disable_buffer_init_check tl.disable_data_race_check
    tl.disable_prelower_semantic_check tl.ptxas_register_usage_level
    tl.device_compile_flags tl.emit_line_directives tl.config_index_bitwidth
    tl.enable_reducer_plan_verbose tl.layout_cost_model tl.reducer_force_baseline
    tl.disable_safe_memory_legalize tl.disable_vectorize_256
    tl.enable_async_copy tl.enable_lower_ldgstg tl.enable_lower_ldgstg_predicated
    tl.enable_vectorize_planner_verbose tl.debug_merge_shared_memory_allocations
    tl.enable_aggressive_shared_memory_merge tl.disable_shared_memory_reuse
    tl.disable_shuffle_elect tl.disable_loop_unswitching tl.loop_unswitching_allow_non_trivial_else
    tl.if_stmt_binding_inline_replayable_binds tl.force_let_inline
    tl.ast_print_enable tl.layout_visualization_enable tl.layout_visualization_formats
    tl.storage_rewrite_detect_inplace tl.disable_out_of_bound_warning tl.enable_dump_ir
    tl.dump_ir_path tl.pass_profile tl.pass_profile_threshold_ms tl.disable_fast_math
    tirx.enable_equiv_terms_in_cse_tir tirx.disable_cse_tir tirx.Simplify
    tirx.disable_storage_rewrite tirx.use_async_copy tirx.enable_debug tirx.merge_static_smem
    tirx.add_lower_pass tirx.noalias cuda.kernels_output_dir
""".split())
_warned_configs: set = set()


TARGETS = ("cpu", "cuda")


def resolve_target(target: str | None, tensors=()) -> str:
    """`auto` picks CUDA when the inputs live on a GPU, else the CPU.

    `cuda:sm_80` names the GPU architecture (default: the visible GPU's, else sm_90a).
    """
    target = (target or "auto").lower()
    if target.startswith("cuda:sm_"):
        return target
    if target == "llvm":
        target = "cpu"
    if target == "auto":
        if tensors:
            on_gpu = any(getattr(getattr(t, "device", None), "type", "cpu") == "cuda"
                         for t in tensors)
        else:  # nothing to go by: the GPU, if this machine has one
            on_gpu = _cuda_available()
        target = "cuda" if on_gpu else "cpu"
    if target not in TARGETS:
        raise TileLabError(f"unknown target {target!r}; choose one of auto, cpu, cuda")
    return target


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# What a compiled kernel depends on besides its program: every source of the compiler
# except the parts that only draw or time what it made (a new colour in a view must not
# send every kernel back through nvcc), and tilelab's device header.
_NOT_COMPILER = ("viz/", "notebook/", "testing/", "display.py", "benchmark.py", "profiler.py")


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the sources that shape compiled kernels, so cached kernels follow them."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    paths = sorted([*root.rglob("*.py"), *root.rglob("*.cuh")])
    for path in paths:
        name = path.relative_to(root).as_posix()
        if name.startswith(_NOT_COMPILER):
            continue
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def normalize_configs(pass_configs) -> dict:
    """`pass_configs` by canonical key name; unknown keys are an error naming the known ones."""
    import warnings

    from .errors import TileLabWarning

    out = {}
    for key, value in (pass_configs or {}).items():
        name = key.value if isinstance(key, enum.Enum) else str(key)  # tilelang's too
        name = CONFIG_ALIASES.get(name, name)
        if name in TILELANG_ONLY_CONFIGS:
            if name not in _warned_configs:
                _warned_configs.add(name)
                warnings.warn(f"pass config {name!r} is TileLang's; tilelab does not implement "
                              "it, so it has no effect", TileLabWarning, stacklevel=3)
            continue
        if name not in _KNOWN_CONFIGS:
            known = ", ".join(f"{k.name} ({k.value!r})" for k in PassConfigKey)
            raise TileLabCompileError(f"unknown pass config {name!r}",
                                      hint=f"the known keys are PassConfigKey.{known}")
        out[name] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def program_configs(func) -> dict:
    """The pass configs a program asks for with hints of its own (`PROGRAM_CONFIGS`)."""
    asked = func.attrs.get(PROGRAM_CONFIGS) if func.attrs is not None else None
    return {str(k): v.value if hasattr(v, "value") else v for k, v in (asked or {}).items()}


_KNOWN_CONFIGS = frozenset(k.value for k in PassConfigKey)


# ---------------------------------------------------------------- recording passes


def _owner(name: str) -> str:
    return "tilelab" if name.startswith("tilelab.") else "tvm"


class PassRecorder:
    """A TVM pass instrument that keeps the IR after every pass."""

    SKIP = {"sequential", "tilelab_cpu", "tilelab_cuda", "_pipeline"}

    def __init__(self):
        self.records: list[PassRecord] = []
        self._starts: list[float] = []
        self._previous = None
        self._previous_text = ""
        self.stage = "pipeline"
        self.device_module = None  # the last module holding a GPU kernel
        self.facts: dict = {}  # the facts (ir/keys.py) tilelab's passes left, latest of each

    def fill(self, trace) -> None:
        """The Trace's layouts, instruction records and pipeline schedules, from the facts."""
        for plan in self.facts.get(LAYOUT_PLAN, []):
            trace.layouts.update(plan.to_json())
            trace.instructions.extend(plan.instructions)
        trace.pipelines = list(self.facts.get(PIPELINE_PLAN, []))


    def record(self, name: str, mod, duration_ms: float, owner: str, stage: str):
        import tvm_ffi

        changed = self._previous is None or not tvm_ffi.structural_equal(mod, self._previous)
        text = mod.script() if changed else self._previous_text
        if changed and owner == "tilelab":  # what tilelab's passes decided rides on the IR
            self.facts.update(facts_in(mod))
        self.records.append(PassRecord(name, text, bool(changed), round(duration_ms, 3),
                                       owner, stage))
        self._previous, self._previous_text = mod, text
        if any(f.attrs is not None and "calling_conv" in f.attrs and
               int(f.attrs["calling_conv"]) == 2 for f in mod.functions.values()):
            self.device_module = mod

    def instrument(self):
        import tvm

        recorder = self

        @tvm.ir.instrument.pass_instrument
        class _Instrument:
            def run_before_pass(self, mod, info):
                recorder._starts.append(time.perf_counter())

            def run_after_pass(self, mod, info):
                start = recorder._starts.pop() if recorder._starts else time.perf_counter()
                if info.name in PassRecorder.SKIP or info.name.startswith("sequential"):
                    return
                if info.name == "tirx.BindTarget":  # the front end's IR, now with its target
                    recorder.records[-1].ir = recorder._previous_text = mod.script()
                    recorder._previous = mod
                    return
                stage = recorder.stage
                if info.name in ("tirx.LowerTVMBuiltin", "tirx.LowerIntrin",
                                 "tirx.LowerWarpMemory"):
                    stage = "finalize"
                recorder.record(info.name, mod, (time.perf_counter() - start) * 1e3,
                                _owner(info.name), stage)

        return _Instrument()


# ---------------------------------------------------------------- compiling


def program_key(program, target: str, configs: dict) -> str:
    """The cache key of a program: its IR, less the name of the file it was written in (a
    notebook cell's name changes each time the cell runs; the same kernel is a hit)."""
    layouts = {name: layout.to_json() for name, layout in sorted(program.layouts.items())}
    target = backend_for(target).cache_target(target)
    return cache_key("tilelab-kernel", program.func.without_attr(SOURCE_FILE).script(),
                     target, configs, bool(program.has_atomics), layouts,
                     compiler_fingerprint())


def compile_program(program, target: str = "cpu", pass_configs=None) -> CompiledArtifact:
    """Compile a TileProgram for `target`, through the cache."""
    try:
        configs = normalize_configs({**program_configs(program.func), **(pass_configs or {})})
    except TileLabError as err:
        raise err.with_location(program.source.location(program.source.node)) from None
    key = program_key(program, target, configs)
    cache = default_cache()
    started = time.perf_counter()
    entry = cache.get_path(key)
    if entry is not None:
        files = cache.get(key) or {}
        try:
            trace = _stored_trace(key, files["trace.json"])
            cached = backend_for(target).load(entry, program, trace)
        except Exception as err:  # noqa: BLE001 - a damaged entry is evicted and rebuilt
            # The manifest matched, yet the entry does not load (a bad trace.json, a library
            # the loader rejects): heal by compiling again, with one warning.
            reason = (str(err).strip().splitlines() or [type(err).__name__])[-1][:200]
            cache.evict(key, reason)
        else:
            trace.source = _source_of(program)  # the same IR may come from another cell
            trace.cache_hit = True
            trace.compile_seconds = time.perf_counter() - started
            _warn(program, trace.warnings)  # a cached kernel still deserves its warnings
            cached.files = files
            return cached
    artifact, files = _compile_uncached(program, target, configs)
    artifact.trace.compile_seconds = time.perf_counter() - started
    files["trace.json"] = artifact.trace.to_json().encode()
    cache.put(key, files)
    artifact.files = files
    return artifact


_PARSED: OrderedDict[str, tuple[bytes, dict]] = OrderedDict()  # key -> (trace.json, its data)
_PARSED_KEPT = 16
_PARSED_LOCK = threading.Lock()


def _stored_trace(key: str, data: bytes) -> Trace:
    """The Trace of a cache entry. Its trace.json holds the IR after every pass (megabytes
    for FlashAttention), and parsing it was about half of a warm compile; the parsed data
    of the last few entries stay in memory, each checked against the entry's bytes. Every
    hit gets a Trace of its own, its fields copied one level: a hit changes them (its
    source, `code["sass"]` once shown, `bench`), never what they hold."""
    with _PARSED_LOCK:
        kept = _PARSED.get(key)
    if kept is None or kept[0] != data:
        kept = (data, json.loads(data))
    with _PARSED_LOCK:
        _PARSED[key] = kept
        _PARSED.move_to_end(key)
        while len(_PARSED) > _PARSED_KEPT:
            _PARSED.popitem(last=False)
    return Trace.from_dict({name: copy.copy(value) for name, value in kept[1].items()})


def _source_of(program) -> dict:
    return {"filename": program.source.filename, "first_line": program.source.line_offset + 1,
            "text": program.source.text}


def _warn(program, messages) -> None:
    """Show the compiler's warnings at the kernel's definition."""
    import warnings

    from .errors import TileLabWarning

    for message in messages:
        warnings.warn_explicit(message, TileLabWarning, program.source.filename,
                               program.source.line_offset + 1)


def _compile_uncached(program, target: str, configs: dict):
    import warnings

    import tvm

    from .passes.summarize import summarize

    backend = backend_for(target)
    trace = Trace(kernel=program.name, target=target, source=_source_of(program),
                  params=[{"name": p.name, "shape": list(p.shape), "dtype": p.dtype,
                           "output": p.output} for p in program.params],
                  program=summarize(program.func, program.params))
    recorder = PassRecorder()
    mod = tvm.IRModule({program.name: program.func})
    recorder.record("tilelab.FrontEnd", mod, 0.0, "tilelab", "input")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with tvm.transform.PassContext(opt_level=3, instruments=[recorder.instrument()]):
                executable = backend.build(mod, program, target, configs, trace)
        except TileLabError:
            raise
        except Exception as err:  # a pass or LLVM rejected the program
            from .ir.visit import UserErrors

            user_error = UserErrors.take()
            if user_error is not None:
                if user_error.location is None:
                    user_error.with_location(program.source.location(program.source.node))
                raise user_error from None
            last = recorder.records[-1].name if recorder.records else "the front end"
            if "divide by zero" in str(err).lower():  # TVM's simplifier met `x // 0`
                raise TileLabTypeError(
                    f"{program.name} divides an integer by a value that is 0 here (a loop "
                    "index that starts at 0, or a size that is 0)",
                    program.source.location(program.source.node),
                    hint="look for // and % whose right side can be 0") from None
            if "Cannot insert syncs inside condition" in str(err):
                raise TileLabCompileError(
                    f"{program.name} needs a barrier (__syncthreads) inside an `if` whose "
                    "condition the threads of a block may not all see alike: it reads a "
                    "thread index, or a tensor this kernel also writes. Threads that skip "
                    "the branch would never reach the barrier",
                    program.source.location(program.source.node),
                    hint="branch on block indices, scalar parameters or tensors the kernel "
                         "only reads; or keep shared-memory work out of the branch (compute "
                         "both ways, then T.if_then_else)") from None
            raise TileLabCompileError(
                f"compiling {program.name} for {target} failed after {last}: "
                f"{_last_words(err)}", program.source.location(program.source.node)) from None
    trace.warnings = [str(w.message) for w in caught]
    _warn(program, trace.warnings)
    trace.passes = recorder.records
    recorder.fill(trace)
    shown = len(trace.warnings)
    finished = backend.finish(program, trace, executable, recorder, target, configs)
    _warn(program, trace.warnings[shown:])  # what finishing found (ptxas' spills, say)
    return finished


def _last_words(err: Exception) -> str:
    """The last readable line of an internal error (TVM's messages end with the cause)."""
    lines = [ln.strip() for ln in str(err).splitlines()]
    readable = [ln for ln in lines if ln and ln.isprintable()]
    return readable[-1] if readable else type(err).__name__
