// jsdom has no canvas: a 2D context that accepts every call, so the layout view draws.
const fakeContext = new Proxy({} as Record<string | symbol, unknown>, {
  get(target, key) {
    if (key in target) {
      return target[key];
    }
    return () => undefined;
  },
  set(target, key, value) {
    target[key] = value;
    return true;
  }
});

HTMLCanvasElement.prototype.getContext = function () {
  return fakeContext as unknown as CanvasRenderingContext2D;
} as typeof HTMLCanvasElement.prototype.getContext;

// Lumino's drag and drop module reads DragEvent when it loads; jsdom has none.
if (typeof (globalThis as any).DragEvent === 'undefined') {
  (globalThis as any).DragEvent = MouseEvent;
}
