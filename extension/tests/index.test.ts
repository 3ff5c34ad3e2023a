import { describe, expect, it } from 'vitest';

import extension, { TileLabRenderer, rendererFactory } from '../src/index';
import { MIME_TYPES } from '../src/render';
import { payload } from './fixtures';

describe('the mime extension', () => {
  it('is safe, ranks before HTML and handles every tilelab type', () => {
    expect(rendererFactory.safe).toBe(true);
    expect(rendererFactory.defaultRank).toBeLessThan(50);
    expect(extension.rendererFactory.mimeTypes).toEqual(MIME_TYPES);
    expect(extension.dataType).toBe('json');
  });

  it('renders a model into its widget node, again on a new model, and stops on dispose', async () => {
    const type = 'application/vnd.tilelab.pipeline+json';
    const renderer = rendererFactory.createRenderer({ mimeType: type } as any) as TileLabRenderer;
    const model = { trusted: false, data: { [type]: payload('pipeline', 'gemm_kernel') }, metadata: {}, setData: () => undefined };
    await renderer.renderModel(model as any);
    expect(renderer.node.querySelector('.tl-view-pipeline')).not.toBeNull();
    await renderer.renderModel(model as any);
    expect(renderer.node.querySelectorAll('.tl-view')).toHaveLength(1);
    renderer.dispose();
    expect(renderer.isDisposed).toBe(true);
  });
});
