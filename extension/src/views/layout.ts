/**
 * A buffer's layout on a canvas: who holds each element of a register
 * fragment (thread, warp, register), or where each element of a shared tile
 * lives (offset, bank). Hover a cell for its details; pick a thread, a warp or
 * a bank to see everything it holds.
 */

import { code, frame, h, note, select, str } from '../dom';

export interface LayoutTables {
  kind: string;
  shape: number[];
  recipe?: Record<string, unknown>;
  threads?: number;
  replicate?: number;
  local_size?: number;
  thread?: unknown;
  local?: unknown;
  dtype_bits?: number;
  offsets?: unknown;
  banks?: unknown;
}

export interface LayoutPayload {
  version?: number;
  kernel?: string;
  buffer?: string;
  scope?: string;
  dtype?: string;
  layout?: LayoutTables;
}

const WARP_SHADES: [number, number][] = [[0.7, 0.8], [0.56, 0.55], [0.82, 0.7], [0.62, 0.35],
  [0.74, 0.5], [0.58, 0.85], [0.86, 0.55], [0.66, 0.25]];
const WARP_COLORS = ['#8dd3c7', '#fdb462', '#bebada', '#fb8072', '#80b1d3', '#b3de69',
  '#fccde5', '#d9d9d9', '#bc80bd', '#ccebc5', '#ffed6f', '#a6cee3'];

function hsl(hue: number, saturation: number, lightness: number): string {
  return `hsl(${(hue * 360).toFixed(1)}, ${(saturation * 100).toFixed(0)}%, ${(lightness * 100).toFixed(0)}%)`;
}
export function threadColor(thread: number): string {
  const [lightness, saturation] = WARP_SHADES[Math.floor(thread / 32) % WARP_SHADES.length];
  return hsl((thread % 32) / 32, saturation, lightness);
}
export function warpColor(warp: number): string {
  return WARP_COLORS[warp % WARP_COLORS.length];
}
export function bankColor(bank: number): string {
  return hsl(bank / 32, 0.62, 0.74);
}

function flat(value: unknown): number[] {
  return Array.isArray(value) ? (value.flat(Infinity as 1) as unknown[]).map(Number) : [];
}

function product(values: number[]): number {
  return values.reduce((a, b) => a * b, 1);
}

/** The layout's tables as flat arrays, with the questions the view asks of them. */
export class LayoutModel {
  readonly fragment: boolean;
  readonly shape: number[];
  readonly rows: number;
  readonly cols: number;
  readonly count: number;
  readonly reps: number;
  readonly thread: number[];
  readonly local: number[];
  readonly offsets: number[];
  readonly banks: number[];
  readonly bits: number;

  constructor(readonly tables: LayoutTables) {
    this.fragment = tables.kind === 'fragment';
    this.shape = (Array.isArray(tables.shape) ? tables.shape : []).map(Number);
    this.rows = this.shape.length <= 1 ? 1 : product(this.shape.slice(0, -1));
    this.cols = this.shape.length ? this.shape[this.shape.length - 1] : 0;
    this.count = this.rows * this.cols;
    this.thread = this.fragment ? flat(tables.thread) : [];
    this.local = this.fragment ? flat(tables.local) : [];
    this.reps = this.fragment ? Math.max(1, Math.floor(this.thread.length / Math.max(1, this.count))) : 1;
    this.offsets = this.fragment ? [] : flat(tables.offsets);
    this.banks = this.fragment ? [] : flat(tables.banks);
    this.bits = Number(tables.dtype_bits) || 16;
  }

  /** The element index of cell i, as [i0, i1, ...]. */
  index(i: number): number[] {
    const idx: number[] = [];
    for (let d = this.shape.length - 1; d >= 0; d--) {
      idx.unshift(i % this.shape[d]);
      i = Math.floor(i / this.shape[d]);
    }
    return idx;
  }

  /** Thread and register of each copy of cell i. */
  owners(i: number): { thread: number; register: number }[] {
    const out = [];
    for (let k = 0; k < this.reps; k++) {
      out.push({ thread: this.thread[k * this.count + i], register: this.local[k * this.count + i] });
    }
    return out;
  }

