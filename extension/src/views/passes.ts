/**
 * The pass explorer: the list of passes, and for the selected one its IR, or
 * its diff against the previous pass or any other, unified or side by side.
 *
 * Only the selected pass is rendered (and its diff computed, then cached), so a
 * FlashAttention trace with every pass opens as fast as a vector add.
 */

import { Child, button, code, frame, h, note, num, select, str } from '../dom';
import { codeBlock, languageOf } from '../highlight';
import { countChanges, diffLines, DiffLine, sideBySideView, unifiedText, unifiedView } from '../diff';

export interface PassRecord {
  name: string;
  ir: string;
  changed: boolean;
  duration_ms?: number;
  owner?: string;
  stage?: string;
}

export interface PassesPayload {
  version?: number;
  kernel?: string;
  target?: string;
  source?: { filename?: string; first_line?: number; text?: string };
  passes?: PassRecord[];
}

export type PassMode = 'ir' | 'diff' | 'side';

/** The index of the first pass whose lines mentioning `name` differ from the pass before. */
export function firstChange(passes: PassRecord[], name: string): number | null {
  const needle = name.trim();
  if (!needle) {
    return null;
  }
  const cache = new Map<number, string[]>();
  const mentions = (i: number) => {
    let found = cache.get(i);
    if (!found) {
      found = (passes[i].ir ?? '').split('\n').filter(line => line.includes(needle));
      cache.set(i, found);
    }
    return found;
  };
  // As tilelab.notebook.views.first_change_index: a pass that changed the IR and
  // changed the lines mentioning the name.
  for (let i = 1; i < passes.length; i++) {
    if (!passes[i].changed) {
      continue;
    }
    const before = mentions(i - 1);
    const after = mentions(i);
    if (before.length !== after.length || before.some((line, j) => line !== after[j])) {
      return i;
    }
  }
  return null;
}

export function passLabel(passes: PassRecord[], i: number): string {
  return `#${i} ${str(passes[i]?.name)}`;
}

const CONTEXTS: [string, string][] = [
  ['3 lines of context', '3'],
  ['10 lines of context', '10'],
  ['whole IR', 'all']
];

