import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { MIME_TYPES, renderPayload } from '../src/render';
import { bestTimes, knobValues } from '../src/views/autotune';
import { EVIL, mount, q } from './fixtures';

const MIME = 'application/vnd.tilelab.autotune+json';
// written by tilelab's AutotuneView for a real CPU tune (9 candidates, 3 that do not compile)
const payload = () => JSON.parse(readFileSync(join(__dirname, 'autotune_payload.json'), 'utf8'));

describe('autotune', () => {
  it('is one of the mime types', () => {
    expect(MIME_TYPES).toContain(MIME);
  });

  it('lists the correct candidates by time, with the speed-ups over the default and the baseline', () => {
    const data = payload();
    const root = mount(renderPayload(MIME, data));
    expect(root.classList.contains('tl-broken')).toBe(false);
    const headers = [...root.querySelectorAll('.tl-autotune-table th')].map(th => th.textContent);
    expect(headers).toEqual(['#', 'block', 'threads', 'median ms', 'vs default', 'vs A * 1', 'compile s']);
    const body = [...root.querySelectorAll('.tl-autotune-table tbody tr')];
    const timed = data.rows.filter((r: any) => r.status === 'ok');
    expect(body).toHaveLength(timed.length);
    const shown = body.map(tr => Number(tr.children[3].textContent));
    expect(shown).toEqual([...shown].sort((a, b) => a - b));
    expect(body.filter(tr => tr.children[0].textContent!.includes('(default)'))).toHaveLength(1);
    expect(q(root, '.tl-autotune-best').textContent).toContain(`best: ${timed[0].label}`);
  });

  it('says how many timed calls each median comes from when screening left some with fewer', () => {
    const data = payload();
    const timed = data.rows.filter((r: any) => r.status === 'ok');
    timed.forEach((r: any, i: number) => { r.calls = i === 0 ? 100 : 10; });
    const root = mount(renderPayload(MIME, data));
    const headers = [...root.querySelectorAll('.tl-autotune-table th')].map(th => th.textContent);
    expect(headers).toEqual(['#', 'block', 'threads', 'median ms', 'vs default', 'timed calls', 'vs A * 1',
      'compile s']);
    const calls = [...root.querySelectorAll('.tl-autotune-table tbody tr')].map(tr => tr.children[5].textContent);
    expect(calls[0]).toBe('100');
    expect(calls.slice(1).every(c => c === '10')).toBe(true);
  });

  it('draws the best time per pair of knob values, and redraws for other axes', () => {
    const data = payload();
    const root = mount(renderPayload(MIME, data));
    const cells = root.querySelectorAll('.tl-heatmap .tl-heat-cell');
    const timed = data.rows.filter((r: any) => typeof r.median_ms === 'number');
    expect(cells).toHaveLength(bestTimes(timed, 'block', 'threads').size);
    expect(root.querySelectorAll('.tl-heat-best')).toHaveLength(1);
    expect(knobValues(timed, 'block')).toEqual(['32', '64', '128']);
    const x = q<HTMLSelectElement>(root, '.tl-knob-x');
    x.value = 'threads';
    x.dispatchEvent(new Event('change'));
    expect(q(root, '.tl-heatmap th').textContent).toContain('threads \u2192');
  });

  it('shows every failure with its reason, as text', () => {
    const data = payload();
    data.rows[data.rows.length - 1].reason = EVIL;
    const root = mount(renderPayload(MIME, data));
    const failures = root.querySelectorAll('.tl-failures tbody tr');
    expect(failures).toHaveLength(data.rows.filter((r: any) => r.status === 'compile failed').length);
    expect(root.querySelector('img')).toBeNull();
    expect(root.textContent).toContain(EVIL);
  });

  it('says so when nothing ran correctly', () => {
    const data = payload();
    data.rows = data.rows.map((r: any) => ({ ...r, status: 'wrong result', median_ms: null }));
    const root = mount(renderPayload(MIME, data));
    expect(q(root, '.tl-autotune-best').textContent).toBe('no configuration ran correctly');
    expect(root.querySelector('.tl-heatmap')).toBeNull();
  });
});