  /** The lines that describe cell i (what a hover shows). */
  describe(i: number): string[] {
    const lines = [`element [${this.index(i).join(', ')}]`];
    if (!this.fragment) {
      const offset = this.offsets[i];
      const bytes = (offset * this.bits) / 8;
      lines.push(`offset ${offset} elements = byte address ${bytes}`);
      lines.push(`bank ${this.banks[i]} (16-byte bank group ${Math.floor(bytes / 16) % 8})`);
      return lines;
    }
    const owners = this.owners(i);
    for (const { thread, register } of owners.slice(0, 8)) {
      lines.push(`thread ${thread} (warp ${thread >> 5}, lane ${thread & 31}), register R${register}`);
    }
    if (owners.length > 8) {
      lines.push(`\u2026 ${owners.length} copies in all`);
    }
    return lines;
  }

  /** Does cell i belong to the thread, warp or bank `value`? */
  matches(i: number, mode: string, value: number): boolean {
    if (mode === 'bank') {
      return this.banks[i] === value;
    }
    for (let k = 0; k < this.reps; k++) {
      const t = this.thread[k * this.count + i];
      if (mode === 'thread' ? t === value : t >> 5 === value) {
        return true;
      }
    }
    return false;
  }

  held(mode: string, value: number): number[] {
    const cells = [];
    for (let i = 0; i < this.count; i++) {
      if (this.matches(i, mode, value)) {
        cells.push(i);
      }
    }
    return cells;
  }

  summary(mode: string, value: number, held: number[]): string {
    if (mode === 'warp') {
      return `warp ${value} (threads ${32 * value}\u2013${32 * value + 31}) holds ${held.length} elements`;
    }
    if (mode === 'bank') {
      return `bank ${value}: ${held.length} elements`;
    }
    const regs: [number, number][] = [];
    for (const i of held) {
      for (let k = 0; k < this.reps; k++) {
        if (this.thread[k * this.count + i] === value) {
          regs.push([this.local[k * this.count + i], i]);
        }
      }
    }
    regs.sort((a, b) => a[0] - b[0]);
    const shown = regs.slice(0, 32).map(([r, i]) => `R${r}=[${this.index(i).join(', ')}]`).join(' ');
    return `thread ${value} (warp ${value >> 5}, lane ${value & 31}) holds ${regs.length} elements: ${shown}${regs.length > 32 ? ' \u2026' : ''}`;
  }

  label(i: number): string[] {
    if (!this.fragment) {
      return [String(this.offsets[i]), `b${this.banks[i]}`];
    }
    const lines = [`T${this.thread[i]}:R${this.local[i]}`];
    if (this.reps > 1) {
      lines.push(`\u00d7${this.reps}`);
    }
    return lines;
  }
}

/** Cell width, height and label font size (0: no labels), as in tilelab.viz.layouts. */
export function cellSize(rows: number, cols: number): [number, number, number] {
  if (cols <= 16 && rows <= 32) {
    return [54, 30, 9.5];
  }
  if (cols <= 32 && rows <= 48) {
    return [36, 20, 7.5];
  }
  const side = Math.max(3, Math.min(22, Math.floor(768 / Math.max(rows, cols))));
  return [side, side, 0];
}

const SCOPES: Record<string, string> = {
  'local.fragment': 'registers (a fragment)', shared: 'shared memory', 'shared.dyn': 'shared memory',
  global: 'global memory', local: 'local memory'
};

function describeRecipe(recipe: unknown): string {
  if (!recipe || typeof recipe !== 'object') {
    return '';
  }
  const r = recipe as Record<string, unknown>;
  const params = Object.entries(r).filter(([k]) => k !== 'kind')
    .map(([k, v]) => `${k}=${v && typeof v === 'object' && !Array.isArray(v) ? describeRecipe(v) : JSON.stringify(v)}`);
  return `${str(r.kind ?? 'custom')}(${params.join(', ')})`;
}

