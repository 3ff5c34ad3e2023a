// Untrusted outputs: names, IR and messages are text, never markup.
import { describe, expect, it } from 'vitest';

import { MIME_TYPES, renderPayload } from '../src/render';
import { EVIL, click, mount, outputs } from './fixtures';

const SCRIPT = '<script>window.__pwned = 1</script>';

/** A copy of `value` with every string replaced by markup. */
function poison(value: unknown, key = ''): unknown {
  if (typeof value === 'string') {
    return key === 'language' || key === 'kind' || key === 'role' ? value : `${EVIL}${SCRIPT}${value}`;
  }
  if (Array.isArray(value)) {
    return value.map(v => poison(v, key));
  }
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, poison(v, k)]));
  }
  return value;
}

function assertInert(root: HTMLElement): void {
  expect(root.querySelector('img, script, iframe, object, embed, a[href]')).toBeNull();
  for (const node of root.querySelectorAll('*')) {
    for (const attr of node.getAttributeNames()) {
      expect(attr.startsWith('on')).toBe(false);
      expect(attr === 'href' || attr === 'src' || attr === 'srcdoc').toBe(false);
    }
  }
  expect((window as any).__pwned).toBeUndefined();
}

describe('untrusted payloads', () => {
  it('the saved views of a kernel named <img src=x onerror=alert(1)> show the name as text', () => {
    const evil = outputs().filter(o => Object.entries(o.data).some(([k, v]) => k.includes('tilelab') && (v as any).kernel === EVIL));
    expect(evil.length).toBe(3);
    for (const output of evil) {
      for (const [type, data] of Object.entries(output.data)) {
        if (!type.includes('tilelab')) {
          continue;
        }
        const root = mount(renderPayload(type, data));
        assertInert(root);
        expect(root.querySelector('.tl-title')!.textContent).toContain(EVIL);
      }
    }
  });

  it('the IR text of a pass is shown as text, in every mode', () => {
    const passes = outputs().map(o => o.data['application/vnd.tilelab.passes+json'] as any).find(p => p?.kernel === EVIL);
    const root = mount(renderPayload('application/vnd.tilelab.passes+json', passes));
    click(root.querySelector('.tl-pass[data-index="1"]'));
    expect(root.querySelector('.tl-pass-panel')!.textContent).toContain('<script>window.__tilelab_xss = 1</script>');
    click(root.querySelector('.tl-mode-side'));
    click(root.querySelector('.tl-mode-ir'));
    expect(root.querySelector('.tl-pass-panel')!.textContent).toContain('<script>window.__tilelab_xss = 1</script>');
    assertInert(root);
    expect((window as any).__tilelab_xss).toBeUndefined();
  });

  it('every view with markup in every string stays inert', () => {
    for (const output of outputs()) {
      for (const [type, data] of Object.entries(output.data)) {
        if (!MIME_TYPES.includes(type)) {
          continue;
        }
        const root = mount(renderPayload(type, poison(data)));
        // exercise the interactive parts too
        const nodes = [...root.querySelectorAll<HTMLElement>('.tl-pass')].slice(0, 3)
          .concat([...root.querySelectorAll<HTMLElement>('.tl-mode, .tl-step, .tl-reset, details')]);
        nodes.forEach(node => {
          if (node.tagName === 'DETAILS') {
            (node as HTMLDetailsElement).open = true;
            node.dispatchEvent(new Event('toggle'));
          } else {
            click(node);
          }
        });
        assertInert(root);
      }
    }
  });
});
