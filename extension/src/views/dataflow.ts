/**
 * The dataflow graph: buffers (boxes, coloured by memory scope) and tile ops
 * (ellipses), laid out in layers from left to right. Cycles (an accumulator
 * read and written in a loop) are broken for the layering only; the edge that
 * closes one is drawn dashed. The DOT text is there to copy into graphviz.
 */

import { button, code, frame, h, note, s, str } from '../dom';

export interface DataflowPayload {
  version?: number;
  kernel?: string;
  dot?: string;
  nodes?: { id: string; label: string; kind: string; scope?: string }[];
  edges?: { from: string; to: string }[];
}

export interface Placed {
  id: string;
  label: string;
  kind: string;
  scope: string;
  layer: number;
  order: number;
  x: number;
  y: number;
  width: number;
  height: number;
}

const SCOPE_COLORS: [RegExp, string][] = [
  [/^global/, '#cfe2f3'],
  [/^shared/, '#d9ead3'],
  [/fragment|^local/, '#fce5cd']
];

export function scopeColor(scope: string): string {
  return SCOPE_COLORS.find(([pattern]) => pattern.test(scope))?.[1] ?? '#eeeeee';
}

/** Layers and positions: longest path from the sources, then barycentric ordering. */
export function layoutGraph(data: DataflowPayload): { nodes: Placed[]; edges: { from: string; to: string; back: boolean }[]; width: number; height: number } {
  const raw = Array.isArray(data.nodes) ? data.nodes : [];
  const ids = new Set(raw.map(n => str(n.id)));
  const edges = (Array.isArray(data.edges) ? data.edges : [])
    .filter(e => ids.has(str(e.from)) && ids.has(str(e.to)) && e.from !== e.to)
    .map(e => ({ from: str(e.from), to: str(e.to), back: false }));
  const out = new Map<string, string[]>();
  raw.forEach(n => out.set(str(n.id), []));
  edges.forEach(e => out.get(e.from)!.push(e.to));
  // Find back edges with a depth-first search in node order (iterative: graphs can be deep).
  const color = new Map<string, number>(); // 0 new, 1 on the stack, 2 done
  const back = new Set<string>();
  for (const n of raw) {
    const start = str(n.id);
    if (color.get(start)) {
      continue;
    }
    const stack: [string, number][] = [[start, 0]];
    color.set(start, 1);
    while (stack.length) {
      const top = stack[stack.length - 1];
      const next = out.get(top[0])!;
      if (top[1] >= next.length) {
        color.set(top[0], 2);
        stack.pop();
        continue;
      }
      const to = next[top[1]++];
      const c = color.get(to) ?? 0;
      if (c === 1) {
        back.add(`${top[0]}\u0000${to}`);
      } else if (c === 0) {
        color.set(to, 1);
        stack.push([to, 0]);
      }
    }
  }
  edges.forEach(e => (e.back = back.has(`${e.from}\u0000${e.to}`)));
  const forward = edges.filter(e => !e.back);
  // Longest path layering (Kahn's order).
  const indegree = new Map<string, number>();
  raw.forEach(n => indegree.set(str(n.id), 0));
  forward.forEach(e => indegree.set(e.to, (indegree.get(e.to) ?? 0) + 1));
  const layer = new Map<string, number>();
  const queue = raw.map(n => str(n.id)).filter(id => indegree.get(id) === 0);
  queue.forEach(id => layer.set(id, 0));
  const succ = new Map<string, string[]>();
  raw.forEach(n => succ.set(str(n.id), []));
  forward.forEach(e => succ.get(e.from)!.push(e.to));
  for (let q = 0; q < queue.length; q++) {
    const id = queue[q];
    for (const to of succ.get(id)!) {
      layer.set(to, Math.max(layer.get(to) ?? 0, (layer.get(id) ?? 0) + 1));
      indegree.set(to, indegree.get(to)! - 1);
      if (indegree.get(to) === 0) {
        queue.push(to);
      }
    }
  }
  // Pull nodes right, next to their first consumer (a `fill` then sits beside the
  // accumulator it clears rather than at the far left with a long edge).
  for (let q = queue.length - 1; q >= 0; q--) {
    const id = queue[q];
    const next = succ.get(id)!;
    if (next.length) {
      const limit = Math.min(...next.map(to => layer.get(to) ?? 0)) - 1;
      layer.set(id, Math.max(layer.get(id) ?? 0, limit));
    }
  }
  const layers: string[][] = [];
  raw.forEach(n => {
    const l = layer.get(str(n.id)) ?? 0;
    (layers[l] = layers[l] ?? []).push(str(n.id));
  });
  // Order within layers by the mean position of neighbours, a few sweeps each way.
  const position = new Map<string, number>();
  const renumber = () => layers.forEach(ids => ids.forEach((id, i) => position.set(id, i)));
  renumber();
  const neighbours = (id: string, up: boolean) =>
    forward.filter(e => (up ? e.to === id : e.from === id)).map(e => position.get(up ? e.from : e.to)!);
  for (let sweep = 0; sweep < 4; sweep++) {
    const up = sweep % 2 === 0;
    const order = up ? layers.map((_, i) => i) : layers.map((_, i) => layers.length - 1 - i);
    for (const l of order) {
      const ids = layers[l] ?? [];
      const keyed = ids.map((id, i) => {
        const ns = neighbours(id, up);
        return { id, key: ns.length ? ns.reduce((a, b) => a + b, 0) / ns.length : i };
      });
      keyed.sort((a, b) => a.key - b.key);
      layers[l] = keyed.map(k => k.id);
      renumber();
    }
  }
  const byId = new Map(raw.map(n => [str(n.id), n]));
  const size = (label: string): [number, number] => {
    const lines = label.split('\n');
    return [Math.max(60, Math.max(...lines.map(l => l.length)) * 6.6 + 24), lines.length * 14 + 14];
  };
  const layerWidth = layers.map(ids => Math.max(0, ...ids.map(id => size(str(byId.get(id)?.label))[0])));
  const gapX = 56;
  const gapY = 18;
  const columnHeights = layers.map(ids => ids.reduce((sum, id) => sum + size(str(byId.get(id)?.label))[1] + gapY, -gapY));
  const height = Math.max(40, ...columnHeights) + 20;
  const placed: Placed[] = [];
  let x = 10;
  layers.forEach((ids, l) => {
    let y = 10 + (height - 20 - columnHeights[l]) / 2;
    ids.forEach((id, order) => {
      const node = byId.get(id)!;
      const [w, hgt] = size(str(node.label));
      placed.push({
        id, label: str(node.label), kind: str(node.kind), scope: str(node.scope), layer: l, order,
        x: x + (layerWidth[l] - w) / 2, y, width: w, height: hgt
      });
      y += hgt + gapY;
    });
    x += layerWidth[l] + gapX;
  });
  return { nodes: placed, edges, width: x - gapX + 10, height };
}

