/**
 * Line diffs of two IR texts (Myers' O(ND) algorithm), grouped into hunks
 * with context, and drawn unified or side by side.
 *
 * Common lines at both ends are trimmed first: consecutive passes usually
 * change a few lines of a long function, so D stays small and a diff of two
 * FlashAttention IRs takes a millisecond or two.
 */

import { Child, h } from './dom';
import { Language, LineState, appendTokens, tokenizeLine } from './highlight';

/** One line of a diff: ' ' kept, '-' removed, '+' added; line numbers are 1-based (0: none). */
export interface DiffLine {
  op: ' ' | '-' | '+';
  text: string;
  a: number;
  b: number;
}

/** Past this many differing lines the diff gives up and replaces everything. */
const MAX_EDITS = 4000;

/** The lines of `before` and `after` as kept, removed and added lines, in order. */
export function diffLines(before: string, after: string): DiffLine[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) {
    start++;
  }
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out: DiffLine[] = [];
  for (let i = 0; i < start; i++) {
    out.push({ op: ' ', text: a[i], a: i + 1, b: i + 1 });
  }
  for (const line of middle(a, b, start, endA, start, endB)) {
    out.push(line);
  }
  for (let i = endA, j = endB; i < a.length; i++, j++) {
    out.push({ op: ' ', text: a[i], a: i + 1, b: j + 1 });
  }
  return out;
}

export function splitLines(text: string): string[] {
  if (!text) {
    return [];
  }
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') {
    lines.pop();
  }
  return lines;
}

/** Myers' greedy algorithm on a[a0:a1] and b[b0:b1], with the traces kept to walk back. */
function middle(a: string[], b: string[], a0: number, a1: number, b0: number, b1: number): DiffLine[] {
  const n = a1 - a0;
  const m = b1 - b0;
  const replaceAll = (): DiffLine[] => [
    ...a.slice(a0, a1).map((text, i) => ({ op: '-' as const, text, a: a0 + i + 1, b: 0 })),
    ...b.slice(b0, b1).map((text, j) => ({ op: '+' as const, text, a: 0, b: b0 + j + 1 }))
  ];
  if (n === 0 || m === 0) {
    return replaceAll();
  }
  const max = n + m;
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  // trace[d]: the frontier before step d, for k in [-d, d] (stored at k + d)
  const trace: Int32Array[] = [];
  let found = -1;
  for (let d = 0; d <= Math.min(max, MAX_EDITS); d++) {
    trace.push(v.slice(offset - d, offset + d + 1));
    for (let k = -d; k <= d; k += 2) {
      let x: number;
      if (k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])) {
        x = v[offset + k + 1];
      } else {
        x = v[offset + k - 1] + 1;
      }
      let y = x - k;
      while (x < n && y < m && a[a0 + x] === b[b0 + y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        found = d;
        break;
      }
    }
    if (found >= 0) {
      break;
    }
  }
  if (found < 0) {
    return replaceAll();
  }
  // Walk back from (n, m) through the saved frontiers.
  const ops: DiffLine[] = [];
  let x = n;
  let y = m;
  for (let d = found; d > 0; d--) {
    const prev = trace[d];
    const at = (k: number) => prev[k + d];
    const k = x - y;
    let prevK: number;
    if (k === -d || (k !== d && at(k - 1) < at(k + 1))) {
      prevK = k + 1;
    } else {
      prevK = k - 1;
    }
    const prevX = at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      x--;
      y--;
      ops.push({ op: ' ', text: a[a0 + x], a: a0 + x + 1, b: b0 + y + 1 });
    }
    if (x === prevX) {
      y--;
      ops.push({ op: '+', text: b[b0 + y], a: 0, b: b0 + y + 1 });
    } else {
      x--;
      ops.push({ op: '-', text: a[a0 + x], a: a0 + x + 1, b: 0 });
    }
  }
  while (x > 0 && y > 0) {
    x--;
    y--;
    ops.push({ op: ' ', text: a[a0 + x], a: a0 + x + 1, b: b0 + y + 1 });
  }
  ops.reverse();
  return ops;
}

export interface Hunk {
  lines: DiffLine[];
  /** kept lines hidden before this hunk */
  skipped: number;
}

/** Changed lines with `context` kept lines around them; Infinity keeps every line. */
export function hunks(lines: DiffLine[], context = 3): { hunks: Hunk[]; trailing: number } {
  const changed: number[] = [];
  lines.forEach((line, i) => {
    if (line.op !== ' ') {
      changed.push(i);
    }
  });
  if (changed.length === 0) {
    return { hunks: [], trailing: lines.length };
  }
  const keep = new Uint8Array(lines.length);
  if (!isFinite(context)) {
    keep.fill(1);
  } else {
    for (const i of changed) {
      for (let j = Math.max(0, i - context); j <= Math.min(lines.length - 1, i + context); j++) {
        keep[j] = 1;
      }
    }
  }
  const result: Hunk[] = [];
  let skipped = 0;
  let current: Hunk | null = null;
  for (let i = 0; i < lines.length; i++) {
    if (keep[i]) {
      if (!current) {
        current = { lines: [], skipped };
        result.push(current);
        skipped = 0;
      }
      current.lines.push(lines[i]);
    } else {
      current = null;
      skipped++;
    }
  }
  return { hunks: result, trailing: skipped };
}

