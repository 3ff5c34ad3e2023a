/**
 * The software pipeline replayed as a timeline: a compute lane and one lane
 * per buffer slot, copies in flight and compute per iteration. Play it, step
 * through the moments where something starts or ends, or scrub.
 */

import { button, code, frame, h, note, num, s, str, table } from '../dom';

export interface PipelinePlan {
  loop: string;
  num_stages: number;
  extent?: number | string;
  statements?: { text: string; stage: number; order: number; role: string }[];
  slots?: Record<string, number>;
  async_groups?: string[][];
  waits?: string;
}

export interface TimelineRow {
  iteration: number;
  stage?: number;
  kind: string;
  slot: number;
  start: number;
  end: number;
  label: string;
  statement?: number | null;
  phase?: string;
  loop?: string;
  start_ns?: number;
  end_ns?: number;
}

export interface PipelinePayload {
  version?: number;
  kernel?: string;
  pipelines?: PipelinePlan[];
  timeline?: TimelineRow[];
  measured?: TimelineRow[];
  compare?: { kernel?: string; pipelines?: PipelinePlan[]; timeline?: TimelineRow[] };
}

export interface Panel {
  name: string;
  plan: PipelinePlan;
  rows: TimelineRow[];
}

const LEFT = 150;
const UNIT = 48;
const LANE = 26;
const COPY = 12;
const COLORS: Record<string, string> = { copy: '#3b7dd8', compute: '#2e9d57', wait: '#f3c4c4', read: '#d5ecd9' };

/** The panels: each plan with its rows (rows name their loop; one plan takes them all). */
export function panelsOf(data: PipelinePayload): Panel[] {
  const panels: Panel[] = [];
  const add = (name: string, plans: PipelinePlan[] | undefined, rows: TimelineRow[] | undefined) => {
    const list = Array.isArray(plans) ? plans : [];
    const all = Array.isArray(rows) ? rows : [];
    const used = new Set<string>();
    for (const plan of list) {
      const key = str(plan.loop);
      const mine = list.length === 1 ? all : used.has(key) ? [] : all.filter(r => str(r.loop) === key);
      used.add(key);
      panels.push({ name, plan, rows: mine });
    }
  };
  add(str(data.kernel), data.pipelines, data.timeline);
  if (data.compare) {
    add(str(data.compare.kernel) || 'compare', data.compare.pipelines, data.compare.timeline);
  }
  return panels;
}

/** The moments at which some bar starts or ends: where `step` stops. */
export function momentsOf(panels: Panel[]): number[] {
  const times = new Set<number>([0]);
  for (const p of panels) {
    for (const r of p.rows) {
      times.add(Number(r.start));
      times.add(Number(r.end));
    }
  }
  return [...times].sort((a, b) => a - b);
}