export function renderLayout(data: LayoutPayload): HTMLElement {
  const tables = data.layout;
  const title = ['layout \u00b7 ', code(data.buffer), ' \u00b7 ', code(data.kernel)];
  if (!tables || !Array.isArray(tables.shape)) {
    return frame('layout', title, note('This payload has no layout tables.'));
  }
  const model = new LayoutModel(tables);
  const [cw, ch, font] = cellSize(model.rows, model.cols);
  const x0 = 40;
  const y0 = 22;
  const width = x0 + model.cols * cw + 8;
  const height = y0 + model.rows * ch + 8;
  const canvas = h('canvas', { class: 'tl-layout-canvas', attrs: { tabindex: 0, role: 'img', 'aria-label': 'layout grid' } });
  canvas.dataset.x0 = String(x0);
  canvas.dataset.y0 = String(y0);
  canvas.dataset.cw = String(cw);
  canvas.dataset.ch = String(ch);
  canvas.dataset.rows = String(model.rows);
  canvas.dataset.cols = String(model.cols);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;

  const info = h('div', { class: 'tl-layout-info tl-status' }, 'hover a cell for its details; click one to highlight its owner');
  const summary = h('div', { class: 'tl-layout-summary tl-status' });
  const tip = h('div', { class: 'tl-tip', attrs: { hidden: true } });
  const modes: [string, string][] = model.fragment
    ? [['nothing', ''], ['a thread', 'thread'], ['a warp', 'warp']]
    : [['nothing', ''], ['a bank', 'bank']];
  const colorModes: [string, string][] = model.fragment
    ? [['thread', 'thread'], ['warp', 'warp'],
      ...((Number(tables.threads) > 128 ? [['warpgroup', 'warpgroup']] : []) as [string, string][])]
    : [['bank', 'bank']];
  let colorBy = colorModes[0][1];
  let held: Set<number> | null = null;
  let hover = -1;

  const pick = h('input', { class: 'tl-pick', attrs: { type: 'number', min: 0, value: 0 } });
  let lastMode = '';
  const modeSelect = select(modes, '', mode => {
    // Keep pointing at the same threads: thread t is in warp t / 32, warp w starts at 32 w.
    const value = parseInt(pick.value, 10);
    if (!isNaN(value) && lastMode === 'thread' && mode === 'warp') {
      pick.value = String(value >> 5);
    } else if (!isNaN(value) && lastMode === 'warp' && mode === 'thread') {
      pick.value = String(value * 32);
    }
    highlight();
  }, 'tl-highlight-mode');
  const colorSelect = select(colorModes, colorBy, value => {
    colorBy = value;
    draw();
  }, 'tl-color-by');
  pick.addEventListener('input', () => {
    if (!modeSelect.value) {
      modeSelect.value = model.fragment ? 'thread' : 'bank';
    }
    highlight();
  });

  function colorOf(i: number): string {
    if (!model.fragment) {
      return bankColor(model.banks[i]);
    }
    if (colorBy === 'warpgroup') {
      return warpColor(model.thread[i] >> 7); // 128 threads: the unit of wgmma
    }
    return colorBy === 'warp' ? warpColor(model.thread[i] >> 5) : threadColor(model.thread[i]);
  }

  function draw(): void {
    let context: CanvasRenderingContext2D | null = null;
    try {
      context = canvas.getContext('2d');
    } catch {
      context = null;
    }
    const ratio = typeof window !== 'undefined' ? window.devicePixelRatio || 1 : 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    if (!context) {
      return;
    }
    const ctx = context;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    // A picture on white in every theme, like tilelab.viz's SVG.
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, width, height);
    ctx.font = '10px sans-serif';
    ctx.fillStyle = '#666';
    ctx.textBaseline = 'middle';
    // Axis numbers, every few rows and columns when cells are small.
    const every = (size: number) => Math.max(1, Math.ceil(16 / size));
    ctx.textAlign = 'center';
    for (let c = 0; c < model.cols; c += every(cw)) {
      ctx.fillText(String(c), x0 + c * cw + cw / 2, y0 - 9);
    }
    ctx.textAlign = 'right';
    for (let r = 0; r < model.rows; r += every(ch)) {
      ctx.fillText(String(r), x0 - 4, y0 + r * ch + ch / 2);
    }
    for (let i = 0; i < model.count; i++) {
      const x = x0 + (i % model.cols) * cw;
      const y = y0 + Math.floor(i / model.cols) * ch;
      ctx.globalAlpha = held && !held.has(i) ? 0.25 : 1;
      ctx.fillStyle = colorOf(i);
      ctx.fillRect(x, y, cw, ch);
    }
    ctx.globalAlpha = 1;
    if (cw >= 6) {
      ctx.strokeStyle = 'rgba(255,255,255,0.9)';
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let c = 0; c <= model.cols; c++) {
        ctx.moveTo(x0 + c * cw + 0.5, y0);
        ctx.lineTo(x0 + c * cw + 0.5, y0 + model.rows * ch);
      }
      for (let r = 0; r <= model.rows; r++) {
        ctx.moveTo(x0, y0 + r * ch + 0.5);
        ctx.lineTo(x0 + model.cols * cw, y0 + r * ch + 0.5);
      }
      ctx.stroke();
    }
    if (font > 0) {
      ctx.fillStyle = '#111';
      ctx.textAlign = 'center';
      ctx.font = `${font}px sans-serif`;
      for (let i = 0; i < model.count; i++) {
        const lines = model.label(i);
        const x = x0 + (i % model.cols) * cw + cw / 2;
        const y = y0 + Math.floor(i / model.cols) * ch + ch / 2 - ((lines.length - 1) * font) / 2;
        lines.forEach((line, k) => ctx.fillText(line, x, y + k * font));
      }
    }
    if (held) {
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 1.5;
      for (const i of held) {
        ctx.strokeRect(x0 + (i % model.cols) * cw + 0.75, y0 + Math.floor(i / model.cols) * ch + 0.75, cw - 1.5, ch - 1.5);
      }
    }
    if (hover >= 0) {
      ctx.strokeStyle = '#d00';
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 + (hover % model.cols) * cw + 1, y0 + Math.floor(hover / model.cols) * ch + 1, cw - 2, ch - 2);
    }
  }

  function highlight(): void {
    const mode = modeSelect.value;
    lastMode = mode;
    const value = parseInt(pick.value, 10);
    if (mode && !isNaN(value)) {
      const cells = model.held(mode, value);
      held = new Set(cells);
      summary.textContent = model.summary(mode, value, cells);
      root.dataset.highlighted = String(cells.length);
    } else {
      held = null;
      summary.textContent = '';
      root.dataset.highlighted = '0';
    }
    draw();
  }

  function cellAt(event: MouseEvent): number {
    const box = canvas.getBoundingClientRect();
    const scaleX = box.width ? width / box.width : 1;
    const scaleY = box.height ? height / box.height : 1;
    const x = (event.clientX - box.left) * scaleX;
    const y = (event.clientY - box.top) * scaleY;
    const c = Math.floor((x - x0) / cw);
    const r = Math.floor((y - y0) / ch);
    return r >= 0 && r < model.rows && c >= 0 && c < model.cols ? r * model.cols + c : -1;
  }

  canvas.addEventListener('mousemove', (event: MouseEvent) => {
    const i = cellAt(event);
    if (i === hover) {
      return;
    }
    hover = i;
    if (i < 0) {
      tip.hidden = true;
      draw();
      return;
    }
    const lines = model.describe(i);
    info.textContent = lines.join(' \u00b7 ');
    root.dataset.hover = String(i);
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    const box = root.getBoundingClientRect();
    tip.style.left = `${event.clientX - box.left + 14}px`;
    tip.style.top = `${event.clientY - box.top + 14}px`;
    draw();
  });
  canvas.addEventListener('mouseleave', () => {
    tip.hidden = true;
    hover = -1;
    draw();
  });
  canvas.addEventListener('click', (event: MouseEvent) => {
    const i = cellAt(event);
    if (i < 0) {
      return;
    }
    modeSelect.value = model.fragment ? 'thread' : 'bank';
    pick.value = String(model.fragment ? model.thread[i] : model.banks[i]);
    highlight();
  });

  const dtype = data.dtype ? `${data.dtype} ` : '';
  const where = SCOPES[str(data.scope)] ?? (str(data.scope) || 'a tile');
  const what = model.fragment ? describeRecipe(tables.recipe) : `${str(tables.kind)} layout`;
  const detail = model.fragment
    ? `${str(tables.threads)} threads \u00d7 ${str(tables.local_size)} registers, ${model.reps} cop${model.reps === 1 ? 'y' : 'ies'} per element`
    : `${model.bits}-bit elements, 32 banks of 4 bytes`;
  const root = frame('layout', title,
    note(`${dtype}[${model.shape.join(', ')}] in ${where}, ${what} \u2014 ${detail}`),
    h('div', { class: 'tl-controls' },
      h('label', { class: 'tl-control' }, 'color by ', colorSelect),
      h('label', { class: 'tl-control' }, 'highlight ', modeSelect, ' ', pick)),
    h('div', { class: 'tl-scroll tl-layout-scroll' }, canvas),
    info, summary, tip);
  root.dataset.kind = model.fragment ? 'fragment' : 'memory';
  draw();
  return root;
}
