import { describe, expect, it } from 'vitest';

import { countChanges, diffLines, hunks, sideBySideView, unifiedText, unifiedView } from '../src/diff';

function rebuild(lines: ReturnType<typeof diffLines>, side: 'a' | 'b'): string[] {
  return lines.filter(l => l.op === ' ' || l.op === (side === 'a' ? '-' : '+')).map(l => l.text);
}

function lcs(a: string[], b: string[]): number {
  const t = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      t[i][j] = a[i] === b[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
    }
  }
  return t[0][0];
}

describe('diffLines', () => {
  it('finds the changed lines of a small edit', () => {
    const lines = diffLines('a\nb\nc\nd\n', 'a\nB\nc\nd\ne\n');
    expect(lines.map(l => l.op + l.text)).toEqual([' a', '-b', '+B', ' c', ' d', '+e']);
    expect(countChanges(lines)).toEqual({ added: 2, removed: 1 });
    expect(lines.find(l => l.text === 'B')).toMatchObject({ a: 0, b: 2 });
  });

  it('handles empty sides and identical texts', () => {
    expect(diffLines('', 'x\ny').map(l => l.op)).toEqual(['+', '+']);
    expect(diffLines('x\ny', '').map(l => l.op)).toEqual(['-', '-']);
    expect(countChanges(diffLines('same\ntext', 'same\ntext'))).toEqual({ added: 0, removed: 0 });
  });

  it('is a shortest edit script on random texts', () => {
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    for (let trial = 0; trial < 200; trial++) {
      const a = Array.from({ length: rand(30) }, () => 'abcde'[rand(5)]);
      const b = Array.from({ length: rand(30) }, () => 'abcde'[rand(5)]);
      const lines = diffLines(a.join('\n'), b.join('\n'));
      expect(rebuild(lines, 'a')).toEqual(a);
      expect(rebuild(lines, 'b')).toEqual(b);
      expect(lines.filter(l => l.op === ' ').length).toBe(lcs(a, b));
    }
  });

  it('groups changes into hunks with context', () => {
    const a = Array.from({ length: 40 }, (_, i) => `line ${i}`);
    const b = a.slice();
    b[5] = 'changed 5';
    b[30] = 'changed 30';
    const lines = diffLines(a.join('\n'), b.join('\n'));
    const { hunks: parts, trailing } = hunks(lines, 3);
    expect(parts).toHaveLength(2);
    expect(parts[0].skipped).toBe(2);
    expect(parts[1].skipped).toBe(18);
    expect(trailing).toBe(6);
    const text = unifiedText(lines, 'before', 'after');
    expect(text.split('\n').slice(0, 3)).toEqual(['--- before', '+++ after', '@@ -3,7 +3,7 @@']);
    expect(text).toContain('-line 30\n+changed 30');
  });

  it('draws unified and side-by-side views with text only', () => {
    const lines = diffLines('x = 1\ny = <b>2</b>', 'x = 1\ny = <i>3</i>');
    const unified = unifiedView(lines, 'python');
    expect(unified.querySelectorAll('.tl-diff-add').length).toBeGreaterThan(0);
    expect(unified.querySelector('b, i')).toBeNull();
    expect(unified.textContent).toContain('<i>3</i>');
    const side = sideBySideView(lines, 'python');
    expect(side.querySelectorAll('.tl-diff-del').length).toBe(2);
    expect(side.querySelectorAll('.tl-diff-add').length).toBe(2);
  });
});