let markers = 0;

export function renderDataflow(data: DataflowPayload): HTMLElement {
  const title = ['dataflow \u00b7 ', code(data.kernel)];
  const graph = layoutGraph(data);
  const info = h('div', { class: 'tl-status tl-dataflow-info' }, 'hover a node for its edges');
  const parts: (HTMLElement | null)[] = [];
  if (graph.nodes.length) {
    const marker = `tl-arrow-${++markers}`;
    const svg = s('svg', { width: graph.width, height: graph.height, viewBox: `0 0 ${graph.width} ${graph.height}`, class: 'tl-dataflow-svg' });
    svg.appendChild(s('defs', {}, null, s('marker', {
      id: marker, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'
    }, null, s('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#666' }))));
    const at = new Map(graph.nodes.map(n => [n.id, n]));
    const edgeNodes: { from: string; to: string; node: SVGElement }[] = [];
    for (const e of graph.edges) {
      const a = at.get(e.from)!;
      const b = at.get(e.to)!;
      const x1 = a.x + a.width;
      const y1 = a.y + a.height / 2;
      const x2 = b.x;
      const y2 = b.y + b.height / 2;
      const bend = Math.max(30, Math.abs(x2 - x1) / 2);
      const d = e.back
        ? `M ${a.x + a.width / 2} ${a.y + a.height} C ${a.x + a.width / 2} ${a.y + a.height + 40}, ${b.x + b.width / 2} ${b.y + b.height + 40}, ${b.x + b.width / 2} ${b.y + b.height}`
        : `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`;
      const path = s('path', {
        d, fill: 'none', stroke: '#666', 'stroke-width': 1.2, 'marker-end': `url(#${marker})`,
        class: e.back ? 'tl-edge tl-edge-back' : 'tl-edge'
      });
      if (e.back) {
        path.setAttribute('stroke-dasharray', '4 3');
      }
      svg.appendChild(path);
      edgeNodes.push({ from: e.from, to: e.to, node: path });
    }
    for (const n of graph.nodes) {
      const group = s('g', {}, { class: `tl-node tl-node-${n.kind === 'buffer' ? 'buffer' : 'op'}`, data: { id: n.id } });
      const fill = n.kind === 'buffer' ? scopeColor(n.scope) : '#ffffff';
      group.appendChild(n.kind === 'buffer'
        ? s('rect', { x: n.x, y: n.y, width: n.width, height: n.height, rx: 6, fill, stroke: '#555' })
        : s('ellipse', { cx: n.x + n.width / 2, cy: n.y + n.height / 2, rx: n.width / 2, ry: n.height / 2, fill, stroke: '#555' }));
      const lines = n.label.split('\n');
      lines.forEach((line, k) => {
        group.appendChild(s('text', {
          x: n.x + n.width / 2, y: n.y + 7 + 14 * (k + 1) - 3, 'text-anchor': 'middle',
          class: k === 0 ? 'tl-node-label' : 'tl-node-sub'
        }, null, line));
      });
      group.addEventListener('mouseenter', () => {
        const ins = edgeNodes.filter(e => e.to === n.id);
        const outs = edgeNodes.filter(e => e.from === n.id);
        edgeNodes.forEach(e => e.node.classList.toggle('tl-edge-hot', e.from === n.id || e.to === n.id));
        const names = (list: typeof edgeNodes, key: 'from' | 'to') =>
          list.map(e => at.get(e[key])!.label.split('\n')[0]).join(', ') || 'nothing';
        info.textContent = `${n.label.split('\n').join(' ')} (${n.kind}${n.scope ? ', ' + n.scope : ''}): ` +
          `from ${names(ins, 'from')}; to ${names(outs, 'to')}`;
      });
      group.addEventListener('mouseleave', () => edgeNodes.forEach(e => e.node.classList.remove('tl-edge-hot')));
      svg.appendChild(group);
    }
    parts.push(h('div', { class: 'tl-scroll' }, svg), info);
  } else {
    parts.push(note('No nodes in this graph.'));
  }
  parts.push(note('Boxes are buffers (blue: global, green: shared, orange: registers); ellipses are tile ops; a dashed edge closes a cycle.'));
  if (data.dot) {
    const dot = str(data.dot);
    parts.push(h('details', { class: 'tl-dot' }, h('summary', null, 'DOT source (graphviz)'),
      button('copy', () => void navigator.clipboard?.writeText(dot), 'tl-copy'),
      h('pre', { class: 'tl-pre' }, dot)));
  }
  return frame('dataflow', title, ...parts);
}
