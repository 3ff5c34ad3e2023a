/**
 * An autotuning run: the candidates sorted by time (speed-up over the default
 * configuration and over a PyTorch baseline), a heat map of the best time over
 * two knobs the reader picks, a bar per candidate, and the failures with their
 * reasons. The payload is docs/MIME.md's `autotune`.
 */

import { Child, code, frame, h, note, num, select, str, table } from '../dom';
import { barChart } from './simple';

export interface AutotuneRow {
  index?: number;
  config?: Record<string, unknown>;
  label?: string;
  default?: boolean;
  status?: string;
  median_ms?: number | null;
  calls?: number | null;
  reason?: string;
  compile_s?: number | null;
  resources?: Record<string, unknown>;
  speedup_vs_default?: number | null;
  speedup_vs_baseline?: number | null;
}

export interface AutotunePayload {
  version?: number;
  kernel?: string;
  device?: string;
  timing?: string;
  backend?: string;
  knobs?: string[];
  rows?: AutotuneRow[];
  seconds?: Record<string, unknown>;
  cached?: boolean;
  baseline?: { name?: string; median_ms?: number | null } | null;
}

const times = (v: unknown) => (typeof v === 'number' ? `${v.toFixed(2)}\u00d7` : '');

/** Knob values in a readable order: numbers by value, then the rest as text. */
export function knobValues(rows: AutotuneRow[], knob: string): string[] {
  const values = [...new Set(rows.map(r => str(r.config?.[knob])))];
  const number = (v: string) => (v !== '' && isFinite(Number(v)) ? Number(v) : Infinity);
  return values.sort((a, b) => number(a) - number(b) || a.localeCompare(b));
}

/** Best time per (x, y) pair of knob values, over all the other knobs. */
export function bestTimes(rows: AutotuneRow[], x: string, y: string): Map<string, number> {
  const best = new Map<string, number>();
  for (const r of rows) {
    if (typeof r.median_ms !== 'number') {
      continue;
    }
    const key = `${str(r.config?.[x])}\u0000${str(r.config?.[y])}`;
    best.set(key, Math.min(best.get(key) ?? Infinity, r.median_ms));
  }
  return best;
}

export function heatmap(rows: AutotuneRow[], x: string, y: string): HTMLElement {
  const timed = rows.filter(r => typeof r.median_ms === 'number');
  const best = bestTimes(timed, x, y);
  const values = [...best.values()];
  const fastest = Math.min(...values);
  const slowest = Math.max(...values);
  const xs = knobValues(timed, x);
  const ys = knobValues(timed, y);
  const grid = h('table', { class: 'tl-table tl-heatmap' },
    h('thead', null, h('tr', null, h('th', null, `${y} \u2193 / ${x} \u2192`), ...xs.map(v => h('th', null, v)))));
  const body = h('tbody');
  for (const b of ys) {
    const row = h('tr', null, h('th', null, b));
    for (const a of xs) {
      const ms = best.get(`${a}\u0000${b}`);
      const share = ms === undefined || slowest === fastest ? 0 : (ms - fastest) / (slowest - fastest);
      const light = Math.round(35 + 55 * share);
      row.appendChild(h('td', {
        class: ms === undefined ? 'tl-heat-empty' : (ms === fastest ? 'tl-heat-cell tl-heat-best' : 'tl-heat-cell'),
        title: `${x}=${a}, ${y}=${b}: ${ms === undefined ? 'no correct candidate' : `${num(ms)} ms`}`,
        style: ms === undefined ? {} : { background: `hsl(212, 80%, ${light}%)`, color: light < 60 ? '#fff' : '#222' }
      }, ms === undefined ? '\u2013' : num(ms, 3)));
    }
    body.appendChild(row);
  }
  grid.appendChild(body);
  return grid;
}