/** What happens at time t in a panel, in words. */
export function describeAt(panel: Panel, t: number, end: number): string {
  const now = panel.rows.filter(r => r.start <= t && t < r.end);
  const parts: string[] = [];
  const copies = new Map<number, number>();
  for (const r of now) {
    const what = str(r.label).replace(/ #\d+$/, '');
    if (r.kind === 'compute') {
      parts.push(`computing #${r.iteration} on slot ${r.slot} (${what})`);
    } else if (r.kind === 'wait') {
      parts.push(`waiting for the copies of #${r.iteration} (slot ${r.slot})`);
    } else {
      copies.set(r.iteration, r.slot);
    }
  }
  copies.forEach((slot, iteration) => parts.push(`copies of #${iteration} \u2192 slot ${slot} in flight`));
  const doing = parts.join('; ') || (t >= end ? 'done' : 'idle');
  return `${panel.name ? panel.name + ' \u00b7 ' : ''}${panel.plan.loop} (num_stages=${panel.plan.num_stages}): ${doing}`;
}

interface Bar {
  node: SVGElement;
  start: number;
  end: number;
}

function drawPanel(panel: Panel, end: number, bars: Bar[]): SVGElement {
  const plan = panel.plan;
  const stages = Math.max(1, Number(plan.num_stages) || 1);
  const producers = (plan.statements ?? []).filter(st => st.role === 'copy').sort((a, b) => a.order - b.order);
  const statementRow = new Map<number, number>();
  (plan.statements ?? []).forEach((st, i) => {
    const k = producers.indexOf(st);
    if (k >= 0) {
      statementRow.set(i, k);
    }
  });
  const slotHeight = Math.max(LANE, COPY * Math.max(1, producers.length) + 4);
  const top = 22;
  const tops = [top];
  for (let slot = 0; slot < stages; slot++) {
    tops.push(top + LANE + 4 + slot * (slotHeight + 4));
  }
  const axis = tops[stages] + slotHeight + 8;
  const width = LEFT + end * UNIT + 24;
  const height = axis + 22;
  const svg = s('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'tl-pipeline-svg' });
  svg.appendChild(s('text', { x: 4, y: 12, class: 'tl-svg-title' }, null,
    `${panel.name ? panel.name + ' \u00b7 ' : ''}loop ${str(plan.loop)}: num_stages = ${stages}`));
  svg.appendChild(s('text', { x: LEFT - 8, y: top + LANE / 2 + 4, 'text-anchor': 'end', class: 'tl-svg-label' }, null, 'compute'));
  const buffers = Object.keys(plan.slots ?? {}).join(', ');
  for (let slot = 0; slot < stages; slot++) {
    svg.appendChild(s('text', { x: LEFT - 8, y: tops[1 + slot] + slotHeight / 2, 'text-anchor': 'end', class: 'tl-svg-label' },
      { title: buffers }, `slot ${slot}`));
    svg.appendChild(s('line', { x1: LEFT, x2: LEFT + end * UNIT, y1: tops[1 + slot] - 2, y2: tops[1 + slot] - 2, stroke: '#ccc', 'stroke-width': 0.5 }));
  }
  for (const r of panel.rows) {
    if (r.kind === 'compute' && r.slot >= 0 && r.slot < stages) {
      svg.appendChild(s('rect', {
        x: LEFT + r.start * UNIT, y: tops[1 + r.slot], width: (r.end - r.start) * UNIT, height: slotHeight,
        fill: COLORS.read
      }, { title: `slot ${r.slot} read by the compute of #${r.iteration}` }));
    }
  }
  for (const r of panel.rows) {
    const x = LEFT + r.start * UNIT;
    const w = Math.max(1, (r.end - r.start) * UNIT);
    let y: number;
    let barHeight: number;
    if (r.kind === 'copy') {
      const k = statementRow.get(Number(r.statement)) ?? 0;
      y = tops[1 + (r.slot % stages)] + 2 + k * COPY;
      barHeight = COPY - 1;
    } else {
      y = top;
      barHeight = LANE;
    }
    const rect = s('rect', {
      x, y, width: w, height: barHeight, fill: COLORS[r.kind] ?? '#999', stroke: '#fff', 'stroke-width': 1,
      class: `tl-bar tl-bar-${r.kind === 'copy' || r.kind === 'compute' || r.kind === 'wait' ? r.kind : 'other'}`
    }, { title: `${str(r.label)} \u00b7 ${r.kind} \u00b7 iteration ${r.iteration}, slot ${r.slot}, t ${num(r.start)}\u2013${num(r.end)}${r.phase ? ' \u00b7 ' + r.phase : ''}` });
    rect.setAttribute('data-start', String(r.start));
    rect.setAttribute('data-end', String(r.end));
    svg.appendChild(rect);
    bars.push({ node: rect, start: r.start, end: r.end });
    if (w >= 18) {
      const label = s('text', {
        x: x + 3, y: y + barHeight / 2 + 3, class: r.kind === 'wait' ? 'tl-bar-label tl-dark' : 'tl-bar-label'
      }, null, `#${r.iteration}`);
      svg.appendChild(label);
    }
  }
  svg.appendChild(s('line', { x1: LEFT, x2: LEFT + end * UNIT, y1: axis, y2: axis, stroke: '#888' }));
  const tick = Math.max(1, Math.ceil(end / 40));
  for (let t = 0; t <= end; t += tick) {
    svg.appendChild(s('line', { x1: LEFT + t * UNIT, x2: LEFT + t * UNIT, y1: axis, y2: axis + 4, stroke: '#888' }));
    svg.appendChild(s('text', { x: LEFT + t * UNIT, y: axis + 15, 'text-anchor': 'middle', class: 'tl-svg-axis' }, null, String(t)));
  }
  const cursor = s('line', { x1: LEFT, x2: LEFT, y1: top - 4, y2: axis, stroke: '#d9534f', 'stroke-width': 2, class: 'tl-cursor' });
  svg.appendChild(cursor);
  return svg;
}

const MEASURED_COLORS: Record<string, string> = { wait: '#e57373', issue: '#3b7dd8', compute: '#2e9d57', copy: '#3b7dd8' };

/**
 * The measured run (tilelab.instrument.measured_rows): one lane per block, its
 * iterations' wait, issue and compute in nanoseconds since the block's first stamp.
 */
export function measuredPanel(rows: TimelineRow[]): HTMLElement | null {
  const timed = rows.filter(r => typeof r.start_ns === 'number' && typeof r.end_ns === 'number');
  if (!timed.length) {
    return null;
  }
  const blocks = [...new Set(timed.map(r => Number((r as any).block ?? 0)))].sort((a, b) => a - b).slice(0, 16);
  const t0 = Math.min(...timed.map(r => r.start_ns as number));
  const t1 = Math.max(...timed.map(r => r.end_ns as number));
  const span = Math.max(1, t1 - t0);
  const width = 760;
  const lane = 22;
  const height = 24 + blocks.length * lane + 22;
  const svg = s('svg', { width: LEFT + width + 20, height, class: 'tl-pipeline-svg tl-measured' });
  svg.appendChild(s('text', { x: 4, y: 12, class: 'tl-svg-title' }, null,
    `measured on the GPU: ${num(span / 1000)} \u00b5s (thread 0 of ${blocks.length} block${blocks.length === 1 ? '' : 's'}; ` +
    'red: waiting for tiles, blue: issuing copies, green: compute)'));
  blocks.forEach((block, k) => svg.appendChild(s('text', { x: LEFT - 8, y: 22 + k * lane + 14, 'text-anchor': 'end', class: 'tl-svg-label' }, null, `block ${block}`)));
  for (const r of timed) {
    const k = blocks.indexOf(Number((r as any).block ?? 0));
    if (k < 0) {
      continue;
    }
    const start = r.start_ns as number;
    const stop = r.end_ns as number;
    const x = LEFT + ((start - t0) / span) * width;
    const w = Math.max(0.5, ((stop - start) / span) * width);
    svg.appendChild(s('rect', { x, y: 22 + k * lane, width: w, height: lane - 4, fill: MEASURED_COLORS[r.kind] ?? '#999', class: 'tl-measured-bar' },
      { title: `block ${str((r as any).block ?? 0)}, iteration ${r.iteration}: ${str(r.kind)} ${num((stop - start) / 1000)} \u00b5s` }));
  }
  const axis = 22 + blocks.length * lane + 2;
  svg.appendChild(s('line', { x1: LEFT, x2: LEFT + width, y1: axis, y2: axis, stroke: '#888' }));
  for (let k = 0; k <= 4; k++) {
    svg.appendChild(s('text', { x: LEFT + (k * width) / 4, y: axis + 14, 'text-anchor': 'middle', class: 'tl-svg-axis' }, null,
      `${num((k * span) / 4 / 1000, 3)} \u00b5s`));
  }
  return h('div', { class: 'tl-scroll' }, svg);
}

function planTable(panels: Panel[]): HTMLElement {
  const rows = panels.map(p => [
    p.name ? `${p.name} \u00b7 ${str(p.plan.loop)}` : str(p.plan.loop),
    String(p.plan.num_stages),
    str(p.plan.extent),
    h('div', null, ...(p.plan.statements ?? []).slice().sort((a, b) => a.order - b.order)
      .map(st => h('div', null, `stage ${st.stage} \u00b7 ${str(st.role)} \u00b7 `, h('code', null, str(st.text))))),
    Object.entries(p.plan.slots ?? {}).map(([b, n]) => `${b} \u00d7${n}`).join(', '),
    str(p.plan.waits)
  ]);
  return table(['loop', 'stages', 'extent', 'statements (in issue order)', 'slots', 'waits'], rows, 'tl-plan-table');
}

export function renderPipeline(data: PipelinePayload): HTMLElement {
  const panels = panelsOf(data);
  const title = ['pipeline \u00b7 ', code(data.kernel)];
  if (panels.length === 0) {
    return frame('pipeline', title, note('No T.Pipelined loop with num_stages \u2265 2 in this kernel.'));
  }
  const end = Math.max(1, ...panels.flatMap(p => p.rows.map(r => Number(r.end) || 0)));
  const moments = momentsOf(panels);
  const bars: Bar[] = [];
  const svgs = panels.map(p => drawPanel(p, end, bars));
  const status = h('div', { class: 'tl-status tl-pipeline-status' });
  const clock = h('span', { class: 'tl-clock' });
  const slider = h('input', { class: 'tl-time', attrs: { type: 'range', min: 0, max: end, step: 0.05, value: end } });
  let timer: ReturnType<typeof setInterval> | null = null;
  let now = end;

  function show(t: number): void {
    now = Math.max(0, Math.min(end, t));
    slider.value = String(now);
    clock.textContent = `t = ${now.toFixed(2)}`;
    root.dataset.time = String(now);
    const x = LEFT + now * UNIT;
    for (const svg of svgs) {
      const cursor = svg.querySelector('.tl-cursor');
      cursor?.setAttribute('x1', String(x));
      cursor?.setAttribute('x2', String(x));
    }
    let active = 0;
    for (const bar of bars) {
      const on = bar.start <= now && now < bar.end;
      active += on ? 1 : 0;
      bar.node.setAttribute('opacity', bar.start > now ? '0.2' : '1');
      bar.node.setAttribute('stroke', on ? '#000' : '#fff');
      bar.node.setAttribute('stroke-width', on ? '2' : '1');
    }
    root.dataset.active = String(active);
    status.textContent = panels.map(p => describeAt(p, now, end)).join('\n');
  }
  function next(): void {
    show(moments.find(t => t > now + 1e-9) ?? end);
  }
  function previous(): void {
    const earlier = moments.filter(t => t < now - 1e-9);
    show(earlier.length ? earlier[earlier.length - 1] : 0);
  }
  function stop(): void {
    if (timer !== null) {
      clearInterval(timer);
      timer = null;
    }
    play.textContent = '\u25b6 play';
    root.dataset.playing = 'false';
  }
  const play = button('\u25b6 play', () => {
    if (timer !== null) {
      stop();
      return;
    }
    if (now >= end) {
      show(0);
    }
    play.textContent = '\u23f8 pause';
    root.dataset.playing = 'true';
    timer = setInterval(() => {
      if (now >= end) {
        stop();
      } else {
        next();
      }
    }, 400);
  }, 'tl-play');
  slider.addEventListener('input', () => {
    stop();
    show(parseFloat(slider.value));
  });

  const controls = h('div', { class: 'tl-controls' },
    button('\u21e4 start', () => { stop(); show(0); }, 'tl-reset'),
    button('\u25c0 step', () => { stop(); previous(); }, 'tl-back'),
    play,
    button('step \u25b6', () => { stop(); next(); }, 'tl-step'),
    ' ', slider, ' ', clock);
  const root = frame('pipeline', title,
    planTable(panels),
    controls,
    h('div', { class: 'tl-scroll' }, ...svgs),
    status,
    measuredPanel(Array.isArray(data.measured) ? data.measured : []),
    note('Abstract time: one unit is an iteration\u2019s compute. Copies are blue, compute green, waits red; ' +
      'pale green marks the slot being read.'));
  root.addEventListener('tl-dispose', stop);
  show(end);
  return root;
}
