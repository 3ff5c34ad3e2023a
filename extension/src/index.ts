/**
 * The mime renderer extension: tilelab's application/vnd.tilelab.<view>+json
 * outputs as interactive views, also in a saved notebook with no kernel.
 *
 * The factory is "safe": the views build their DOM from the payload as text
 * (see dom.ts), so untrusted notebooks render them too, and they rank before
 * text/html so the static HTML fallback is not used where this is installed.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { MIME_TYPES, disposeView, renderPayload } from './render';

export class TileLabRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private readonly mimeType: string) {
    super();
    this.addClass('tl-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    disposeView(this.node.firstElementChild);
    const view = renderPayload(this.mimeType, model.data[this.mimeType]);
    this.node.replaceChildren(view);
    return Promise.resolve();
  }

  dispose(): void {
    if (!this.isDisposed) {
      disposeView(this.node.firstElementChild);
    }
    super.dispose();
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: MIME_TYPES,
  defaultRank: 0,
  createRenderer: options => new TileLabRenderer(options.mimeType)
};

const extension: IRenderMime.IExtension = {
  id: 'tilelab:views',
  description: 'Interactive views of tilelab compiler traces: passes, layouts, bank conflicts, pipelines, benchmarks.',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
