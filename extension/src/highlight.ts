/**
 * A small tokenizer for the code tilelab shows: TVMScript/Python IR, CUDA C,
 * PTX, SASS and LLVM IR. It only colours; it never changes or evaluates the
 * text. Lines are tokenized one by one (with a little state for multi-line
 * strings and comments), so a diff can colour the lines it shows and a long
 * listing can be rendered in pieces.
 */

import { h } from './dom';

export type Language = 'python' | 'tir' | 'cuda' | 'ptx' | 'sass' | 'llvm' | 'text';

/** A token: its class (kw, str, num, com, fn, ty, dec, prim, var, op) or '' and its text. */
export type Token = [string, string];

const PY_KEYWORDS = new Set(
  ('and as assert async await break class continue def del elif else except finally for from ' +
    'global if import in is lambda nonlocal not or pass raise return try while with yield ' +
    'None True False').split(' ')
);
const C_KEYWORDS = new Set(
  ('auto break case const constexpr continue default do else enum extern for goto if inline ' +
    'return sizeof static struct switch template typedef typename union volatile while ' +
    '__global__ __device__ __host__ __shared__ __restrict__ __forceinline__ ' +
    '__launch_bounds__ __syncthreads asm namespace using true false nullptr').split(' ')
);
const C_TYPES = new Set(
  ('void bool char short int long float double signed unsigned half half2 nv_bfloat16 ' +
    'nv_bfloat162 uint int2 int4 uint2 uint4 float2 float4 size_t int8_t int16_t int32_t ' +
    'int64_t uint8_t uint16_t uint32_t uint64_t dim3').split(' ')
);
const LLVM_KEYWORDS = new Set(
  ('define declare attributes target datalayout triple source_filename global constant ' +
    'private internal external dso_local local_unnamed_addr unnamed_addr align to br ret ' +
    'label phi call tail musttail load store getelementptr inbounds icmp fcmp add fadd sub ' +
    'fsub mul fmul sdiv udiv fdiv srem urem frem shl lshr ashr and or xor select alloca ' +
    'bitcast zext sext trunc fptrunc fpext sitofp uitofp fptosi fptoui ptrtoint inttoptr ' +
    'switch unreachable nsw nuw fast contract reassoc eq ne slt sle sgt sge ult ule ugt uge ' +
    'oeq one olt ole ogt oge ord uno ueq une true false null undef poison noalias nocapture ' +
    'readonly writeonly nonnull dereferenceable extractelement insertelement shufflevector ' +
    'vector metadata').split(' ')
);

type Rule = [RegExp, string | ((match: string) => string)];

