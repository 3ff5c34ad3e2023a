// Build the federated labextension into tilelab_labextension/ with @jupyterlab/builder,
// through `jupyter labextension build`, against the JupyterLab of the Python environment
// (by default the repository's .venv; set JUPYTER to use another `jupyter`).
//
// The core package data comes from that JupyterLab's staging/package.json (--core-path),
// so nothing is downloaded and the shared packages match the installed JupyterLab.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
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

const args = ['labextension', 'build', '--core-path', corePath, ...process.argv.slice(2), '.'];
console.log(`> ${jupyter} ${args.join(' ')}`);
execFileSync(jupyter, args, { cwd: extension, env, stdio: 'inherit' });

// install.json tells `jupyter labextension list` which Python package brings the extension.
copyFileSync(join(extension, 'install.json'), join(extension, 'tilelab_labextension', 'install.json'));
