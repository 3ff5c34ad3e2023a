/**
 * The smaller views: benchmark table and chart, generated code with its
 * resource report, a check against a reference, and an error at the user's line.
 */

import { Child, button, code, frame, h, note, num, select, str, table } from '../dom';
import { codeBlock, languageOf } from '../highlight';

// ---------------------------------------------------------------- bench

export interface BenchRow {
  name: string;
  median_ms: number;
  baseline_name?: string;
  baseline_ms?: number;
  speedup?: number | null;
  gbps?: number | null;
  tflops?: number | null;
  roofline_pct?: number | null;
}

export interface BenchPayload {
  version?: number;
  kernel?: string;
  device?: string;
  timing?: string;
  rows?: BenchRow[];
}

const BENCH_COLUMNS: [keyof BenchRow, string, (v: any) => string][] = [
  ['median_ms', 'median ms', v => num(v)],
  ['tflops', 'TFLOP/s', v => num(v)],
  ['gbps', 'GB/s', v => num(v)],
  ['roofline_pct', '% of roofline', v => (typeof v === 'number' ? `${v.toFixed(1)}%` : '')],
  ['speedup', 'speedup', v => (typeof v === 'number' ? `${v.toFixed(2)}\u00d7` : '')]
];

const METRICS: [string, keyof BenchRow, boolean][] = [
  ['time (ms, shorter is faster)', 'median_ms', false],
  ['TFLOP/s', 'tflops', true],
  ['GB/s', 'gbps', true]
];

export function barChart(rows: BenchRow[], key: keyof BenchRow, unit: string): HTMLElement {
  const values = rows.map(r => Number(r[key]));
  const max = Math.max(0, ...values.filter(v => isFinite(v)));
  const chart = h('div', { class: 'tl-bars' });
  rows.forEach((row, i) => {
    const value = values[i];
    const share = max > 0 && isFinite(value) ? (100 * value) / max : 0;
    chart.appendChild(h('div', { class: 'tl-bar-row', data: { name: str(row.name) } },
      h('span', { class: 'tl-bar-name', title: str(row.name) }, str(row.name)),
      h('span', { class: 'tl-bar-track' },
        h('span', { class: `tl-bar-fill ${i === 0 ? 'tl-bar-kernel' : 'tl-bar-baseline'}`, style: { width: `${share.toFixed(2)}%` } })),
      h('span', { class: 'tl-bar-value' }, isFinite(value) ? `${num(value)} ${unit}` : '')));
  });
  return chart;
}

export function renderBench(data: BenchPayload): HTMLElement {
  const rows = Array.isArray(data.rows) ? data.rows : [];
  const columns = BENCH_COLUMNS.filter(([key], c) => c === 0 || rows.some(r => r[key] !== null && r[key] !== undefined));
  const tableRows: Child[][] = rows.map(r => [str(r.name), ...columns.map(([key, , format]) => format(r[key]))]);
  const metrics = METRICS.filter(([, key]) => rows.some(r => typeof r[key] === 'number'));
  const chartBox = h('div', { class: 'tl-bench-chart' });
  const draw = (key: string) => {
    const [label, field] = metrics.find(([, k]) => k === key) ?? metrics[0];
    chartBox.replaceChildren(barChart(rows, field, label.startsWith('time') ? 'ms' : label));
  };
  const title = ['bench \u00b7 ', code(data.kernel), ' ', h('span', { class: 'tl-muted' }, `${str(data.device)}, ${str(data.timing)}, median`)];
  if (!rows.length) {
    return frame('bench', title, note('No benchmark rows.'));
  }
  const picker = metrics.length > 1
    ? h('div', { class: 'tl-controls' }, h('label', { class: 'tl-control' }, 'chart ',
      select(metrics.map(([label, key]) => [label, String(key)]), 'median_ms', draw, 'tl-metric')))
    : null;
  draw('median_ms');
  const first = rows[0];
  const verdict = typeof first.speedup === 'number'
    ? h('div', { class: first.speedup >= 1 ? 'tl-good' : 'tl-bad' },
      `${str(first.name)} is ${first.speedup >= 1 ? `${first.speedup.toFixed(2)}\u00d7 as fast as` : `${(1 / first.speedup).toFixed(2)}\u00d7 slower than`} ${str(first.baseline_name)}`)
    : null;
  return frame('bench', title, verdict,
    table(['', ...columns.map(([, label]) => label)], tableRows, 'tl-bench-table'),
    picker, chartBox, note('speedup = baseline time / time'));
}

// ---------------------------------------------------------------- source

export interface SourcePayload {
  version?: number;
  kernel?: string;
  language?: string;
  code?: string;
  resources?: Record<string, unknown>;
  /** what each T.gemm / T.copy became, and why (the CUDA view only) */
  ops?: { line?: string; op?: string; instruction?: string; why?: string }[];
}

