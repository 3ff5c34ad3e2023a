/**
 * The frontend plugin: editor support for %%tilekernel cells (Python
 * highlighting of the body, T.* primitives marked) and completion of the
 * magic's flags. The views themselves are the mime extension (index.ts).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { EditorExtensionRegistry, IEditorExtensionRegistry, IEditorLanguageRegistry } from '@jupyterlab/codemirror';
import { CompletionHandler, ICompletionContext, ICompletionProvider, ICompletionProviderManager } from '@jupyterlab/completer';
import { Language } from '@codemirror/language';

import { flagCompletions, tilekernelExtension } from './editor/tilekernel';

export class TileKernelCompletionProvider implements ICompletionProvider {
  readonly identifier = 'tilelab:tilekernel-flags';
  readonly rank = 1000;
  readonly renderer = null;

  async isApplicable(context: ICompletionContext): Promise<boolean> {
    const editor = context.editor;
    if (!editor) {
      return false;
    }
    return editor.model.sharedModel.getSource().trimStart().startsWith('%%');
  }

  async fetch(request: CompletionHandler.IRequest): Promise<CompletionHandler.ICompletionItemsReply> {
    const found = flagCompletions(request.text, request.offset);
    if (!found) {
      return { start: request.offset, end: request.offset, items: [] };
    }
    return found;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'tilelab:editor',
  description: 'Python highlighting, T.* primitives and flag completion in %%tilekernel cells.',
  autoStart: true,
  requires: [IEditorExtensionRegistry],
  optional: [IEditorLanguageRegistry, ICompletionProviderManager],
  activate: async (
    _app: JupyterFrontEnd,
    extensions: IEditorExtensionRegistry,
    languages: IEditorLanguageRegistry | null,
    completions: ICompletionProviderManager | null
  ) => {
    let python: Language | null = null;
    try {
      python = (await languages?.getLanguage('python'))?.support?.language ?? null;
    } catch (err) {
      console.warn('tilelab: no Python language for %%tilekernel cells', err);
    }
    extensions.addExtension({
      name: 'tilelab:tilekernel',
      factory: options => EditorExtensionRegistry.createImmutableExtension(
        tilekernelExtension(python, options.model.sharedModel.getSource()))
    });
    completions?.registerProvider(new TileKernelCompletionProvider());
  }
};

export default plugin;