export function countChanges(lines: DiffLine[]): { added: number; removed: number } {
  let added = 0;
  let removed = 0;
  for (const line of lines) {
    if (line.op === '+') {
      added++;
    } else if (line.op === '-') {
      removed++;
    }
  }
  return { added, removed };
}

/** The unified diff as text, like `diff -u` (used for copying and in tests). */
export function unifiedText(lines: DiffLine[], from: string, to: string, context = 3): string {
  const { hunks: parts } = hunks(lines, context);
  if (parts.length === 0) {
    return '';
  }
  const out = [`--- ${from}`, `+++ ${to}`];
  for (const hunk of parts) {
    const firstA = hunk.lines.find(l => l.a > 0)?.a ?? 0;
    const firstB = hunk.lines.find(l => l.b > 0)?.b ?? 0;
    const countA = hunk.lines.filter(l => l.op !== '+').length;
    const countB = hunk.lines.filter(l => l.op !== '-').length;
    out.push(`@@ -${firstA},${countA} +${firstB},${countB} @@`);
    for (const line of hunk.lines) {
      out.push(line.op + line.text);
    }
  }
  return out.join('\n');
}

function skippedRow(count: number, columns: number): HTMLElement {
  return h('div', { class: 'tl-diff-skip', style: { 'grid-column': `1 / span ${columns}` } },
    `\u22ef ${count} unchanged line${count === 1 ? '' : 's'}`);
}

function codeCell(text: string, language: Language, cls: string): HTMLElement {
  const cell = document.createElement('div');
  cell.className = cls;
  appendTokens(cell, tokenizeLine(text, language, { open: '' } as LineState));
  if (!text) {
    cell.appendChild(document.createTextNode('\u200b'));
  }
  return cell;
}

function numberCell(value: number, cls = 'tl-diff-num'): HTMLElement {
  const cell = document.createElement('div');
  cell.className = cls;
  cell.textContent = value > 0 ? String(value) : '';
  return cell;
}

const OP_CLASS = { ' ': 'tl-diff-ctx', '-': 'tl-diff-del', '+': 'tl-diff-add' };

/** The unified diff: old and new line numbers, the sign, the highlighted line. */
export function unifiedView(lines: DiffLine[], language: Language, context = 3): HTMLElement {
  const { hunks: parts, trailing } = hunks(lines, context);
  const grid = h('div', { class: 'tl-diff tl-diff-unified' });
  const fragment = document.createDocumentFragment();
  for (const hunk of parts) {
    if (hunk.skipped) {
      fragment.appendChild(skippedRow(hunk.skipped, 4));
    }
    for (const line of hunk.lines) {
      const cls = OP_CLASS[line.op];
      fragment.appendChild(numberCell(line.a, `tl-diff-num ${cls}`));
      fragment.appendChild(numberCell(line.b, `tl-diff-num ${cls}`));
      const sign = document.createElement('div');
      sign.className = `tl-diff-sign ${cls}`;
      sign.textContent = line.op;
      fragment.appendChild(sign);
      fragment.appendChild(codeCell(line.text, language, `tl-diff-code ${cls}`));
    }
  }
  if (parts.length && trailing) {
    fragment.appendChild(skippedRow(trailing, 4));
  }
  grid.appendChild(fragment);
  return grid;
}

/** Side by side: the old text on the left, the new on the right, changed lines paired. */
export function sideBySideView(lines: DiffLine[], language: Language, context = 3,
  headers: [Child, Child] = ['before', 'after']): HTMLElement {
  const { hunks: parts, trailing } = hunks(lines, context);
  const grid = h('div', { class: 'tl-diff tl-diff-side' },
    h('div', { class: 'tl-diff-head', style: { 'grid-column': '1 / span 2' } }, headers[0]),
    h('div', { class: 'tl-diff-head', style: { 'grid-column': '3 / span 2' } }, headers[1]));
  const fragment = document.createDocumentFragment();
  const row = (left: DiffLine | null, right: DiffLine | null) => {
    const leftCls = left ? OP_CLASS[left.op] : 'tl-diff-none';
    const rightCls = right ? OP_CLASS[right.op] : 'tl-diff-none';
    fragment.appendChild(numberCell(left ? left.a : 0, `tl-diff-num ${leftCls}`));
    fragment.appendChild(codeCell(left ? left.text : '', language, `tl-diff-code ${leftCls}`));
    fragment.appendChild(numberCell(right ? right.b : 0, `tl-diff-num ${rightCls}`));
    fragment.appendChild(codeCell(right ? right.text : '', language, `tl-diff-code ${rightCls}`));
  };
  for (const hunk of parts) {
    if (hunk.skipped) {
      fragment.appendChild(skippedRow(hunk.skipped, 4));
    }
    let i = 0;
    const ls = hunk.lines;
    while (i < ls.length) {
      if (ls[i].op === ' ') {
        row(ls[i], ls[i]);
        i++;
        continue;
      }
      // A run of removals and additions: pair them up line by line.
      const removed: DiffLine[] = [];
      const added: DiffLine[] = [];
      while (i < ls.length && ls[i].op !== ' ') {
        (ls[i].op === '-' ? removed : added).push(ls[i]);
        i++;
      }
      for (let j = 0; j < Math.max(removed.length, added.length); j++) {
        row(removed[j] ?? null, added[j] ?? null);
      }
    }
  }
  if (parts.length && trailing) {
    fragment.appendChild(skippedRow(trailing, 4));
  }
  grid.appendChild(fragment);
  return grid;
}
