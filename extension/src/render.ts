/**
 * From a mime type and its payload to a view (plain DOM, no JupyterLab needed:
 * the unit tests call `renderPayload` directly).
 */

import { code, frame, h, note, str } from './dom';
import { renderAutotune } from './views/autotune';
import { renderBankConflicts } from './views/banks';
import { renderDataflow } from './views/dataflow';
import { renderLayout } from './views/layout';
import { renderPasses } from './views/passes';
import { renderPipeline } from './views/pipeline';
import { renderBench, renderCheck, renderError, renderSource } from './views/simple';

export const MIME_VERSION = 1;

const RENDERERS: Record<string, (data: any) => HTMLElement> = {
  passes: renderPasses,
  source: renderSource,
  layout: renderLayout,
  bank_conflicts: renderBankConflicts,
  pipeline: renderPipeline,
  dataflow: renderDataflow,
  bench: renderBench,
  error: renderError,
  check: renderCheck,
  autotune: renderAutotune
};

export const VIEWS = Object.keys(RENDERERS);
export const MIME_TYPES = VIEWS.map(view => `application/vnd.tilelab.${view}+json`);

export function viewOf(mimeType: string): string {
  const found = /^application\/vnd\.tilelab\.([a-z_]+)\+json$/.exec(mimeType);
  return found ? found[1] : '';
}

/** The view of one payload; a payload it cannot read becomes a note, never an exception. */
export function renderPayload(mimeType: string, data: unknown): HTMLElement {
  const view = viewOf(mimeType);
  const render = RENDERERS[view];
  const payload = (data && typeof data === 'object' ? data : {}) as Record<string, unknown>;
  if (!render) {
    return frame('unknown', [`unknown tilelab view ${mimeType}`]);
  }
  let root: HTMLElement;
  try {
    root = render(payload);
  } catch (err) {
    root = frame(view, [`${view} \u00b7 `, code(payload.kernel)],
      note(`This ${view} payload could not be shown: ${str((err as Error)?.message ?? err)}`));
    root.classList.add('tl-broken');
  }
  const version = Number(payload.version);
  if (version > MIME_VERSION) {
    root.insertBefore(note(`(made by a newer tilelab: payload version ${version}; this extension reads version ${MIME_VERSION})`),
      root.children[1] ?? null);
  }
  return root;
}

/** Tell a view it is going away (stops timers such as the pipeline's play). */
export function disposeView(root: Element | null): void {
  root?.dispatchEvent(new CustomEvent('tl-dispose'));
}

export { h };
