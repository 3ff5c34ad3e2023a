/**
 * Building DOM safely: every string that reaches the page goes in as text.
 *
 * The payloads come from notebooks, which may be untrusted: kernel, buffer and
 * pass names, IR and messages are data. Nothing here ever sets innerHTML; `h`
 * only creates elements by tag name, sets attributes from a fixed list of
 * harmless names, and appends strings as text nodes.
 */

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  class?: string;
  title?: string;
  style?: Partial<Record<string, string>>;
  /** data-* attributes, by their name without the data- prefix */
  data?: Record<string, string | number>;
  /** other attributes; names are checked against SAFE_ATTRIBUTES */
  attrs?: Record<string, string | number | boolean>;
  on?: Partial<Record<keyof HTMLElementEventMap, (event: any) => void>>;
}

// No on* handlers, no href/src/srcdoc/formaction: nothing that loads or runs anything.
const SAFE_ATTRIBUTES = new Set([
  'type', 'value', 'min', 'max', 'step', 'placeholder', 'checked', 'selected', 'disabled',
  'open', 'colspan', 'rowspan', 'role', 'tabindex', 'aria-label', 'aria-pressed',
  'aria-selected', 'width', 'height', 'for', 'name', 'spellcheck', 'autocomplete', 'hidden'
]);

export const SVG_NS = 'http://www.w3.org/2000/svg';

function apply(node: Element, props: Props | undefined): void {
  if (!props) {
    return;
  }
  if (props.class) {
    node.setAttribute('class', props.class);
  }
  if (props.title !== undefined) {
    if (node instanceof HTMLElement) {
      node.title = props.title;
    } else {
      const title = document.createElementNS(SVG_NS, 'title');
      title.textContent = props.title;
      node.appendChild(title);
    }
  }
  if (props.style) {
    const style = (node as HTMLElement | SVGElement).style;
    for (const [key, value] of Object.entries(props.style)) {
      if (value !== undefined) {
        style.setProperty(key, value);
      }
    }
  }
  for (const [key, value] of Object.entries(props.data ?? {})) {
    node.setAttribute(`data-${key}`, String(value));
  }
  for (const [key, value] of Object.entries(props.attrs ?? {})) {
    if (!SAFE_ATTRIBUTES.has(key)) {
      throw new Error(`tilelab: attribute ${key} is not allowed`);
    }
    if (value === false) {
      continue;
    }
    node.setAttribute(key, value === true ? '' : String(value));
    if (key === 'checked' && node instanceof HTMLInputElement) {
      node.checked = Boolean(value);
    }
  }
  for (const [event, handler] of Object.entries(props.on ?? {})) {
    if (handler) {
      node.addEventListener(event, handler);
    }
  }
}

export function append(node: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    node.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element with text children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props?: Props | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  apply(node, props ?? undefined);
  append(node, children);
  return node;
}

/** An SVG element; geometry attributes are numbers or fixed strings, text goes in as text. */
export function s(
  tag: string,
  geometry: Record<string, string | number> = {},
  props?: Props | null,
  ...children: Child[]
): SVGElement {
  const node = document.createElementNS(SVG_NS, tag) as SVGElement;
  for (const [key, value] of Object.entries(geometry)) {
    if (/^on/i.test(key) || /href$/i.test(key)) {
      throw new Error(`tilelab: SVG attribute ${key} is not allowed`);
    }
    node.setAttribute(key, String(value));
  }
  apply(node, props ?? undefined);
  append(node, children);
  return node;
}

/** A short, readable number: 3 significant digits, no exponent for everyday sizes. */
export function num(value: unknown, digits = 4): string {
  if (typeof value !== 'number' || !isFinite(value)) {
    return value === null || value === undefined ? '' : String(value);
  }
  if (value === 0) {
    return '0';
  }
  const abs = Math.abs(value);
  if (abs >= 1e-3 && abs < 1e6) {
    return String(Number(value.toPrecision(digits)));
  }
  return value.toExponential(digits - 1);
}

/** Text of a value that should be a string, whatever the payload holds. */
export function str(value: unknown): string {
  if (value === null || value === undefined) {
    return '';
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The frame of every view: a root with a title line. */
export function frame(view: string, title: Child[], ...body: Child[]): HTMLElement {
  return h(
    'div',
    { class: `tl-view tl-view-${view}`, data: { 'tl-view': view } },
    h('div', { class: 'tl-title' }, ...title),
    ...body
  );
}

/** A note in muted text. */
export function note(...children: Child[]): HTMLElement {
  return h('div', { class: 'tl-note' }, ...children);
}

/** A kernel or buffer name, shown as code. */
export function code(text: unknown): HTMLElement {
  return h('code', { class: 'tl-name' }, str(text));
}

/** A table from a header and rows of cells. */
export function table(header: Child[], rows: Child[][], cls = ''): HTMLTableElement {
  return h(
    'table',
    { class: `tl-table ${cls}`.trim() },
    h('thead', null, h('tr', null, ...header.map(cell => h('th', null, cell)))),
    h('tbody', null, ...rows.map(row => h('tr', null, ...row.map(cell => h('td', null, cell)))))
  );
}

/** A <select> from (label, value) pairs. */
export function select(
  options: [string, string][],
  value: string,
  onChange: (value: string) => void,
  cls = ''
): HTMLSelectElement {
  const node = h('select', { class: cls || undefined });
  for (const [label, optionValue] of options) {
    const option = h('option', null, label);
    option.value = optionValue;
    node.appendChild(option);
  }
  node.value = value;
  node.addEventListener('change', () => onChange(node.value));
  return node;
}

/** A button. */
export function button(label: string, onClick: () => void, cls = '', title?: string): HTMLButtonElement {
  const node = h('button', { class: `tl-button ${cls}`.trim(), title }, label);
  node.type = 'button';
  node.addEventListener('click', onClick);
  return node;
}