const RESOURCE_NAMES: Record<string, string> = {
  registers: 'registers per thread',
  spill_stores_bytes: 'spill stores (bytes)',
  spill_loads_bytes: 'spill loads (bytes)',
  stack_bytes: 'stack frame (bytes)',
  shared_bytes: 'static shared memory (bytes)',
  dynamic_smem_bytes: 'dynamic shared memory (bytes)',
  local_bytes: 'local memory (bytes)',
  grid: 'grid',
  block: 'block',
  arch: 'architecture',
  occupancy: 'occupancy'
};

function resourceValue(key: string, value: unknown): Child {
  const text = Array.isArray(value) ? value.join(' \u00d7 ') : str(value);
  const bad = /spill|stack|local/.test(key) && Number(value) > 0;
  return bad ? h('span', { class: 'tl-bad' }, text) : text;
}

export function renderSource(data: SourcePayload): HTMLElement {
  const language = str(data.language) || 'text';
  const text = str(data.code);
  const resources = data.resources && typeof data.resources === 'object' ? data.resources : {};
  const entries = Object.entries(resources);
  const lines = text ? text.replace(/\n$/, '').split('\n').length : 0;
  const title = [`${language} \u00b7 `, code(data.kernel), ' ', h('span', { class: 'tl-muted' }, `${lines} lines`)];
  const report = entries.length
    ? table(['resource', 'value'], entries.map(([k, v]) => [RESOURCE_NAMES[k] ?? k, resourceValue(k, v)]), 'tl-resources')
    : note('No resource report for this target.');
  const ops = Array.isArray(data.ops) ? data.ops : [];
  const opsTable = ops.length
    ? table(['line', 'tile op', 'instruction', 'why'],
      ops.map(o => [str(o.line), code(o.op), str(o.instruction), str(o.why)]), 'tl-ops')
    : null;
  const copy = button('copy', () => void navigator.clipboard?.writeText(text), 'tl-copy', 'copy the code');
  return frame('source', title, opsTable, report,
    text ? h('div', { class: 'tl-controls' }, copy) : null,
    text ? codeBlock(text, { language: languageOf(language), limit: 600, cls: 'tl-source-code' })
      : note(`No ${language} code.`));
}

// ---------------------------------------------------------------- check

export interface CheckPayload {
  version?: number;
  kernel?: string;
  reference?: string;
  passed?: boolean;
  max_abs_error?: number | null;
  max_rel_error?: number | null;
  mismatched?: number;
  total?: number;
  rtol?: number;
  atol?: number;
  message?: string;
}

export function renderCheck(data: CheckPayload): HTMLElement {
  const passed = data.passed === true;
  const root = frame('check',
    ['check \u00b7 ', code(data.kernel), ' against ', code(data.reference), ': ',
      h('span', { class: passed ? 'tl-good tl-verdict' : 'tl-bad tl-verdict' }, passed ? 'passed' : 'FAILED')],
    data.message ? h('div', { class: 'tl-message' }, str(data.message)) : null,
    table(['', ''], [
      ['max abs error', num(data.max_abs_error)],
      ['max rel error', num(data.max_rel_error)],
      ['mismatched', `${str(data.mismatched)} of ${str(data.total)}`],
      ['tolerance', `rtol=${num(data.rtol)}, atol=${num(data.atol)}`]
    ], 'tl-check-table'));
  root.classList.add(passed ? 'tl-passed' : 'tl-failed');
  return root;
}

// ---------------------------------------------------------------- error

export interface ErrorPayload {
  version?: number;
  kernel?: string;
  message?: string;
  filename?: string | null;
  line?: number | null;
  col?: number | null;
  source_line?: string | null;
  hint?: string;
}

export function where(filename: string, line: unknown): string {
  return filename.startsWith('<tilekernel-') ? `cell line ${str(line)}` : `${filename}, line ${str(line)}`;
}

export function renderError(data: ErrorPayload): HTMLElement {
  const located = data.line !== null && data.line !== undefined;
  const flatTitle: Child[] = [h('span', { class: 'tl-bad' }, 'error')];
  if (data.kernel) {
    flatTitle.push(' in ', code(data.kernel));
  }
  if (located) {
    flatTitle.push(` at ${where(str(data.filename), data.line)}, column ${str(data.col)}`);
  }
  let excerpt: HTMLElement | null = null;
  if (data.source_line) {
    const col = Math.max(1, Number(data.col) || 1);
    excerpt = h('pre', { class: 'tl-excerpt' },
      h('span', { class: 'tl-excerpt-line' }, str(data.source_line)), '\n',
      h('span', { class: 'tl-caret' }, `${' '.repeat(col - 1)}^`));
  }
  const root = frame('error', flatTitle,
    h('div', { class: 'tl-message' }, str(data.message)),
    excerpt,
    data.hint ? note('hint: ', str(data.hint)) : null);
  root.classList.add('tl-failed');
  return root;
}
