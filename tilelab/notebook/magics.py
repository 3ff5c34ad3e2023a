"""`%%tilekernel` and `%tilelab`: compile the kernels of a cell and show what happened.

A `%%tilekernel` cell runs like any other cell, in the user's namespace. Its
text is first registered in `linecache` under `<tilekernel-N>`, with the
magic's own line as line 1, so the front end (which reads kernels with
`inspect.getsourcelines`) finds the kernels defined in it and errors point
at the line the user sees. Then, flag by flag, the kernels the cell defined
are compiled (`--args`) and shown: the IR after every pass, the generated
code, layouts and pipeline plans, a check and a benchmark against a PyTorch
expression. A `TileLabError` is shown as an ErrorView at the cell's own
line, not as a traceback through tilelab.

With `--autotune`, a kernel decorated with `@tilelab.autotune` (or a plain
`@tilelab.jit` one, given `--autotune CONFIGS`) is tuned for `--args`: a live
progress bar, then the table of every configuration (`AutotuneView`); the
other flags (`--pipeline`, `--layout`, `--source`, `--bench`) then show the
winner.

`%tilelab` shows and sets the defaults (target, cache directory, benchmark
settings).
"""

from __future__ import annotations

import ast
import importlib
import itertools
import linecache
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..errors import SourceLocation, TileLabError, TileLabSyntaxError
from ..kernel import JITFunction, Kernel, _is_tensor
from .views import CheckView, ErrorView, JsonView, PassesView, source_views


@dataclass
class Settings:
    """The defaults `%tilelab` shows and sets."""

    target: str = "auto"
    warmup: int | None = None  # None: 25 on a GPU, 2 on the CPU
    rep: int | None = None  # None: 100 on a GPU, 10 on the CPU
    input_sets: int = 3
    rtol: float = 1e-2
    atol: float = 1e-2

    def describe(self) -> str:
        from ..cache import cache_dir

        auto = "auto ({} on a GPU, {} on the CPU)"
        return "\n".join([
            "tilelab defaults:",
            f"  target      {self.target}",
            f"  cache dir   {cache_dir()}  (TILELAB_CACHE_DIR)",
            f"  warmup      {self.warmup if self.warmup is not None else auto.format(25, 2)}",
            f"  rep         {self.rep if self.rep is not None else auto.format(100, 10)}",
            f"  input sets  {self.input_sets}",
            f"  rtol, atol  {self.rtol:g}, {self.atol:g}",
        ])


def _target(value: str) -> str:
    value = value.lower()
    if value in ("auto", "cpu", "cuda") or value.startswith("cuda:sm_"):
        return value
    raise UsageError(f"unknown target {value!r}: use cpu, cuda, cuda:sm_XX or auto")


def _parse(magic, line: str):
    """The magic's flags, with shell quoting (IPython's own parser keeps the quotes)."""
    try:
        argv = shlex.split(line)
    except ValueError as err:
        raise UsageError(f"cannot read the flags {line!r}: {err}") from None
    return magic.parser.parse_args(argv)


def _assigned_names(tree: ast.Module) -> set[str]:
    """Names a cell binds at its own level: assignment targets, defs, imports (not the
    locals of the functions it defines)."""
    names: set[str] = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return  # its body binds its own locals
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _counted_flops(kernel) -> int | None:
    """The T.gemm work of one call, counted from the program (tilelab/analysis.py); None
    where there is none or it cannot be counted (a loop bounded by a value read at run
    time, a kernel loaded from an artifact)."""
    from ..analysis import work

    if getattr(kernel, "program", None) is None:
        return None
    try:
        return work(kernel).flops or None
    except TileLabError:
        return None


def _tensor_bytes(kernel) -> int:
    """The bytes a kernel must move at least: every input read once, every output written once."""
    import torch

    return sum(math.prod(p.shape) * torch.empty((), dtype=getattr(torch, p.dtype)).element_size()
               for p in kernel.params)