export function renderPasses(data: PassesPayload): HTMLElement {
  const started = performance.now();
  const passes: PassRecord[] = Array.isArray(data.passes) ? data.passes : [];
  const changedCount = passes.filter(p => p.changed).length;
  const noops = passes.length - changedCount;
  const state = {
    hideNoops: noops > 0,
    selected: Math.max(0, passes.findIndex((p, i) => i > 0 && p.changed)),
    mode: 'diff' as PassMode,
    against: -1,
    context: '3',
    find: ''
  };
  const diffs = new Map<string, DiffLine[]>();

  const list = h('div', { class: 'tl-pass-list', attrs: { role: 'listbox', tabindex: 0, 'aria-label': 'passes' } });
  const panel = h('div', { class: 'tl-pass-panel' });
  const status = h('span', { class: 'tl-find-status' });
  const items: HTMLElement[] = passes.map((p, i) => {
    const item = h('div', {
      class: `tl-pass ${p.changed ? 'tl-pass-changed' : 'tl-pass-noop'}`,
      data: { index: i, name: str(p.name) },
      attrs: { role: 'option' },
      title: `${str(p.owner)} · ${str(p.stage)} · ${num(p.duration_ms ?? 0, 3)} ms · ${p.changed ? 'changed the IR' : 'no change'}`
    },
    h('span', { class: 'tl-pass-mark' }, p.changed ? '\u25cf' : '\u25cb'),
    h('span', { class: 'tl-pass-index' }, `#${i}`),
    h('span', { class: 'tl-pass-name' }, str(p.name)),
    h('span', { class: `tl-pass-owner tl-owner-${p.owner === 'tilelab' ? 'tilelab' : 'tvm'}` }, str(p.owner)),
    h('span', { class: 'tl-pass-ms' }, p.duration_ms !== undefined ? `${num(p.duration_ms, 3)} ms` : ''));
    item.addEventListener('click', () => choose(i));
    return item;
  });
  list.append(...items);

  const againstSelect = select([], '-1', value => {
    state.against = Number(value);
    if (state.mode === 'ir') {
      setMode('diff');
    } else {
      renderPanel();
    }
  }, 'tl-against');
  const modeButtons = new Map<PassMode, HTMLButtonElement>();
  for (const [mode, label] of [['ir', 'IR'], ['diff', 'diff'], ['side', 'side by side']] as [PassMode, string][]) {
    modeButtons.set(mode, button(label, () => setMode(mode), `tl-mode tl-mode-${mode}`));
  }
  const hide = h('input', { class: 'tl-hide-noops', attrs: { type: 'checkbox', checked: state.hideNoops } });
  hide.addEventListener('change', () => {
    state.hideNoops = hide.checked;
    refreshList();
    const next = visible(state.selected) ? state.selected : nearestVisible(state.selected);
    if (next >= 0) {
      choose(next);
    }
  });
  const findInput = h('input', {
    class: 'tl-find',
    attrs: { type: 'text', placeholder: 'buffer or variable', spellcheck: 'false', autocomplete: 'off' }
  });
  const runFind = () => {
    state.find = findInput.value.trim();
    if (!state.find) {
      status.textContent = '';
      renderPanel();
      return;
    }
    const found = firstChange(passes, state.find);
    if (found === null) {
      status.textContent = `no pass changes the lines that mention ${state.find}`;
      status.dataset.found = '';
      renderPanel();
      return;
    }
    status.textContent = `${state.find}: first changed by ${passLabel(passes, found)}`;
    status.dataset.found = String(found);
    state.against = -1;
    againstSelect.value = '-1';
    state.mode = state.mode === 'ir' ? 'diff' : state.mode;
    choose(found);
  };
  findInput.addEventListener('keydown', (event: KeyboardEvent) => {
    if (event.key === 'Enter') {
      runFind();
    }
  });
  const contextSelect = select(CONTEXTS, state.context, value => {
    state.context = value;
    renderPanel();
  }, 'tl-context');

  function visible(i: number): boolean {
    return !state.hideNoops || passes[i]?.changed || i === 0;
  }
  function nearestVisible(i: number): number {
    for (let d = 0; d < passes.length; d++) {
      if (i + d < passes.length && visible(i + d)) {
        return i + d;
      }
      if (i - d >= 0 && visible(i - d)) {
        return i - d;
      }
    }
    return -1;
  }
  function refreshList(): void {
    items.forEach((item, i) => {
      item.hidden = !visible(i);
      item.classList.toggle('tl-selected', i === state.selected);
      item.setAttribute('aria-selected', String(i === state.selected));
    });
    // The comparison choices: the previous pass, or any shown pass.
    const options: [string, string][] = [['the previous pass', '-1']];
    passes.forEach((_, i) => {
      if (visible(i)) {
        options.push([passLabel(passes, i), String(i)]);
      }
    });
    againstSelect.replaceChildren(...options.map(([label, value]) => {
      const option = h('option', null, label);
      option.value = value;
      return option;
    }));
    if (!options.some(([, v]) => v === String(state.against))) {
      state.against = -1;
    }
    againstSelect.value = String(state.against);
  }
  function setMode(mode: PassMode): void {
    state.mode = mode;
    renderPanel();
  }
  function choose(i: number): void {
    if (i < 0 || i >= passes.length) {
      return;
    }
    if (!visible(i)) {
      hide.checked = false;
      state.hideNoops = false;
      refreshList();
    }
    state.selected = i;
    items.forEach((item, j) => {
      item.classList.toggle('tl-selected', j === i);
      item.setAttribute('aria-selected', String(j === i));
    });
    const item = items[i];
    if (item && typeof item.scrollIntoView === 'function' && item.parentElement) {
      const listBox = list.getBoundingClientRect();
      const box = item.getBoundingClientRect();
      if (box.top < listBox.top || box.bottom > listBox.bottom) {
        list.scrollTop += box.top - listBox.top - listBox.height / 3;
      }
    }
    renderPanel();
  }
  list.addEventListener('keydown', (event: KeyboardEvent) => {
    if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') {
      return;
    }
    event.preventDefault();
    const step = event.key === 'ArrowDown' ? 1 : -1;
    for (let i = state.selected + step; i >= 0 && i < passes.length; i += step) {
      if (visible(i)) {
        choose(i);
        return;
      }
    }
  });

  function diffOf(a: number, b: number): DiffLine[] {
    const key = `${a}:${b}`;
    let found = diffs.get(key);
    if (!found) {
      found = diffLines(passes[a].ir ?? '', passes[b].ir ?? '');
      diffs.set(key, found);
    }
    return found;
  }

  function markMatches(root: HTMLElement): void {
    if (!state.find) {
      return;
    }
    root.querySelectorAll('.tl-code-line, .tl-diff-code').forEach(line => {
      if ((line.textContent ?? '').includes(state.find)) {
        line.classList.add('tl-match');
      }
    });
  }

  function renderPanel(): void {
    const t0 = performance.now();
    modeButtons.forEach((b, mode) => {
      b.classList.toggle('tl-active', mode === state.mode);
      b.setAttribute('aria-pressed', String(mode === state.mode));
    });
    const i = state.selected;
    const p = passes[i];
    const parts: Child[] = [];
    if (!p) {
      panel.replaceChildren(note('This trace has no passes.'));
      return;
    }
    const meta = h('span', { class: 'tl-muted' },
      ` ${str(p.owner)} · ${str(p.stage)} · ${num(p.duration_ms ?? 0, 3)} ms · ${p.changed ? 'changed' : 'unchanged'}`);
    const context = state.context === 'all' ? Infinity : Number(state.context);
    const other = state.against < 0 ? i - 1 : state.against;
    if (state.mode === 'ir' || other < 0 || other === i) {
      const why = state.mode !== 'ir' && other < 0 ? note('The first pass has nothing before it: its IR.') : null;
      const why2 = state.mode !== 'ir' && other === i ? note('A pass compared with itself: its IR.') : null;
      parts.push(h('div', { class: 'tl-panel-head' }, 'IR after ', code(passLabel(passes, i)), meta), why, why2,
        codeBlock(p.ir ?? '', { language: languageOf('tir'), limit: 4000, cls: 'tl-ir' }));
    } else {
      const lines = diffOf(other, i);
      const { added, removed } = countChanges(lines);
      const head = h('div', { class: 'tl-panel-head' }, 'diff ', code(passLabel(passes, other)), ' \u2192 ',
        code(passLabel(passes, i)), h('span', { class: 'tl-diff-stat' },
          h('span', { class: 'tl-diff-stat-add' }, ` +${added}`), h('span', { class: 'tl-diff-stat-del' }, ` \u2212${removed}`)),
        meta);
      parts.push(head);
      if (added + removed === 0) {
        parts.push(note('No change: the IR is the same as after ', code(passLabel(passes, other)), '.'));
      } else if (state.mode === 'side') {
        parts.push(sideBySideView(lines, 'tir', context, [code(passLabel(passes, other)), code(passLabel(passes, i))]));
      } else {
        const view = unifiedView(lines, 'tir', context);
        view.dataset.unified = 'true';
        parts.push(view);
        const copy = button('copy diff', () => {
          const text = unifiedText(lines, passLabel(passes, other), passLabel(passes, i), context);
          void navigator.clipboard?.writeText(text);
        }, 'tl-copy', 'copy the unified diff as text');
        head.appendChild(copy);
      }
    }
    panel.replaceChildren(...parts.filter((x): x is HTMLElement => !!x));
    markMatches(panel);
    panel.dataset.pass = String(i);
    panel.dataset.mode = state.mode;
    panel.dataset.renderMs = (performance.now() - t0).toFixed(1);
    panel.scrollTop = 0;
  }

  const source = data.source?.text
    ? (() => {
      const details = h('details', { class: 'tl-source' },
        h('summary', null, `kernel source (${str(data.source?.filename)}, line ${str(data.source?.first_line)})`));
      details.addEventListener('toggle', () => {
        if (details.open && details.childElementCount === 1) {
          details.appendChild(codeBlock(data.source?.text ?? '', {
            language: 'python', firstLine: Number(data.source?.first_line) || 1
          }));
        }
      }, { once: false });
      return details;
    })()
    : null;

  const title = [
    'passes \u00b7 ', code(data.kernel), ` \u00b7 ${str(data.target)} `,
    h('span', { class: 'tl-muted' }, `${passes.length} passes, ${changedCount} changed`)
  ];
  const toolbar = h('div', { class: 'tl-controls' },
    h('label', { class: 'tl-control' }, hide, ` hide no-op passes (${noops})`),
    h('span', { class: 'tl-control tl-modes' }, ...modeButtons.values()),
    h('label', { class: 'tl-control' }, 'against ', againstSelect),
    h('label', { class: 'tl-control' }, contextSelect));
  const findBar = h('div', { class: 'tl-controls' },
    h('label', { class: 'tl-control' }, 'find ', findInput),
    button('first change', runFind, 'tl-find-button', 'the first pass that changed the lines mentioning this name'),
    ' ', status);
  const root = frame('passes', title, toolbar, findBar,
    passes.length ? h('div', { class: 'tl-pass-body' }, list, panel) : note('This trace has no passes.'),
    source);
  if (passes.length) {
    refreshList();
    renderPanel();
  }
  root.dataset.renderMs = (performance.now() - started).toFixed(1);
  return root;
}
