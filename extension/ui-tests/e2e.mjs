// End-to-end test of the extension in a real browser.
//
// Starts `jupyter lab` headless on loopback (a free port, a random token, settings and
// workspaces in a temporary folder), opens a copy of tilelab_views.ipynb — a notebook with
// SAVED tilelab outputs, so nothing needs a kernel — in Debian's Chromium through
// playwright-core, and checks that the views render and respond. Screenshots and
// e2e-results.json go to ui-tests/artifacts/ (git-ignored; CI keeps them).
//
//   node ui-tests/e2e.mjs            (from extension/; `npm run e2e` does the same)
//
// Environment: JUPYTER (default ../.venv/bin/jupyter), CHROMIUM (default /usr/bin/chromium),
// E2E_TIMEOUT_S (default 150, the whole run), E2E_HEADED=1 to watch, E2E_THEME (e.g.
// "JupyterLab Dark"), E2E_CONSOLE=1 to print the page's console.
//
// The lab loads the extension from extension/tilelab_labextension (put first on the
// labextensions path), so this tests the files that are built and shipped.

import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, openSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
const EXTENSION = resolve(HERE, '..');
const ROOT = resolve(EXTENSION, '..');
const NOTEBOOK = join(HERE, 'tilelab_views.ipynb');
const ARTIFACTS = join(HERE, 'artifacts');
const BUILT = join(EXTENSION, 'tilelab_labextension');
const JUPYTER = process.env.JUPYTER || join(ROOT, '.venv', 'bin', 'jupyter');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOTAL_TIMEOUT_S = Number(process.env.E2E_TIMEOUT_S || 150);
const EVIL = '<img src=x onerror=alert(1)>';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'];

const started = Date.now();
const results = [];
const timings = {};
const seconds = () => ((Date.now() - started) / 1000).toFixed(1);
const log = message => console.log(`[e2e ${seconds()}s] ${message}`);

function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

async function waitForServer(base, token, server, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (server.exitCode !== null) {
      throw new Error(`jupyter lab exited with ${server.exitCode} (see artifacts/jupyter.log)`);
    }
    try {
      const response = await fetch(`${base}/api/status?token=${token}`);
      if (response.ok) {
        return;
      }
    } catch {
      // not listening yet
    }
    await sleep(250);
  }
  throw new Error(`jupyter lab did not answer within ${timeoutMs / 1000} s`);
}

/** What the saved notebook holds: the payloads the checks compare against. */
function savedPayloads() {
  const notebook = JSON.parse(readFileSync(NOTEBOOK, 'utf8'));
  const found = [];
  for (const cell of notebook.cells) {
    for (const output of cell.outputs ?? []) {
      for (const [type, data] of Object.entries(output.data ?? {})) {
        const match = /^application\/vnd\.tilelab\.(\w+)\+json$/.exec(type);
        if (match) {
          found.push({ view: match[1], data });
        }
      }
    }
  }
  return found;
}

async function check(name, body) {
  const t0 = Date.now();
  try {
    const detail = await body();
    results.push({ name, ok: true, ms: Date.now() - t0, detail: detail ?? '' });
    log(`ok    ${name}${detail ? ` (${detail})` : ''}`);
  } catch (err) {
    results.push({ name, ok: false, ms: Date.now() - t0, error: String(err?.stack || err) });
    log(`FAIL  ${name}: ${String(err?.message || err).split('\n')[0]}`);
  }
}

function assert(condition, message) {
  if (!condition) {
    throw new Error(message);
  }
}

