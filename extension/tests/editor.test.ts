import { describe, expect, it } from 'vitest';

import { pythonLanguage } from '@codemirror/lang-python';
import { ensureSyntaxTree, language } from '@codemirror/language';
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { FLAGS, flagCompletions, magicLineEnd, tilekernelDecorations, tilekernelExtension } from '../src/editor/tilekernel';

const CELL = `%%tilekernel --target cpu --args "x, y" --check "x + y"
@tilelab.jit
def vector_add(A, B, block_size: int = 256):
    N = T.const("N")  # T.not_in_comments
    s = "T.not_in_strings"
    with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as block:
        for i in T.Parallel(block_size):
            pass
`;

function stateOf(doc: string): EditorState {
  // JupyterLab's Python language for the cell, plus ours
  return EditorState.create({ doc, extensions: [pythonLanguage, tilekernelExtension(pythonLanguage, doc)] });
}

function marks(state: EditorState): { text: string; cls: string }[] {
  const found: { text: string; cls: string }[] = [];
  const set = tilekernelDecorations(state);
  set.between(0, state.doc.length, (from, to, deco) => {
    found.push({ text: state.sliceDoc(from, to), cls: String(deco.spec.class ?? '') });
  });
  return found;
}

describe('%%tilekernel cells', () => {
  it('find the magic line', () => {
    expect(magicLineEnd('%%tilekernel\nx')).toBe(12);
    expect(magicLineEnd('\n  \n%%tilekernel --target cpu\nx')).toBe(29);
    expect(magicLineEnd('%%tilekernelx\n')).toBe(-1);
    expect(magicLineEnd('x = 1\n%%tilekernel')).toBe(-1);
    expect(magicLineEnd('%%time\nx')).toBe(-1);
  });

  it('are parsed as Python from the second line, without errors', () => {
    const state = stateOf(CELL);
    expect(state.facet(language)!.name).toBe('tilekernel');
    const tree = ensureSyntaxTree(state, state.doc.length, 5000)!;
    let errors = 0;
    tree.iterate({ enter: node => void (node.type.isError && errors++) });
    expect(errors).toBe(0);
    expect(tree.resolveInner(CELL.indexOf('def') + 1, 1).name).toBe('def');
    // Plain Python reads the magic line as an error.
    const plain = EditorState.create({ doc: CELL, extensions: [pythonLanguage] });
    let plainErrors = 0;
    ensureSyntaxTree(plain, plain.doc.length, 5000)!.iterate({ enter: node => void (node.type.isError && plainErrors++) });
    expect(plainErrors).toBeGreaterThan(0);
  });

  it('work in editors with no language at all', () => {
    const state = EditorState.create({ doc: 'plain text', extensions: [tilekernelExtension(pythonLanguage, 'plain text')] });
    expect(state.facet(language)).toBeNull();
    const typed = state.update({ changes: { from: 0, insert: '%%tilekernel\n' } }).state;
    expect(typed.facet(language)!.name).toBe('tilekernel');
    const undone = typed.update({ changes: { from: 0, to: 13 } }).state;
    expect(undone.facet(language)).toBeNull();
    expect(ensureSyntaxTree(undone, undone.doc.length, 1000)).toBeNull();
  });

  it('switch an editor created without the initial text', async () => {
    const parent = document.createElement('div');
    const view = new EditorView({
      state: EditorState.create({ doc: CELL, extensions: [pythonLanguage, tilekernelExtension(pythonLanguage)] }),
      parent
    });
    expect(view.state.facet(language)).toBe(pythonLanguage);
    await Promise.resolve();
    expect(view.state.facet(language)!.name).toBe('tilekernel');
    view.destroy();
  });

  it('leave other cells to the notebook language', () => {
    const state = stateOf('x = T.copy(a, b)\n');
    expect(state.facet(language)).toBe(pythonLanguage);
    expect(marks(state)).toEqual([]);
    // and switch when the magic is typed
    const typed = state.update({ changes: { from: 0, insert: '%%tilekernel\n' } }).state;
    expect(typed.facet(language)!.name).toBe('tilekernel');
  });

  it('mark the magic, its flags and the T.* primitives (not in strings or comments)', () => {
    const state = stateOf(CELL);
    ensureSyntaxTree(state, state.doc.length, 5000);
    const found = marks(state);
    expect(found.find(m => m.cls === 'cm-tilelab-magic')!.text).toBe('%%tilekernel');
    expect(found.filter(m => m.cls === 'cm-tilelab-flag').map(m => m.text)).toEqual(['--target', '--args', '--check']);
    const primitives = found.filter(m => m.cls.startsWith('cm-tilelab-primitive')).map(m => m.text);
    expect(primitives).toEqual(['T.const', 'T.Kernel', 'T.ceildiv', 'T.Parallel']);
  });

  it('decorate a live editor', () => {
    const parent = document.createElement('div');
    document.body.appendChild(parent);
    const view = new EditorView({ state: stateOf(CELL), parent });
    expect(view.contentDOM.querySelector('.cm-tilelab-magic')!.textContent).toBe('%%tilekernel');
    expect(view.contentDOM.querySelectorAll('.cm-tilelab-primitive').length).toBeGreaterThan(0);
    expect(view.contentDOM.querySelector('.cm-tilelab-magic-line')).not.toBeNull();
    view.destroy();
  });
});

describe('flag completion', () => {
  it('completes flags on the magic line', () => {
    const text = '%%tilekernel --ta\nx = 1';
    const found = flagCompletions(text, 17)!;
    expect(found.items.map(i => i.label)).toEqual(['--target']);
    expect([found.start, found.end]).toEqual([13, 17]);
    const all = flagCompletions('%%tilekernel -', 14)!;
    expect(all.items.map(i => i.label)).toEqual(FLAGS.map(f => f[0]));
    for (const flag of ['--target', '--args', '--passes', '--diff', '--source', '--check', '--bench', '--layout',
      '--pipeline', '--dataflow', '--kernel', '--rtol', '--atol', '--flops', '--bytes']) {
      expect(all.items.map(i => i.label)).toContain(flag);
    }
  });

  it('completes values, the magic name, and nothing elsewhere', () => {
    expect(flagCompletions('%%tilekernel --target c', 23)!.items.map(i => i.label)).toEqual(['cpu', 'cuda', 'cuda:sm_80', 'cuda:sm_90a']);
    expect(flagCompletions('%%tilek', 7)!.items[0].label).toBe('%%tilekernel');
    expect(flagCompletions('%%tilekernel --ta\nx --ta', 24)).toBeNull();
    expect(flagCompletions('%%time --ta', 11)).toBeNull();
    expect(flagCompletions('%%tilekernel --zzz', 18)).toBeNull();
  });
});
