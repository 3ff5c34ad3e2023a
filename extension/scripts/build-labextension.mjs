// Build the federated labextension with @jupyterlab/builder, through `jupyter labextension
// build`, against the JupyterLab of the Python environment (by default the repository's
// .venv; set JUPYTER to use another `jupyter`).
//
//   node scripts/build-labextension.mjs              # -> tilelab_labextension/ (tracked: the
//                                                    #    prebuilt copy the package ships)
//   node scripts/build-labextension.mjs --out DIR    # -> DIR, leaving tracked files alone
//
// webpack numbers modules by their paths relative to the build, and the JupyterLab it
// builds against lives in the venv, so a build on another machine names its files
// differently: set-up builds into a git-ignored folder (--out) so that a user's checkout
// never changes under them. With --out, the build runs in a staging copy (package.json
// pointing its outputDir at DIR, lib/ and style/, a link to node_modules/).
//
// The core package data comes from that JupyterLab's staging/package.json (--core-path),
// so nothing is downloaded and the shared packages match the installed JupyterLab.
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync,
  writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const extension = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const venvJupyter = resolve(extension, '..', '.venv', 'bin', 'jupyter');
const jupyter = process.env.JUPYTER || (existsSync(venvJupyter) ? venvJupyter : 'jupyter');
const bin = jupyter.includes('/') ? dirname(jupyter) : '';
const python = bin && existsSync(join(bin, 'python')) ? join(bin, 'python') : 'python3';
const env = { ...process.env, PATH: bin ? `${bin}:${process.env.PATH}` : process.env.PATH };

const corePath = execFileSync(python, ['-c',
  'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))'],
{ env, encoding: 'utf8' }).trim();

const argv = process.argv.slice(2);
const outAt = argv.indexOf('--out');
let cwd = extension;
let output = join(extension, 'tilelab_labextension');
if (outAt >= 0) {
  output = resolve(argv[outAt + 1]);
  argv.splice(outAt, 2);
  cwd = join(extension, 'build', 'stage');
  rmSync(cwd, { recursive: true, force: true });
  mkdirSync(cwd, { recursive: true });
  for (const folder of ['lib', 'style']) {
    cpSync(join(extension, folder), join(cwd, folder), { recursive: true });
  }
  symlinkSync(join(extension, 'node_modules'), join(cwd, 'node_modules'));
  const pkg = JSON.parse(readFileSync(join(extension, 'package.json'), 'utf8'));
  pkg.jupyterlab.outputDir = relative(cwd, output);
  writeFileSync(join(cwd, 'package.json'), JSON.stringify(pkg, null, 2) + '\n');
}

const args = ['labextension', 'build', '--core-path', corePath, ...argv, '.'];
console.log(`> ${jupyter} ${args.join(' ')}`);
execFileSync(jupyter, args, { cwd, env, stdio: 'inherit' });

// install.json tells `jupyter labextension list` which Python package brings the extension.
copyFileSync(join(extension, 'install.json'), join(output, 'install.json'));