export function renderAutotune(data: AutotunePayload): HTMLElement {
  const rows = Array.isArray(data.rows) ? data.rows : [];
  const knobs = Array.isArray(data.knobs) ? data.knobs.map(str) : [];
  const timed = rows.filter(r => typeof r.median_ms === 'number');
  const failed = rows.filter(r => r.status && r.status !== 'ok' && r.status !== 'pending');
  const seconds = data.seconds ?? {};
  const title: Child[] = ['autotune \u00b7 ', code(data.kernel), ' ', h('span', { class: 'tl-muted' },
    `${rows.length} configurations on ${str(data.device)} (${str(data.timing)}, median); compile ${num(seconds.compile, 3)} s on ${str(seconds.compile_workers)} workers, benchmark ${num(seconds.benchmark, 3)} s on ${str(seconds.bench_workers)}${data.cached ? ', from the cache' : ''}`)];
  if (!rows.length) {
    return frame('autotune', title, note('No configurations.'));
  }
  const baseline = data.baseline && typeof data.baseline.median_ms === 'number' ? str(data.baseline.name) : '';
  const best = timed[0];
  const summary = best
    ? h('div', { class: 'tl-good tl-autotune-best' }, `best: ${str(best.label)}, ${num(best.median_ms)} ms`,
      typeof best.speedup_vs_default === 'number' ? `, ${times(best.speedup_vs_default)} the default` : '',
      typeof best.speedup_vs_baseline === 'number' ? `, ${times(best.speedup_vs_baseline)} ${baseline}` : '')
    : h('div', { class: 'tl-bad tl-autotune-best' }, 'no configuration ran correctly');
  const registers = rows.some(r => r.resources && r.resources.registers !== undefined);
  // screened candidates were timed with fewer calls than the finalists: say so per row
  const screened = new Set(timed.map(r => r.calls)).size > 1;
  const header: Child[] = ['#', ...knobs, 'median ms', 'vs default', ...(screened ? ['timed calls'] : []),
    ...(baseline ? [`vs ${baseline}`] : []), ...(registers ? ['registers'] : []), 'compile s'];
  const tableRows: Child[][] = timed.map((r, i) => [
    `${i + 1}${r.default ? ' (default)' : ''}`, ...knobs.map(k => str(r.config?.[k])), num(r.median_ms),
    times(r.speedup_vs_default), ...(screened ? [str(r.calls)] : []), ...(baseline ? [times(r.speedup_vs_baseline)] : []),
    ...(registers ? [str(r.resources?.registers)] : []), num(r.compile_s, 3)]);
  const sorted = table(header, tableRows, 'tl-autotune-table');

  // the heat map over two knobs the reader picks (those that vary first)
  const varying = knobs.filter(k => knobValues(timed, k).length > 1);
  let plot: HTMLElement | null = null;
  if (varying.length >= 2) {
    const box = h('div', { class: 'tl-autotune-heatmap' });
    const axes = { x: varying[0], y: varying[1] };
    const draw = () => box.replaceChildren(heatmap(timed, axes.x, axes.y));
    const options = varying.map(k => [k, k] as [string, string]);
    plot = h('div', null,
      h('div', { class: 'tl-controls' },
        h('label', { class: 'tl-control' }, 'x ', select(options, axes.x, v => { axes.x = v; draw(); }, 'tl-knob-x')),
        h('label', { class: 'tl-control' }, ' y ', select(options, axes.y, v => { axes.y = v; draw(); }, 'tl-knob-y'))),
      note('best time (ms) for each pair of values, over the other knobs; darker is faster'), box);
    draw();
  }
  const bars = timed.length
    ? barChart(timed.map(r => ({ name: str(r.label), median_ms: r.median_ms as number })), 'median_ms', 'ms')
    : null;
  const failures = failed.length
    ? h('details', { class: 'tl-autotune-failures', attrs: { open: true } },
      h('summary', null, `${failed.length} failed`),
      table(['configuration', 'status', 'reason'], failed.map(r => [str(r.label), str(r.status), str(r.reason)]), 'tl-failures'))
    : null;
  return frame('autotune', title, summary, sorted, plot, bars, failures);
}
