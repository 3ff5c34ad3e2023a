/**
 * Editor support for `%%tilekernel` cells, as CodeMirror 6 extensions.
 *
 * JupyterLab parses a notebook cell with its kernel's language; a cell magic's
 * first line is not Python, so the parse of a `%%tilekernel` cell starts with
 * an error. Here, in a cell whose first line is the magic:
 *
 * - the cell's language becomes Python read from the line after the magic (the
 *   magic line is blanked for the parser only: positions stay the same);
 * - the magic line and its flags, and every `T.<primitive>`, get a decoration;
 * - `flagCompletions` lists the magic's flags for a completion provider.
 *
 * Cells without the magic are left alone.
 */

import { Language, language, syntaxTree } from '@codemirror/language';
import { Compartment, EditorState, Extension, Prec, RangeSetBuilder, StateField } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, ViewPlugin, ViewUpdate } from '@codemirror/view';
import { Input, Parser, PartialParse, TreeFragment } from '@lezer/common';

export const MAGIC = '%%tilekernel';

/** The flags of %%tilekernel (tilelab/notebook/magics.py) with what they do. */
export const FLAGS: [string, string][] = [
  ['--target', 'compile for cpu, cuda, cuda:sm_XX or auto'],
  ['--args', 'arguments to compile and run with: tensors ("x, y"), sizes ("M=1024") or both'],
  ['--passes', 'the IR after each pass: changed ones (default), all, or the passes named'],
  ['--diff', 'diffs between consecutive passes'],
  ['--source', 'the generated code (CUDA C, PTX, SASS; LLVM IR on the CPU) and resources'],
  ['--check', 'compare the output with a PyTorch expression of the inputs'],
  ['--bench', 'benchmark against a PyTorch baseline expression'],
  ['--layout', 'the layout chosen for a buffer'],
  ['--pipeline', 'the software-pipeline plans'],
  ['--dataflow', 'the dataflow graph of the tile ops'],
  ['--kernel', 'the kernel to show (default: every kernel the cell defines)'],
  ['--rtol', 'relative tolerance of --check and --bench'],
  ['--atol', 'absolute tolerance of --check and --bench'],
  ['--flops', 'floating-point operations of one call'],
  ['--bytes', 'bytes one call moves (default: the sizes of its tensors)']
];

const FLAG_VALUES: Record<string, string[]> = {
  '--target': ['auto', 'cpu', 'cuda', 'cuda:sm_80', 'cuda:sm_90a'],
  '--passes': ['all', 'changed']
};

/** The T namespace (tilelab/language) with one line each, shown on hover. */
export const PRIMITIVES: Record<string, string> = {
  Kernel: 'launch a grid of blocks: with T.Kernel(grid..., threads=N) as (bx, by)',
  alloc_shared: 'a tile in shared memory, shared by the block',
  alloc_fragment: 'a tile in registers, spread over the threads (a fragment)',
  alloc_local: 'a per-thread array in registers',
  alloc_var: 'a per-thread scalar variable',
  copy: 'copy a tile between global, shared memory and fragments',
  gemm: 'C += A @ B on tiles (tensor cores on the GPU)',
  Pipelined: 'a loop whose copies run ahead of its compute (software pipelining)',
  Parallel: 'a loop nest spread over the threads of the block',
  serial: 'a plain sequential loop',
  unroll: 'an unrolled loop',
  vectorized: 'a vectorized loop',
  clear: 'fill a tile with zeros',
  fill: 'fill a tile with a value',
  reduce_max: 'row-wise maximum of a fragment',
  reduce_min: 'row-wise minimum of a fragment',
  reduce_sum: 'row-wise sum of a fragment',
  reduce_abssum: 'row-wise sum of absolute values',
  reduce_absmax: 'row-wise maximum of absolute values',
  atomic_add: 'atomic add into global memory',
  annotate_layout: 'choose the layout of a buffer yourself',
  use_swizzle: 'visit blocks in panels so tiles are reused from L2',
  ceildiv: 'ceil(a / b) on integers',
  Tensor: 'a kernel argument: T.Tensor(shape, dtype)',
  Buffer: 'a kernel buffer: T.Buffer(shape, dtype)',
  const: 'symbolic sizes taken from the arguments: M, N = T.const("M, N")',
  empty: 'an output tensor the kernel allocates and returns',
  prim_func: 'a tile program (TVMScript-style function)',
  macro: 'a helper inlined into the kernel',
  print: 'print from the kernel (debugging)',
  Layout: 'a memory layout', Fragment: 'a register fragment layout', GemmWarpPolicy: 'how warps split a gemm',
  exp: 'e^x', exp2: '2^x', log: 'ln x', log2: 'log2 x', sqrt: 'square root', rsqrt: '1 / sqrt(x)',
  max: 'maximum', min: 'minimum', abs: 'absolute value', tanh: 'tanh', sigmoid: 'sigmoid', erf: 'erf',
  if_then_else: 'select(cond, a, b)', infinity: 'infinity of a dtype', Cast: 'convert to a dtype',
  float16: 'dtype', bfloat16: 'dtype', float32: 'dtype', float64: 'dtype', int8: 'dtype', int16: 'dtype',
  int32: 'dtype', int64: 'dtype', uint8: 'dtype', bool: 'dtype', boolean: 'dtype'
};