function rules(language: Language): Rule[] {
  switch (language) {
    case 'python':
    case 'tir':
      return [
        [/#.*/y, 'com'],
        [/[rbuRBU]{0,2}("""|''')/y, 'str-open'],
        [/[rbfuRBFU]{0,2}"(?:[^"\\]|\\.)*"|[rbfuRBFU]{0,2}'(?:[^'\\]|\\.)*'/y, 'str'],
        [/@[A-Za-z_][\w.]*/y, 'dec'],
        [/\b(?:T|I|tir|tirx)\.[A-Za-z_]\w*/y, 'prim'],
        [/\b\d[\w.]*(?:[eE][+-]?\d+)?/y, 'num'],
        [/[A-Za-z_]\w*(?=\s*\()/y, word => (PY_KEYWORDS.has(word) ? 'kw' : 'fn')],
        [/[A-Za-z_]\w*/y, word => (PY_KEYWORDS.has(word) ? 'kw' : '')],
        [/\s+/y, ''],
        [/[^\w\s]/y, 'op']
      ];
    case 'cuda':
      return [
        [/\/\/.*/y, 'com'],
        [/\/\*/y, 'com-open'],
        [/^\s*#\s*\w+.*/y, 'dec'],
        [/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/y, 'str'],
        [/\b(?:0[xX][\da-fA-F]+|\d[\w.]*(?:[eE][+-]?\d+)?[fFuUlL]*)/y, 'num'],
        [/[A-Za-z_]\w*(?=\s*\()/y, word => (C_KEYWORDS.has(word) ? 'kw' : 'fn')],
        [/[A-Za-z_]\w*/y, word => (C_KEYWORDS.has(word) ? 'kw' : C_TYPES.has(word) ? 'ty' : '')],
        [/\s+/y, ''],
        [/[^\w\s]/y, 'op']
      ];
    case 'ptx':
    case 'sass':
      return [
        [/\/\/.*/y, 'com'],
        [/\/\*/y, 'com-open'],
        [/"(?:[^"\\]|\\.)*"/y, 'str'],
        [/\.[A-Za-z_][\w]*/y, 'kw'],
        [/%[A-Za-z_][\w.]*/y, 'var'],
        [/\bR\d+\b|\bUR\d+\b|\bP\d+\b|\bRZ\b|\bPT\b/y, 'var'],
        [/\b(?:0[xX][\da-fA-F]+|0[fFdD][\da-fA-F]+|\d+(?:\.\d+)?)/y, 'num'],
        [/^\s*[A-Za-z_$][\w$]*:/y, 'dec'],
        [/[A-Za-z_][\w.]*/y, 'fn'],
        [/\s+/y, ''],
        [/[^\w\s]/y, 'op']
      ];
    case 'llvm':
      return [
        [/;.*/y, 'com'],
        [/c?"(?:[^"\\]|\\.)*"/y, 'str'],
        [/[%@][-\w$.]+|[%@]"(?:[^"\\]|\\.)*"/y, 'var'],
        [/![\w.]+/y, 'dec'],
        [/#\d+/y, 'dec'],
        [/\b(?:i\d+|half|bfloat|float|double|void|ptr|label|x86_fp80|fp128)\b\*?/y, 'ty'],
        [/-?\b(?:0x[\da-fA-F]+|\d+(?:\.\d+)?(?:e[+-]?\d+)?)/y, 'num'],
        [/^[\w.$]+:/y, 'dec'],
        [/[A-Za-z_][\w.]*/y, word => (LLVM_KEYWORDS.has(word) ? 'kw' : word.startsWith('llvm.') ? 'fn' : '')],
        [/\s+/y, ''],
        [/[^\w\s]/y, 'op']
      ];
    default:
      return [];
  }
}

const RULES = new Map<Language, Rule[]>();

function rulesOf(language: Language): Rule[] {
  let found = RULES.get(language);
  if (!found) {
    found = rules(language);
    RULES.set(language, found);
  }
  return found;
}

/** What the tokenizer carries from one line to the next: an open string or comment. */
export interface LineState {
  open: '' | '"""' | "'''" | '*/';
}

/** The tokens of one line; `state` is updated for the next line. */
export function tokenizeLine(line: string, language: Language, state: LineState = { open: '' }): Token[] {
  const tokens: Token[] = [];
  const table = rulesOf(language);
  let pos = 0;
  if (table.length === 0) {
    return [['', line]];
  }
  // Continue a multi-line string or comment from the previous line.
  if (state.open) {
    const end = line.indexOf(state.open);
    if (end < 0) {
      return [[state.open === '*/' ? 'com' : 'str', line]];
    }
    pos = end + state.open.length;
    tokens.push([state.open === '*/' ? 'com' : 'str', line.slice(0, pos)]);
    state.open = '';
  }
  while (pos < line.length) {
    let matched = false;
    for (const [pattern, kind] of table) {
      pattern.lastIndex = pos;
      const match = pattern.exec(line);
      if (!match || match[0].length === 0) {
        continue;
      }
      let text = match[0];
      let cls = typeof kind === 'function' ? kind(text) : kind;
      if (cls === 'str-open' || cls === 'com-open') {
        const close = cls === 'str-open' ? (match[1] as '"""' | "'''") : '*/';
        const end = line.indexOf(close, pos + text.length);
        if (end < 0) {
          text = line.slice(pos);
          state.open = close;
        } else {
          text = line.slice(pos, end + close.length);
        }
        cls = cls === 'str-open' ? 'str' : 'com';
      }
      const last = tokens[tokens.length - 1];
      if (last && last[0] === cls) {
        last[1] += text;
      } else {
        tokens.push([cls, text]);
      }
      pos += text.length;
      matched = true;
      break;
    }
    if (!matched) {
      tokens.push(['', line.slice(pos)]);
      break;
    }
  }
  return tokens;
}

/** Append the tokens of one line to `parent` as spans (text only). */
export function appendTokens(parent: HTMLElement, tokens: Token[]): void {
  for (const [cls, text] of tokens) {
    if (cls) {
      const span = document.createElement('span');
      span.className = `tl-tok-${cls}`;
      span.textContent = text;
      parent.appendChild(span);
    } else {
      parent.appendChild(document.createTextNode(text));
    }
  }
}

/** The language of a source payload or a code kind, for the tokenizer. */
export function languageOf(name: string): Language {
  const known: Record<string, Language> = {
    cuda: 'cuda', c: 'cuda', cpp: 'cuda', ptx: 'ptx', sass: 'sass', llvm: 'llvm',
    python: 'python', tir: 'tir'
  };
  return known[name] ?? 'text';
}

export interface CodeOptions {
  language: Language;
  /** the number of the first line (default 1) */
  firstLine?: number;
  /** render at most this many lines at first; a button renders the rest */
  limit?: number;
  cls?: string;
}

/**
 * Highlighted code with line numbers: a gutter and the text, one div per line.
 * With `limit`, only the first lines are built until the reader asks for more.
 */
export function codeBlock(text: string, options: CodeOptions): HTMLElement {
  const lines = text.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') {
    lines.pop();
  }
  const first = options.firstLine ?? 1;
  const gutter = h('div', { class: 'tl-gutter', attrs: { 'aria-label': 'line numbers' } });
  const body = h('div', { class: 'tl-code-text' });
  const root = h('div', { class: `tl-code ${options.cls ?? ''}`.trim() },
    h('div', { class: 'tl-code-scroll' }, gutter, body));
  const state: LineState = { open: '' };
  let done = 0;
  const renderUpTo = (end: number) => {
    const numbers: string[] = [];
    const fragment = document.createDocumentFragment();
    for (let i = done; i < end; i++) {
      const row = document.createElement('div');
      row.className = 'tl-code-line';
      appendTokens(row, tokenizeLine(lines[i], options.language, state));
      if (lines[i] === '') {
        row.appendChild(document.createTextNode('\u200b'));
      }
      fragment.appendChild(row);
      numbers.push(String(first + i));
    }
    body.appendChild(fragment);
    gutter.appendChild(document.createTextNode((done > 0 ? '\n' : '') + numbers.join('\n')));
    done = end;
  };
  const limit = options.limit ?? Infinity;
  renderUpTo(Math.min(lines.length, limit));
  if (done < lines.length) {
    const more = h('button', { class: 'tl-button tl-more' },
      `show all ${lines.length} lines (${lines.length - done} more)`);
    more.type = 'button';
    more.addEventListener('click', () => {
      renderUpTo(lines.length);
      more.remove();
    });
    root.appendChild(more);
  }
  root.dataset.lines = String(lines.length);
  return root;
}
