/**
 * Bank conflicts of every access to a shared tile: the conflict degree of
 * each warp instruction, with the swizzled layout and with row-major, side by
 * side. One square per warp instruction; hover it for its degree.
 */

import { code, frame, h, note, str, table } from '../dom';

export interface BankAccess {
  name: string;
  instruction: string;
  swizzled: boolean;
  conflict_degree_per_instruction: number[];
  max_degree: number;
}

export interface BankConflictsPayload {
  version?: number;
  kernel?: string;
  buffer?: string;
  accesses?: BankAccess[];
}

export function degreeWords(degree: number): string {
  return degree <= 1 ? 'conflict-free' : `${degree}-way conflict`;
}

export function degreeColor(degree: number): string {
  if (degree <= 1) {
    return '#4caf50';
  }
  if (degree <= 2) {
    return '#ffb74d';
  }
  if (degree <= 4) {
    return '#f57c00';
  }
  return '#d32f2f';
}

interface Group {
  name: string;
  instruction: string;
  swizzled?: BankAccess;
  rowMajor?: BankAccess;
}

/** The accesses paired: each (name, instruction) with its swizzled and its row-major row. */
export function groupAccesses(accesses: BankAccess[]): Group[] {
  const groups: Group[] = [];
  for (const access of accesses) {
    let group = groups[groups.length - 1];
    const same = group && group.name === access.name && group.instruction === access.instruction &&
      !(access.swizzled ? group.swizzled : group.rowMajor);
    if (!same) {
      group = { name: str(access.name), instruction: str(access.instruction) };
      groups.push(group);
    }
    if (access.swizzled) {
      group.swizzled = access;
    } else {
      group.rowMajor = access;
    }
  }
  return groups;
}

function strip(access: BankAccess | undefined, label: string): HTMLElement {
  if (!access) {
    return h('span', { class: 'tl-muted' }, '\u2014');
  }
  const degrees = Array.isArray(access.conflict_degree_per_instruction) ? access.conflict_degree_per_instruction : [];
  const worst = Number(access.max_degree) || Math.max(1, ...degrees);
  const bad = degrees.filter(d => d > 1).length;
  const squares = h('div', { class: 'tl-bank-strip' });
  degrees.slice(0, 512).forEach((degree, k) => {
    squares.appendChild(h('span', {
      class: 'tl-bank-square',
      style: { background: degreeColor(degree) },
      title: `${label}, warp instruction ${k}: ${degreeWords(degree)}`,
      data: { degree }
    }));
  });
  if (degrees.length > 512) {
    squares.appendChild(h('span', { class: 'tl-muted' }, ` \u2026 ${degrees.length} in all`));
  }
  return h('div', null,
    h('span', { class: worst > 1 ? 'tl-bad' : 'tl-good' }, degreeWords(worst)),
    bad ? h('span', { class: 'tl-muted' }, ` in ${bad} of ${degrees.length}`) : null,
    squares);
}

export function renderBankConflicts(data: BankConflictsPayload): HTMLElement {
  const accesses = Array.isArray(data.accesses) ? data.accesses : [];
  const groups = groupAccesses(accesses);
  const title = ['bank conflicts \u00b7 ', code(data.buffer), ' \u00b7 ', code(data.kernel)];
  if (groups.length === 0) {
    return frame('bank_conflicts', title, note('No thread reads or writes it with its own loads and stores (TMA copies and warpgroup MMA move shared memory without them).'));
  }
  const rows = groups.map(g => [
    g.name,
    g.instruction,
    String((g.swizzled ?? g.rowMajor)?.conflict_degree_per_instruction?.length ?? 0),
    strip(g.swizzled, 'swizzled'),
    strip(g.rowMajor, 'row-major')
  ]);
  const worst = (key: 'swizzled' | 'rowMajor') => Math.max(1, ...groups.map(g => Number(g[key]?.max_degree) || 1));
  return frame('bank_conflicts', title,
    note('32 banks of 4 bytes. The degree of a warp instruction is the largest number of different ' +
      '4-byte words one bank must serve in one phase (1 = conflict-free). One square per warp instruction.'),
    h('div', { class: 'tl-bank-summary' },
      'worst: swizzled ', h('span', { class: worst('swizzled') > 1 ? 'tl-bad' : 'tl-good' }, degreeWords(worst('swizzled'))),
      ', row-major ', h('span', { class: worst('rowMajor') > 1 ? 'tl-bad' : 'tl-good' }, degreeWords(worst('rowMajor')))),
    h('div', { class: 'tl-scroll' },
      table(['access', 'instruction', 'warp instructions', 'swizzled', 'row-major'], rows, 'tl-bank-table')));
}