/**
 * Where the magic line ends (the index of its newline, or the text's length), if
 * the first non-blank line of `text` is `%%tilekernel ...`; -1 otherwise.
 */
export function magicLineEnd(text: string): number {
  const match = /^(?:[ \t]*\n)*%%tilekernel(?=\s|$)[^\n]*/.exec(text);
  return match ? match[0].length : -1;
}

/** The same for an editor state (only its first lines are read). */
export function magicEndOf(state: EditorState): number {
  const head = state.doc.sliceString(0, Math.min(state.doc.length, 4096));
  return magicLineEnd(head);
}

/** An Input that reads spaces instead of the magic line: Python then parses the cell. */
class BlankedInput implements Input {
  constructor(readonly inner: Input, readonly end: number) {}

  get length(): number {
    return this.inner.length;
  }

  get lineChunks(): boolean {
    return this.inner.lineChunks;
  }

  private blank(from: number, text: string): string {
    if (from >= this.end) {
      return text;
    }
    const n = Math.min(text.length, this.end - from);
    return text.slice(0, n).replace(/[^\n]/g, ' ') + text.slice(n);
  }

  chunk(from: number): string {
    return this.blank(from, this.inner.chunk(from));
  }

  read(from: number, to: number): string {
    return this.blank(from, this.inner.read(from, to));
  }
}

/** A parser that hides the magic line from `inner`. */
export class MagicLineParser extends Parser {
  constructor(readonly inner: Parser) {
    super();
  }

  createParse(input: Input, fragments: readonly TreeFragment[], ranges: readonly { from: number; to: number }[]): PartialParse {
    const end = magicLineEnd(input.read(0, Math.min(input.length, 4096)));
    const source = end >= 0 ? new BlankedInput(input, end) : input;
    return this.inner.createParse(source, fragments, ranges);
  }
}

const languages = new WeakMap<Language, Language>();

/** Python (the given language) reading a %%tilekernel cell from its second line. */
export function tilekernelLanguage(python: Language): Language {
  let found = languages.get(python);
  if (!found) {
    found = new Language(python.data, new MagicLineParser(python.parser), [], 'tilekernel');
    languages.set(python, found);
  }
  return found;
}

/** Where the magic line ends in this state (-1: not a %%tilekernel cell). */
export const magicEnd = StateField.define<number>({
  create: magicEndOf,
  update(value, tr) {
    return tr.docChanged ? magicEndOf(tr.state) : value;
  }
});