async function main() {
  rmSync(ARTIFACTS, { recursive: true, force: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  assert(existsSync(join(BUILT, 'package.json')), `no built extension in ${BUILT}: run scripts/build_extension.sh`);
  assert(existsSync(JUPYTER), `no jupyter at ${JUPYTER} (set JUPYTER)`);
  assert(existsSync(CHROMIUM), `no browser at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM)`);

  const work = mkdtempSync(join(tmpdir(), 'tilelab-e2e-'));
  const root = join(work, 'root');
  mkdirSync(root);
  cpSync(NOTEBOOK, join(root, 'tilelab_views.ipynb'));
  // This extension first on the labextensions path: the built folder, whatever is installed.
  mkdirSync(join(work, 'labextensions'));
  symlinkSync(BUILT, join(work, 'labextensions', 'tilelab'));
  // Settings: every cell rendered (no windowing), no news or update checks.
  const settings = join(work, 'settings');
  mkdirSync(join(settings, '@jupyterlab', 'notebook-extension'), { recursive: true });
  writeFileSync(join(settings, '@jupyterlab', 'notebook-extension', 'tracker.jupyterlab-settings'),
    JSON.stringify({ windowingMode: 'none' }));
  mkdirSync(join(settings, '@jupyterlab', 'apputils-extension'), { recursive: true });
  writeFileSync(join(settings, '@jupyterlab', 'apputils-extension', 'notification.jupyterlab-settings'),
    JSON.stringify({ fetchNews: 'false', checkForUpdates: false }));
  if (process.env.E2E_THEME) {
    writeFileSync(join(settings, '@jupyterlab', 'apputils-extension', 'themes.jupyterlab-settings'),
      JSON.stringify({ theme: process.env.E2E_THEME }));
  }

  const port = await freePort();
  const token = randomBytes(16).toString('hex');
  const base = `http://127.0.0.1:${port}`;
  const serverLog = openSync(join(ARTIFACTS, 'jupyter.log'), 'w');
  const env = {
    ...process.env,
    JUPYTER_CONFIG_DIR: join(work, 'config'),
    JUPYTER_RUNTIME_DIR: join(work, 'runtime'),
    JUPYTER_DATA_DIR: join(work, 'data'),
    IPYTHONDIR: join(work, 'ipython'),
    PATH: `${dirname(JUPYTER)}:${process.env.PATH}`
  };
  const server = spawn(JUPYTER, ['lab', '--no-browser', '--ip=127.0.0.1', `--port=${port}`, '--port-retries=0',
    `--ServerApp.token=${token}`, '--allow-root', `--ServerApp.root_dir=${root}`,
    `--LabApp.user_settings_dir=${settings}`, `--LabApp.workspaces_dir=${join(work, 'workspaces')}`,
    `--LabServerApp.extra_labextensions_path=${join(work, 'labextensions')}`,
    '--LabApp.news_url=', '--ServerApp.open_browser=False'],
  { cwd: root, env, detached: true, stdio: ['ignore', serverLog, serverLog] });
  let browser = null;
  let page = null;
  const watchdog = setTimeout(() => {
    log(`timed out after ${TOTAL_TIMEOUT_S} s`);
    shutdown(124);
  }, TOTAL_TIMEOUT_S * 1000);

  let finished = false;
  async function shutdown(code) {
    if (finished) {
      return;
    }
    finished = true;
    clearTimeout(watchdog);
    try {
      await browser?.close();
    } catch {
      // already gone
    }
    try {
      process.kill(-server.pid, 'SIGTERM'); // the server's own process group (we started it)
    } catch {
      // already gone
    }
    const deadline = Date.now() + 5000;
    while (server.exitCode === null && server.signalCode === null && Date.now() < deadline) {
      await sleep(100);
    }
    if (server.exitCode === null && server.signalCode === null) {
      try {
        process.kill(-server.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    rmSync(work, { recursive: true, force: true });
    const passed = results.filter(r => r.ok).length;
    const failed = results.length - passed + (code && !results.some(r => !r.ok) ? 1 : 0);
    writeFileSync(join(ARTIFACTS, 'e2e-results.json'), JSON.stringify({
      passed, failed, seconds: Number(seconds()), timings, results
    }, null, 1));
    console.log(`e2e: ${passed} passed, ${failed} failed`);
    process.exit(failed ? code || 1 : 0);
  }

  try {
    log(`jupyter lab on ${base} (log: ui-tests/artifacts/jupyter.log)`);
    await waitForServer(base, token, server, 90000);
    timings.server_start_s = Number(seconds());
    log('server up');
    browser = await chromium.launch({
      executablePath: CHROMIUM, headless: !process.env.E2E_HEADED, args: CHROMIUM_ARGS, timeout: 60000
    });
    page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
    const dialogs = [];
    page.on('dialog', dialog => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    const pageErrors = [];
    page.on('pageerror', error => {
      pageErrors.push(String(error));
      log(`page error: ${String(error)}`);
    });
    page.on('console', message => {
      if (process.env.E2E_CONSOLE) {
        console.log(`[console ${message.type()}] ${message.text()}`);
      }
      if (message.type() === 'error' && /tilelab|tl-/.test(message.text())) {
        pageErrors.push(message.text());
      }
    });
    const saved = savedPayloads();
    await run(page, base, token, saved, dialogs, pageErrors);
    await shutdown(0);
  } catch (err) {
    results.push({ name: 'run', ok: false, error: String(err?.stack || err) });
    log(`FAIL  ${String(err?.stack || err)}`);
    try {
      await page?.screenshot({ path: join(ARTIFACTS, 'failure.png') });
      writeFileSync(join(ARTIFACTS, 'failure.html'), await page.content());
    } catch {
      // no page to show
    }
    await shutdown(1);
  }
}

async function run(page, base, token, saved, dialogs, pageErrors) {
  const t0 = Date.now();
  await page.goto(`${base}/lab/tree/tilelab_views.ipynb?token=${token}`, { waitUntil: 'domcontentloaded', timeout: 60000 });
  await page.waitForSelector('.jp-Notebook', { timeout: 60000 });
  await page.waitForSelector('.tl-view', { timeout: 60000 });
  await page.waitForFunction(n => document.querySelectorAll('.tl-view').length >= n, saved.length, { timeout: 30000 });
  timings.notebook_open_s = (Date.now() - t0) / 1000;
  log(`notebook open with ${saved.length} tilelab views in ${timings.notebook_open_s} s`);

  const viewCount = view => page.locator(`.tl-view[data-tl-view="${view}"]`).count();
  await check('every saved tilelab output renders with the extension (not the HTML fallback)', async () => {
    const views = [...new Set(saved.map(s => s.view))];
    for (const view of views) {
      const expected = saved.filter(s => s.view === view).length;
      const found = await viewCount(view);
      assert(found === expected, `${view}: ${found} views, expected ${expected}`);
    }
    const fallback = await page.locator('.tilelab-view, [data-tilelab-view]').count();
    assert(fallback === 0, `${fallback} static HTML fallbacks shown`);
    const broken = await page.locator('.tl-broken').count();
    assert(broken === 0, `${broken} views could not read their payload`);
    return views.join(', ');
  });

  // ---------------------------------------------------------------- the pass explorer
  const gemmPasses = saved.find(s => s.view === 'passes' && s.data.kernel === 'gemm_kernel').data;
  const passes = page.locator('.tl-view-passes').filter({ has: page.locator('.tl-title', { hasText: 'gemm_kernel' }) }).first();
  await check('passes: selecting a pass shows its diff', async () => {
    const index = gemmPasses.passes.findIndex(p => p.name === 'tirx.FlattenBuffer');
    assert(index > 0, 'no tirx.FlattenBuffer pass in the saved trace');
    await passes.scrollIntoViewIfNeeded();
    await passes.locator(`.tl-pass[data-index="${index}"]`).click();
    const panel = passes.locator(`.tl-pass-panel[data-pass="${index}"]`);
    await panel.locator('.tl-diff-unified').waitFor({ timeout: 10000 });
    const head = await panel.locator('.tl-panel-head').innerText();
    assert(head.includes(`#${index} tirx.FlattenBuffer`) && head.includes(`#${index - 1} `), `panel head: ${head}`);
    const changed = await panel.locator('.tl-diff-add, .tl-diff-del').count();
    assert(changed > 0, 'no changed lines in the diff');
    await passes.locator('.tl-mode-side').click();
    await panel.locator('.tl-diff-side').waitFor({ timeout: 5000 });
    await passes.screenshot({ path: join(ARTIFACTS, 'passes.png') });
    await passes.locator('.tl-mode-diff').click();
    return `${changed / 4} changed lines`;
  });

  await check('passes: hide no-op passes, find a name, show the IR', async () => {
    const hidden = await passes.locator('.tl-pass[hidden]').count();
    assert(hidden === gemmPasses.passes.filter(p => !p.changed).length, `${hidden} passes hidden`);
    await passes.locator('.tl-hide-noops').uncheck();
    assert(await passes.locator('.tl-pass[hidden]').count() === 0, 'no-op passes still hidden');
    await passes.locator('.tl-find').fill('c_fragment');
    await passes.locator('.tl-find').press('Enter');
    const status = await passes.locator('.tl-find-status').innerText();
    assert(/c_fragment: first changed by #\d+/.test(status), `find status: ${status}`);
    await passes.locator('.tl-mode-ir').click();
    await passes.locator('.tl-pass-panel[data-mode="ir"] .tl-code-line').first().waitFor({ timeout: 5000 });
    assert(await passes.locator('.tl-pass-panel .tl-tok-kw').count() > 0, 'no highlighted keywords in the IR');
    return status;
  });

  await check('passes: a FlashAttention trace with every pass opens in under a second', async () => {
    const flash = saved.find(s => s.view === 'passes' && s.data.passes.length === Math.max(
      ...saved.filter(x => x.view === 'passes').map(x => x.data.passes.length))).data;
    const irBytes = flash.passes.reduce((n, p) => n + p.ir.length, 0);
    const view = page.locator('.tl-view-passes').filter({ has: page.locator(`.tl-pass[data-index="${flash.passes.length - 1}"]`) })
      .filter({ hasNot: page.locator(`.tl-pass[data-index="${flash.passes.length}"]`) }).first();
    await view.scrollIntoViewIfNeeded();
    const renderMs = Number(await view.getAttribute('data-render-ms'));
    let biggest = 1;
    flash.passes.forEach((p, i) => {
      if (i > 0 && p.ir.length > flash.passes[biggest].ir.length) {
        biggest = i;
      }
    });
    // Select the biggest pass, then show its whole IR; time it to the next painted frame.
    const switchMs = await view.evaluate(async (root, index) => {
      const t = performance.now();
      root.querySelector(`.tl-pass[data-index="${index}"]`).click();
      root.querySelector('.tl-mode-ir').click();
      await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
      return performance.now() - t;
    }, biggest);
    const diffMs = await view.evaluate(async root => {
      const t = performance.now();
      root.querySelector('.tl-mode-diff').click();
      await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
      return performance.now() - t;
    });
    timings.flash_attention = { passes: flash.passes.length, ir_mb: irBytes / 1e6, target: flash.target,
      render_ms: renderMs, biggest_ir_ms: switchMs, biggest_diff_ms: diffMs };
    assert(renderMs < 1000, `rendered in ${renderMs} ms`);
    assert(switchMs < 1000, `the biggest IR took ${switchMs} ms`);
    assert(diffMs < 1000, `the biggest diff took ${diffMs} ms`);
    await view.screenshot({ path: join(ARTIFACTS, 'flash_attention_passes.png') });
    return `${flash.passes.length} passes, ${(irBytes / 1e6).toFixed(2)} MB of IR: view ${renderMs} ms, ` +
      `biggest IR ${switchMs.toFixed(0)} ms, its diff ${diffMs.toFixed(0)} ms`;
  });

  // ---------------------------------------------------------------- layouts
  await check('layout: hovering a fragment cell shows its thread', async () => {
    const data = saved.find(s => s.view === 'layout' && s.data.buffer === 'c_fragment' && s.data.kernel === 'gemm_kernel').data;
    const view = page.locator('.tl-view-layout').filter({ has: page.locator('.tl-title', { hasText: 'c_fragment' }) })
      .filter({ has: page.locator('.tl-title', { hasText: 'gemm_kernel' }) }).first();
    const canvas = view.locator('canvas');
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const geometry = await canvas.evaluate(c => ({ ...c.dataset }));
    const [r, c] = [3, 9];
    const x = box.x + Number(geometry.x0) + (c + 0.5) * Number(geometry.cw);
    const y = box.y + Number(geometry.y0) + (r + 0.5) * Number(geometry.ch);
    await page.mouse.move(x, y);
    const thread = data.layout.thread[0][r][c];
    const register = data.layout.local[0][r][c];
    await view.locator('.tl-layout-info', { hasText: `thread ${thread} ` }).waitFor({ timeout: 5000 });
    const info = await view.locator('.tl-layout-info').innerText();
    assert(info.includes(`register R${register}`), `info: ${info}`);
    assert(await view.locator('.tl-tip').isVisible(), 'no tooltip');
    await page.mouse.click(x, y);
    await view.locator('.tl-layout-summary', { hasText: `thread ${thread} (warp` }).waitFor({ timeout: 5000 });
    const held = Number(await view.getAttribute('data-highlighted'));
    assert(held === data.layout.local_size, `${held} cells highlighted, expected ${data.layout.local_size}`);
    await view.locator('.tl-highlight-mode').selectOption('warp');
    const warpHeld = Number(await view.getAttribute('data-highlighted'));
    assert(warpHeld === 32 * data.layout.local_size, `warp: ${warpHeld} cells`);
    await page.mouse.move(x, y);
    await view.screenshot({ path: join(ARTIFACTS, 'layout.png') });
    return info;
  });

  await check('layout: a shared tile shows addresses and banks', async () => {
    const view = page.locator('.tl-view-layout').filter({ has: page.locator('.tl-title', { hasText: 'a_shared' }) }).first();
    const canvas = view.locator('canvas');
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const geometry = await canvas.evaluate(c => ({ ...c.dataset }));
    await page.mouse.move(box.x + Number(geometry.x0) + 1.5 * Number(geometry.cw), box.y + Number(geometry.y0) + 2.5 * Number(geometry.ch));
    await view.locator('.tl-layout-info', { hasText: 'bank' }).waitFor({ timeout: 5000 });
    return await view.locator('.tl-layout-info').innerText();
  });

  // ---------------------------------------------------------------- pipeline, dataflow, bench
  await check('pipeline: play, step and scrub', async () => {
    const view = page.locator('.tl-view-pipeline').first();
    await view.scrollIntoViewIfNeeded();
    await view.locator('.tl-reset').click();
    assert(await view.getAttribute('data-time') === '0', 'reset did not go to 0');
    await view.locator('.tl-step').click();
    const stepped = Number(await view.getAttribute('data-time'));
    assert(stepped > 0, 'step did not move');
    const status = await view.locator('.tl-pipeline-status').innerText();
    await view.locator('.tl-play').click();
    await page.waitForFunction(el => Number(el.dataset.time) > 2, await view.elementHandle(), { timeout: 5000 });
    await view.locator('.tl-play').click();
    await view.locator('.tl-time').fill('3');
    assert(await view.getAttribute('data-time') === '3', 'scrubbing did not move the time');
    await view.screenshot({ path: join(ARTIFACTS, 'pipeline.png') });
    return status.split('\n')[0];
  });

  await check('dataflow, bank conflicts, bench, source, check and error views', async () => {
    const dataflow = page.locator('.tl-view-dataflow').first();
    await dataflow.scrollIntoViewIfNeeded();
    await dataflow.locator('.tl-node').first().hover();
    const info = await dataflow.locator('.tl-dataflow-info').innerText();
    assert(/from .*; to /.test(info), `dataflow info: ${info}`);
    assert(await page.locator('.tl-view-bank_conflicts .tl-bank-square').count() > 0, 'no bank squares');
    assert(await page.locator('.tl-view-bench .tl-bar-row').count() >= 2, 'no bench bars');
    assert(await page.locator('.tl-view-source .tl-code-line').count() > 10, 'no source lines');
    assert((await page.locator('.tl-view-check .tl-verdict').first().innerText()) === 'passed', 'check not passed');
    const error = await page.locator('.tl-view-error').innerText();
    assert(/cell line \d+, column \d+/.test(error) && error.includes('undefined_buffer'), `error view: ${error}`);
    return info;
  });

  // ---------------------------------------------------------------- safety
  await check(`safety: a kernel named ${EVIL} and a <script> in the IR stay text`, async () => {
    const evilViews = page.locator('.tl-view').filter({ has: page.locator('.tl-title', { hasText: EVIL }) });
    const count = await evilViews.count();
    assert(count === 3, `${count} views show the name as text`);
    const evilPasses = evilViews.filter({ has: page.locator('.tl-pass') }).first();
    await evilPasses.scrollIntoViewIfNeeded();
    await evilPasses.locator('.tl-pass[data-index="1"]').click();
    await evilPasses.locator('.tl-pass-panel', { hasText: '<script>window.__tilelab_xss = 1</script>' }).waitFor({ timeout: 5000 });
    const injected = await page.evaluate(() => ({
      images: document.querySelectorAll('img[src="x"]').length,
      scripts: [...document.querySelectorAll('.jp-OutputArea script')].length,
      xss: window.__tilelab_xss
    }));
    assert(injected.images === 0 && injected.scripts === 0 && injected.xss === undefined, JSON.stringify(injected));
    assert(dialogs.length === 0, `dialogs: ${dialogs.join(', ')}`);
    return `${count} views, no img/script elements, no dialogs`;
  });

  // ---------------------------------------------------------------- the editor
  const cell = page.locator('.jp-CodeCell').filter({ has: page.locator('.cm-content', { hasText: '--check "x + y"' }) }).first();
  await check('editor: %%tilekernel cells are Python, with T.* primitives marked', async () => {
    await cell.scrollIntoViewIfNeeded();
    const editor = cell.locator('.cm-content');
    await editor.locator('.cm-tilelab-magic').waitFor({ timeout: 10000 });
    const primitives = await editor.locator('.cm-tilelab-primitive').allInnerTexts();
    for (const name of ['T.const', 'T.Tensor', 'T.Kernel', 'T.Parallel']) {
      assert(primitives.includes(name), `${name} not marked: ${primitives.join(' ')}`);
    }
    // Python keywords of the body are highlighted (a class on their span).
    const keyword = await editor.evaluate(content => {
      const spans = [...content.querySelectorAll('span')].filter(s => s.textContent === 'def' || s.textContent === 'for');
      return spans.map(s => s.className).filter(Boolean);
    });
    assert(keyword.length >= 2, `keywords not highlighted: ${JSON.stringify(keyword)}`);
    const flags = await editor.locator('.cm-tilelab-flag').allInnerTexts();
    assert(flags.includes('--check') && flags.includes('--bench'), `flags: ${flags}`);
    return `${primitives.length} primitives marked, flags ${flags.join(' ')}`;
  });

  await check('editor: the magic\u2019s flags are completed', async () => {
    const firstLine = cell.locator('.cm-line').first();
    await firstLine.click();
    await page.keyboard.press('End');
    await page.keyboard.type(' --dataf');
    await page.keyboard.press('Tab');
    const completer = page.locator('.jp-Completer:not(.lm-mod-hidden) .jp-Completer-item', { hasText: '--dataflow' });
    const inserted = cell.locator('.cm-line').first().filter({ hasText: '--dataflow' });
    await Promise.race([completer.first().waitFor({ timeout: 10000 }), inserted.waitFor({ timeout: 10000 })]);
    if (await completer.count()) {
      await page.keyboard.press('Enter');
    }
    await inserted.waitFor({ timeout: 5000 });
    const text = await cell.locator('.cm-line').first().innerText();
    await page.screenshot({ path: join(ARTIFACTS, 'editor.png') });
    return text;
  });

  await check('no errors from the extension in the page', async () => {
    assert(pageErrors.length === 0, pageErrors.join('\n'));
  });

  // One picture of each kind of view, then the page.
  for (const view of [...new Set(saved.map(x => x.view))]) {
    const first = page.locator(`.tl-view[data-tl-view="${view}"]`).first();
    await first.scrollIntoViewIfNeeded();
    await first.screenshot({ path: join(ARTIFACTS, `view-${view}.png`) });
  }
  await page.locator('.tl-view-passes').first().scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(ARTIFACTS, 'e2e.png') });
}

main();