@magics_class
class TileLabMagics(Magics):
    """The magics `%load_ext tilelab` registers."""

    def __init__(self, shell):
        super().__init__(shell)
        self.settings = Settings()
        self._cell_numbers = itertools.count(1)

    # ------------------------------------------------------------ %tilelab

    @magic_arguments()
    @argument("--target", type=_target, help="default target: cpu, cuda, cuda:sm_XX or auto")
    @argument("--cache-dir", help="the compile cache's directory (sets TILELAB_CACHE_DIR)")
    @argument("--warmup", type=int, help="benchmark warm-up calls")
    @argument("--rep", type=int, help="benchmark timed calls per input set")
    @argument("--input-sets", type=int, help="fresh input sets a benchmark is timed on")
    @argument("--rtol", type=float, help="relative tolerance of --check and --bench")
    @argument("--atol", type=float, help="absolute tolerance of --check and --bench")
    @line_magic
    def tilelab(self, line):
        """Show tilelab's notebook defaults, or set some of them: %tilelab --target cuda"""
        args = _parse(self.tilelab, line)
        for name in ("target", "warmup", "rep", "input_sets", "rtol", "atol"):
            if getattr(args, name) is not None:
                setattr(self.settings, name, getattr(args, name))
        if args.cache_dir:
            os.environ["TILELAB_CACHE_DIR"] = str(Path(args.cache_dir).expanduser())
        print(self.settings.describe())

    # ------------------------------------------------------------ %%tilekernel

    @magic_arguments(name="%tilekernel")  # the usage line then reads %%tilekernel
    @argument("--target", type=_target,
              help="compile for cpu, cuda, cuda:sm_XX or auto (default: %%tilelab's)")
    @argument("--args", metavar="EXPR",
              help="arguments to compile and run with, evaluated in the notebook: tensors "
                   "(\"x, y\"), sizes (\"M=1024, N=1024\") or both")
    @argument("--kernel", metavar="NAME",
              help="the kernel to show (default: every kernel the cell defines)")
    @argument("--passes", nargs="*", metavar="all|changed|NAME",
              help="the IR after each pass: changed ones (default), all, or the passes named")
    @argument("--diff", action="store_true", help="diffs between consecutive passes")
    @argument("--source", action="store_true",
              help="the generated code (CUDA C, PTX, SASS; LLVM IR on the CPU) and resources")
    @argument("--check", metavar="EXPR",
              help="compare the output with a PyTorch expression of the inputs, by their "
                   "parameter names or your variables, e.g. \"torch.softmax(X, -1)\"")
    @argument("--bench", metavar="EXPR",
              help="benchmark against a PyTorch baseline expression, in the same run")
    @argument("--rtol", type=float, help="relative tolerance (default: %%tilelab's)")
    @argument("--atol", type=float, help="absolute tolerance (default: %%tilelab's)")
    @argument("--flops", metavar="EXPR", help="floating-point operations of one call "
              "(default: the T.gemm work counted from the program, tiles past an edge "
              "counted whole: tilelab/analysis.py)")
    @argument("--bytes", metavar="EXPR",
              help="bytes one call moves (default: the sizes of its tensors)")
    @argument("--layout", metavar="BUF", action="append", help="the layout chosen for a buffer")
    @argument("--pipeline", action="store_true", help="the software-pipeline plans")
    @argument("--dataflow", action="store_true", help="the dataflow graph of the tile ops")
    @argument("--autotune", nargs="?", const="", metavar="CONFIGS",
              help="tune the kernel for --args and show every configuration's time; the "
                   "other flags show the winner. CONFIGS (a Python expression: a list of "
                   "dicts or a dict of lists) tunes a kernel without @tilelab.autotune")
    @cell_magic
    def tilekernel(self, line, cell):
        """Run a cell of tilelab kernels, then compile them and show what the compiler did.

        The cell runs in the notebook's namespace, like any cell. The kernels it
        defines (@tilelab.jit functions and compiled kernels) are compiled with
        --args and shown as the flags ask. Kernel errors are shown at the
        cell's own line (line 1 is the %%tilekernel line).
        """
        __tracebackhide__ = True  # IPython shows a plain exception from the cell's frames only
        args = _parse(self.tilekernel, line)
        before = dict(self.shell.user_ns)
        filename = f"<tilekernel-{next(self._cell_numbers)}>"
        kernel_name = ""
        try:
            result, assigned = self._execute(filename, line, cell)
            shown = []  # a factory and the kernel it made in the cell are shown once
            for kernel_name, value in self._kernels(args, before, assigned):
                kernel = self._compile(kernel_name, value, args)
                if kernel is not None and all(kernel is not k for k in shown):
                    shown.append(kernel)
                    kernel_name = kernel.name
                    self._show(kernel, args)
        except TileLabError as err:
            display(ErrorView(err, kernel_name, filename))
            return None
        return result

    def _execute(self, filename: str, line: str, cell: str):
        """Run the cell in the user's namespace; return its last expression's value and the
        names the cell assigns (a re-run assigns the same objects again, and is shown again)."""
        __tracebackhide__ = True
        text = f"%%tilekernel {line}".rstrip() + "\n" + cell
        # the entry IPython's CachingCompiler.cache makes (mtime None: checkcache keeps it)
        linecache.cache[filename] = (len(text), None, [ln + "\n" for ln in text.splitlines()],
                                     filename)
        python = self.shell.transform_cell(cell)
        # IPython drops leading blank lines; put them back, and one for the magic's line.
        blank = next((i for i, ln in enumerate(cell.splitlines()) if ln.strip()), 0)
        try:
            tree = self.shell.compile.ast_parse("\n" * (1 + blank) + python, filename=filename)
        except SyntaxError as err:  # at the cell's own line, like a kernel's errors
            location = SourceLocation(filename, err.lineno or 1, max((err.offset or 1) - 1, 0),
                                      (err.text or "").rstrip("\n"))
            raise TileLabSyntaxError(f"invalid Python syntax: {err.msg}", location) from None
        assigned = _assigned_names(tree)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        namespace = self.shell.user_ns
        exec(self.shell.compile(tree, filename, "exec"), self.shell.user_global_ns, namespace)
        if last is None:
            return None, assigned
        expression = ast.Expression(last.value)
        return eval(self.shell.compile(expression, filename, "eval"),
                    self.shell.user_global_ns, namespace), assigned

    def _kernels(self, args, before: dict, assigned: set) -> list[tuple[str, object]]:
        """(name, JITFunction or Kernel): the one --kernel names, or those the cell defined
        (assigned by its statements, or new or changed in the namespace)."""
        namespace = self.shell.user_ns
        if args.kernel:
            value = namespace.get(args.kernel)
            if not isinstance(value, _kernel_types()):
                raise UsageError(f"--kernel {args.kernel}: no tilelab kernel of that name "
                                 "in the notebook")
            return [(args.kernel, value)]
        return [(name, value) for name, value in namespace.items()
                if isinstance(value, _kernel_types())
                and (name in assigned or before.get(name) is not value)]

    def _wants_views(self, args) -> bool:
        return any((args.passes is not None, args.diff, args.source, args.layout, args.pipeline,
                    args.dataflow, args.check, args.bench))

    def _compile(self, name: str, value, args):
        """The compiled Kernel to show for `value`, or None (with a note) if there is none."""
        from ..autotuner import AutoTuner

        if args.autotune is not None or isinstance(value, AutoTuner):
            return self._autotune(name, value, args)
        if not isinstance(value, JITFunction):
            return value
        target = args.target or self.settings.target
        if target != "auto" and value.target == "auto":
            value.target = target  # later calls in the notebook compile for it too
        if args.args is not None:
            positional, keywords = self._call_args(args.args)
            return value.compile(*positional, target=None if target == "auto" else target,
                                 **keywords)
        compiled = value.compiled  # what calls in the cell compiled
        if compiled:
            return compiled[-1]
        if self._wants_views(args):
            print(f"{name} is not compiled yet: call it in the cell, or pass --args "
                  "(tensors, or sizes such as M=1024)")
        return None

    def _autotune(self, name: str, value, args):
        """Tune `value` for --args (the baseline of --bench timed beside the candidates),
        show the table, and return the winner."""
        from ..autotuner import AutoTuner

        if isinstance(value, AutoTuner):
            tuner = value
            if args.autotune:
                tuner.configs = self._value(args.autotune, "--autotune")
        elif isinstance(value, JITFunction):
            if not args.autotune:
                raise UsageError(f"--autotune: {name} is not decorated with @tilelab.autotune; "
                                 "give the configurations: --autotune \"{'block_m': [64, 128]}\"")
            tuner = AutoTuner(value, self._value(args.autotune, "--autotune"))
        else:
            raise UsageError(f"--autotune: {name} is already compiled; tune the @tilelab.jit "
                             "function instead")
        if args.args is None:
            if tuner.autotune_result is None:
                print(f"{name} is not tuned yet: call it in the cell, or pass --args")
                return None
            kernel = next(k for k, _, r in tuner._tuned.values() if r is tuner.autotune_result)
            display(tuner.autotune_result)
            return kernel
        positional, keywords = self._call_args(args.args)
        target = args.target or self.settings.target
        if target != "auto":
            tuner.jit.target = target
        if args.bench:  # the baseline is a function of the inputs, by their names
            default = tuner.jit.compile(*positional, **keywords)
            inputs = self._inputs(default, args)
            first = inputs if isinstance(inputs, tuple) else tuple(inputs(seed=0))
            tuner.baseline = self._reference(args.bench, default, first, "--bench")
            tuner.baseline_name = args.bench
        tuner.display_result = False
        try:
            kernel = tuner.compile(*positional, **keywords)
        finally:
            tuner.display_result, tuner.baseline = True, None
        display(kernel.autotune_result)
        return kernel

    def _value(self, expression: str, flag: str):
        try:
            return eval(expression, self.shell.user_ns)
        except SyntaxError as err:
            raise UsageError(f"{flag} {expression!r} is not a Python expression: "
                             f"{err.msg}") from None

    def _call_args(self, expression: str) -> tuple[tuple, dict]:
        try:
            return eval(f"(lambda *a, **k: (a, k))({expression})", self.shell.user_ns)
        except SyntaxError as err:
            raise UsageError(f"--args {expression!r} is not a Python argument list: "
                             f"{err.msg}") from None

    def _expression(self, expression: str, kernel, flag: str):
        """A function of the kernel's inputs (by parameter name) computing `expression`."""
        names = ", ".join(p.name for p in kernel.inputs)
        try:
            return eval(f"lambda {names}: ({expression})", self.shell.user_ns)
        except SyntaxError as err:
            raise UsageError(f"{flag} {expression!r} is not a Python expression: "
                             f"{err.msg}") from None

    def _inputs(self, kernel, args):
        """The tensors from --args, or a maker of random ones for the kernel's signature."""
        if args.args is not None:
            positional, keywords = self._call_args(args.args)
            tensors = [v for v in (*positional, *keywords.values()) if _is_tensor(v)]
            if len(tensors) == len(kernel.inputs):
                return tuple(tensors)
        return kernel.get_profiler().random_inputs

    # ------------------------------------------------------------ views

    def _live(self) -> bool:
        """A kernel with a frontend that runs widgets (not a terminal or a test shell)."""
        return getattr(self.shell, "kernel", None) is not None

    def _show(self, kernel, args) -> None:
        trace = kernel.trace
        if args.passes is not None or args.diff:
            which = self._which(args.passes or [])
            if self._live() and which in ("changed", "all"):
                from .explorer import PassExplorer

                display(PassExplorer(trace, which, args.diff))
            else:
                try:
                    display(PassesView(trace, which, args.diff))
                except KeyError as err:  # a pass name that is not in the trace
                    raise UsageError(err.args[0]) from None
        if args.source:
            views = source_views(kernel)
            if not views:
                print(f"{kernel.name}: no generated code in its trace")
            for view in views:
                display(view)
        for buffer in args.layout or []:
            display(self._layout(trace, buffer))
        if args.pipeline:
            display(self._viz("pipeline_view", trace, title="pipeline plans",
                              data=trace.pipelines))
        if args.dataflow:
            display(self._viz("dataflow_view", trace, title="program (buffers and tile ops)",
                              data=trace.program))
        if args.check or args.bench:
            self._check_and_bench(kernel, args)

    def _which(self, names: list[str]):
        if not names or names == ["changed"]:
            return "changed"
        if names == ["all"]:
            return "all"
        return names

    def _viz(self, function: str, trace, *extra, title: str, data):
        """tilelab.viz's view where it exists, else the raw Trace data as JSON."""
        try:
            viz = importlib.import_module("tilelab.viz")
        except ModuleNotFoundError as err:
            if err.name != "tilelab.viz":
                raise
            viz = None
        make = getattr(viz, function, None)
        return make(trace, *extra) if make is not None else JsonView(trace.kernel, title, data)

    def _layout(self, trace, buffer: str):
        if buffer not in trace.layouts and buffer not in {b["name"] for b in
                                                          trace.program.get("buffers", [])}:
            known = ", ".join(trace.layouts) or "none"
            raise UsageError(f"--layout {buffer}: {trace.kernel} has no buffer {buffer!r} "
                             f"(buffers with layouts: {known})")
        return self._viz("layout_view", trace, buffer, title=f"layout of {buffer}",
                         data=trace.layouts.get(buffer))

    def _check_and_bench(self, kernel, args) -> None:
        from ..benchmark import CheckFailed, bench, compare

        rtol = args.rtol if args.rtol is not None else self.settings.rtol
        atol = args.atol if args.atol is not None else self.settings.atol
        inputs = self._inputs(kernel, args)
        first = inputs if isinstance(inputs, tuple) else tuple(inputs(seed=0))
        if args.check:
            reference = self._reference(args.check, kernel, first, "--check")
            comparison = compare(kernel(*first), reference(*first), rtol, atol)
            display(CheckView(kernel.name, args.check, comparison))
            if args.bench and not comparison["passed"]:
                print(f"{kernel.name}: not benchmarked, its output is wrong")
                return
        if args.bench:
            baseline = self._reference(args.bench, kernel, first, "--bench")
            flops = self._expression(args.flops, kernel, "--flops")(*first) if args.flops \
                else _counted_flops(kernel)
            nbytes = self._expression(args.bytes, kernel, "--bytes")(*first) if args.bytes \
                else _tensor_bytes(kernel)
            try:
                result = bench(kernel, baseline, args=inputs, warmup=self.settings.warmup,
                               rep=self.settings.rep, flops=flops, bytes=nbytes,
                               check=not args.check, rtol=rtol, atol=atol,
                               input_sets=self.settings.input_sets, name=kernel.name,
                               baseline_name=args.bench)
            except CheckFailed as failed:
                display(CheckView(kernel.name, args.bench, failed.comparison))
                print(f"{kernel.name}: not benchmarked, its output is wrong")
                return
            kernel.trace.bench.append(result.data)
            display(result)

    def _reference(self, expression: str, kernel, inputs, flag: str):
        """The baseline as a function of the inputs: the expression, or the callable it names."""
        function = self._expression(expression, kernel, flag)
        value = function(*inputs)
        return value if callable(value) else function


def _kernel_types() -> tuple:
    """What a cell may define that the magic compiles and shows."""
    from ..autotuner import AutoTuner

    return (JITFunction, Kernel, AutoTuner)