const magicLine = Decoration.line({ class: 'cm-tilelab-magic-line' });
const magicName = Decoration.mark({ class: 'cm-tilelab-magic' });
const flagMark = Decoration.mark({ class: 'cm-tilelab-flag' });
const primitiveMarks = new Map<string, Decoration>();

function primitiveMark(name: string): Decoration {
  let mark = primitiveMarks.get(name);
  if (!mark) {
    const known = Object.prototype.hasOwnProperty.call(PRIMITIVES, name);
    mark = Decoration.mark({
      class: known ? 'cm-tilelab-primitive' : 'cm-tilelab-primitive cm-tilelab-primitive-unknown',
      attributes: { title: known ? `T.${name}: ${PRIMITIVES[name]}` : `T.${name}` }
    });
    primitiveMarks.set(name, mark);
  }
  return mark;
}

const SKIPPED_NODES = /String|Comment/;

/** The decorations of a %%tilekernel cell: its magic line, flags and T.* primitives. */
export function tilekernelDecorations(state: EditorState, ranges?: readonly { from: number; to: number }[]): DecorationSet {
  const end = state.field(magicEnd, false) ?? magicEndOf(state);
  if (end < 0) {
    return Decoration.none;
  }
  const builder = new RangeSetBuilder<Decoration>();
  const doc = state.doc;
  const first = doc.lineAt(end);
  builder.add(first.from, first.from, magicLine);
  const magicAt = first.text.indexOf(MAGIC);
  builder.add(first.from + magicAt, first.from + magicAt + MAGIC.length, magicName);
  const flag = /(^|\s)(--?[A-Za-z][\w-]*)/g;
  let match: RegExpExecArray | null;
  while ((match = flag.exec(first.text))) {
    const from = first.from + match.index + match[1].length;
    builder.add(from, from + match[2].length, flagMark);
  }
  const tree = syntaxTree(state);
  const parsedWithMagic = state.facet(language)?.name === 'tilekernel';
  const spans = ranges && ranges.length ? ranges : [{ from: 0, to: doc.length }];
  let last = first.to;
  for (const span of spans) {
    const from = Math.max(span.from, last);
    if (from >= span.to) {
      continue;
    }
    const text = doc.sliceString(from, span.to);
    const primitive = /\bT\.([A-Za-z_]\w*)/g;
    while ((match = primitive.exec(text))) {
      const start = from + match.index;
      if (parsedWithMagic && SKIPPED_NODES.test(tree.resolveInner(start, 1).name)) {
        continue;
      }
      builder.add(start, start + match[0].length, primitiveMark(match[1]));
    }
    last = span.to;
  }
  return builder.finish();
}

const decorations = ViewPlugin.fromClass(
  class {
    decorations: DecorationSet;

    constructor(view: EditorView) {
      this.decorations = tilekernelDecorations(view.state, view.visibleRanges);
    }

    update(update: ViewUpdate) {
      if (update.docChanged || update.viewportChanged || syntaxTree(update.startState) !== syntaxTree(update.state)) {
        this.decorations = tilekernelDecorations(update.state, update.view.visibleRanges);
      }
    }
  },
  { decorations: plugin => plugin.decorations }
);

const theme = EditorView.baseTheme({
  '.cm-tilelab-magic-line': { backgroundColor: 'var(--jp-layout-color2, rgba(0, 0, 0, 0.04))' },
  '.cm-tilelab-magic': { color: 'var(--jp-mirror-editor-keyword-color, #008000)', fontWeight: 'bold' },
  '.cm-tilelab-flag': { color: 'var(--jp-mirror-editor-attribute-color, #00c)' },
  '.cm-tilelab-primitive': {
    color: 'var(--jp-mirror-editor-builtin-color, #3c5ac8)',
    fontWeight: '600',
    textDecoration: 'underline dotted rgba(60, 90, 200, 0.45)',
    textUnderlineOffset: '3px'
  },
  '.cm-tilelab-primitive-unknown': { fontWeight: 'normal' }
});

