// npm install hook: builds the optional native kernels (native/) with node-gyp. It never fails the
// install: without a compiler, Node headers or node-gyp, flowrl runs on stock tfjs kernels.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dir = path.join(root, 'native');

function nodeGyp() {
  if (process.env.npm_config_node_gyp && fs.existsSync(process.env.npm_config_node_gyp)) return process.env.npm_config_node_gyp;
  try {
    return createRequire(import.meta.url).resolve('node-gyp/bin/node-gyp.js');
  } catch {
    const bundled = path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
    return fs.existsSync(bundled) ? bundled : undefined;
  }
}

/** Node's own headers (npm's nodedir, or the install prefix), so node-gyp never downloads them. */
function nodeDir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir;
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  return fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined;
}

if (process.env.FLOWRL_SKIP_NATIVE_BUILD) {
  console.log('flowrl: FLOWRL_SKIP_NATIVE_BUILD is set; native kernels not built');
} else {
  const gyp = nodeGyp();
  const headers = nodeDir();
  const result = gyp
    ? spawnSync(process.execPath, [gyp, 'rebuild', '--silent', ...(headers ? [`--nodedir=${headers}`] : [])], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], timeout: 180_000, encoding: 'utf8' })
    : undefined;
  if (result && result.status === 0) {
    console.log('flowrl: built native kernels (native/build/Release/flowrl_blas.node)');
  } else {
    const why = !gyp ? 'node-gyp not found' : result.error ? result.error.message : `${result.stdout}${result.stderr}`.trim().split('\n').slice(-3).join(' | ');
    console.warn(`flowrl: native kernels not built (${why}); running on stock tfjs kernels`);
  }
}
