import { describe, expect, it } from 'vitest';

import { Language, codeBlock, tokenizeLine } from '../src/highlight';

const SAMPLES: [Language, string][] = [
  ['tir', '    for i in T.serial(128):  # a loop'],
  ['tir', '@T.prim_func(private=True)'],
  ['tir', 'A_1 = T.Buffer((256,), "float16", data=A.data)'],
  ['python', 'def f(x): return x + 1.5e3'],
  ['cuda', 'extern "C" __global__ void __launch_bounds__(128) k(half* __restrict__ A) { // body'],
  ['cuda', '#include <cuda_fp16.h>'],
  ['llvm', 'define void @f(ptr noalias %0, i32 %1) #0 { ; entry'],
  ['ptx', '\tld.global.nc.v4.u32 {%r1, %r2}, [%rd4+16]; // load'],
  ['sass', '        /*0010*/  LDG.E.128 R4, [R2.64] ;']
];

describe('tokenizeLine', () => {
  it('keeps every character of the line', () => {
    for (const [language, line] of SAMPLES) {
      expect(tokenizeLine(line, language).map(t => t[1]).join('')).toBe(line);
    }
  });

  it('classifies IR tokens', () => {
    const tokens = tokenizeLine('    for i in T.serial(128):  # a loop', 'tir');
    const kinds = Object.fromEntries(tokens.map(([cls, text]) => [text.trim(), cls]));
    expect(kinds.for).toBe('kw');
    expect(kinds['T.serial']).toBe('prim');
    expect(kinds['128']).toBe('num');
    expect(kinds['# a loop']).toBe('com');
    expect(tokenizeLine('@T.prim_func', 'tir')[0]).toEqual(['dec', '@T.prim_func']);
    expect(tokenizeLine('x = "a # not a comment"', 'tir').some(([c, t]) => c === 'str' && t.includes('#'))).toBe(true);
  });

  it('classifies LLVM and CUDA tokens', () => {
    const llvm = tokenizeLine('define void @f(ptr noalias %0) ; c', 'llvm');
    expect(llvm).toContainEqual(['kw', 'define']);
    expect(llvm).toContainEqual(['var', '@f']);
    expect(llvm).toContainEqual(['com', '; c']);
    const cuda = tokenizeLine('__global__ void k(half* A)', 'cuda');
    expect(cuda).toContainEqual(['kw', '__global__']);
    expect(cuda).toContainEqual(['ty', 'void']);
  });

  it('carries multi-line strings and comments', () => {
    const state = { open: '' as const } as { open: '' | '"""' | "'''" | '*/' };
    expect(tokenizeLine('x = """start', 'python', state).pop()).toEqual(['str', '"""start']);
    expect(tokenizeLine('inside', 'python', state)).toEqual([['str', 'inside']]);
    expect(tokenizeLine('end""" + y', 'python', state)[0]).toEqual(['str', 'end"""']);
    const c = { open: '' } as { open: '' | '"""' | "'''" | '*/' };
    tokenizeLine('/* a', 'cuda', c);
    expect(tokenizeLine('b */ int', 'cuda', c)[0]).toEqual(['com', 'b */']);
  });
});

describe('codeBlock', () => {
  it('renders lines lazily past the limit, as text', () => {
    const text = Array.from({ length: 50 }, (_, i) => `x${i} = "<script>${i}</script>"`).join('\n');
    const block = codeBlock(text, { language: 'python', limit: 10 });
    expect(block.querySelectorAll('.tl-code-line')).toHaveLength(10);
    expect(block.querySelector('script')).toBeNull();
    block.querySelector<HTMLButtonElement>('.tl-more')!.click();
    expect(block.querySelectorAll('.tl-code-line')).toHaveLength(50);
    expect(block.querySelector('.tl-gutter')!.textContent!.split('\n')).toHaveLength(50);
    expect(block.textContent).toContain('<script>49</script>');
  });
});