/**
 * Everything for %%tilekernel cells. With `python` (JupyterLab's Python
 * language), such a cell is parsed as Python from its second line: the
 * language sits in a compartment of its own, at the highest precedence, filled
 * only while the cell starts with the magic (so editors without a language,
 * or cells without the magic, are not touched). `initialDoc` is the text the
 * editor starts with, when known; a view plugin checks it anyway.
 */
export function tilekernelExtension(python?: Language | null, initialDoc?: string): Extension {
  const parts: Extension[] = [magicEnd, decorations, theme];
  if (python) {
    const tilekernel = Prec.highest(language.of(tilekernelLanguage(python)));
    const compartment = new Compartment();
    const wanted = (magic: boolean) => (magic ? tilekernel : []);
    const active = (state: EditorState) => compartment.get(state) === tilekernel;
    parts.push(
      compartment.of(wanted(initialDoc !== undefined && magicLineEnd(initialDoc.slice(0, 4096)) >= 0)),
      // Typing or deleting the magic switches the language in the same transaction.
      EditorState.transactionExtender.of(tr => {
        if (!tr.docChanged) {
          return null;
        }
        const magic = magicLineEnd(tr.newDoc.sliceString(0, Math.min(tr.newDoc.length, 4096))) >= 0;
        return magic === active(tr.startState) ? null : { effects: compartment.reconfigure(wanted(magic)) };
      }),
      // An editor created with the magic already in it, without `initialDoc`.
      ViewPlugin.define(view => {
        const magic = view.state.field(magicEnd, false) ?? magicEndOf(view.state);
        if ((magic >= 0) !== active(view.state)) {
          queueMicrotask(() => {
            const now = (view.state.field(magicEnd, false) ?? magicEndOf(view.state)) >= 0;
            if (now !== active(view.state)) {
              view.dispatch({ effects: compartment.reconfigure(wanted(now)) });
            }
          });
        }
        return {};
      })
    );
  }
  return parts;
}

export interface FlagCompletion {
  /** offsets in the text where the completed word starts and ends */
  start: number;
  end: number;
  items: { label: string; documentation: string; type: string }[];
}

/** Completions at `offset` in a cell's `text`: the magic's name, its flags, or a flag's values. */
export function flagCompletions(text: string, offset: number): FlagCompletion | null {
  const lineEnd = text.indexOf('\n');
  const firstEnd = lineEnd < 0 ? text.length : lineEnd;
  if (offset > firstEnd) {
    return null;
  }
  const line = text.slice(0, firstEnd);
  const before = line.slice(0, offset);
  let wordStart = before.length;
  while (wordStart > 0 && !/\s/.test(before[wordStart - 1])) {
    wordStart--;
  }
  let wordEnd = offset;
  while (wordEnd < line.length && !/\s/.test(line[wordEnd])) {
    wordEnd++;
  }
  const word = before.slice(wordStart);
  if (wordStart === 0) {
    if (word.startsWith('%%') && MAGIC.startsWith(word) && word !== MAGIC) {
      return { start: 0, end: wordEnd, items: [{ label: MAGIC, documentation: 'compile the kernels of this cell and show what the compiler did', type: 'magic' }] };
    }
    return null;
  }
  if (!line.startsWith(MAGIC)) {
    return null;
  }
  if (word.startsWith('-')) {
    const items = FLAGS.filter(([flag]) => flag.startsWith(word))
      .map(([label, documentation]) => ({ label, documentation, type: 'flag' }));
    return items.length ? { start: wordStart, end: wordEnd, items } : null;
  }
  // The value of a flag that takes one of a few words.
  const previous = before.slice(0, wordStart).trimEnd().split(/\s+/).pop() ?? '';
  const values = FLAG_VALUES[previous];
  if (values) {
    const items = values.filter(v => v.startsWith(word)).map(label => ({ label, documentation: `${previous} ${label}`, type: 'value' }));
    return items.length ? { start: wordStart, end: wordEnd, items } : null;
  }
  return null;
}
