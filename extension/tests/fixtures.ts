// Payloads from the saved e2e notebook (ui-tests/tilelab_views.ipynb): real producer output.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const EVIL = '<img src=x onerror=alert(1)>';

interface Output {
  cell: number;
  data: Record<string, unknown>;
}

let cached: Output[] | null = null;

export function outputs(): Output[] {
  if (!cached) {
    const notebook = JSON.parse(readFileSync(join(__dirname, '..', 'ui-tests', 'tilelab_views.ipynb'), 'utf8'));
    cached = [];
    notebook.cells.forEach((cell: any, i: number) => {
      for (const output of cell.outputs ?? []) {
        if (output.data) {
          cached!.push({ cell: i, data: output.data });
        }
      }
    });
  }
  return cached;
}

/** Every payload of one view, in notebook order. */
export function payloads(view: string): any[] {
  const mime = `application/vnd.tilelab.${view}+json`;
  return outputs().filter(o => mime in o.data).map(o => o.data[mime]);
}

/** The payload of a view for a kernel (the first one). */
export function payload(view: string, kernel?: string): any {
  const found = payloads(view).find(p => kernel === undefined || p.kernel === kernel);
  if (!found) {
    throw new Error(`no ${view} payload for ${kernel}`);
  }
  return JSON.parse(JSON.stringify(found));
}

export function mount(node: HTMLElement): HTMLElement {
  document.body.replaceChildren(node);
  return node;
}

export function click(node: Element | null): void {
  if (!node) {
    throw new Error('nothing to click');
  }
  node.dispatchEvent(new MouseEvent('click', { bubbles: true }));
}

export function q<T extends Element = HTMLElement>(root: Element, selector: string): T {
  const found = root.querySelector(selector);
  if (!found) {
    throw new Error(`no ${selector}`);
  }
  return found as T;
}
