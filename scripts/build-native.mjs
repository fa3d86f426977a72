// npm install hook: builds the optional native kernels (native/) with node-gyp, and the MPI addon
// (native/mpi) where Open MPI's mpicc is. It never fails the install: without a compiler, Node
// headers or node-gyp, flowrl runs on stock tfjs kernels. `--mpi` builds the MPI addon alone.
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

/** node-gyp rebuild in `cwd`: undefined when it worked, else why not (its last lines). */
function build(cwd) {
  const gyp = nodeGyp();
  if (!gyp) return 'node-gyp not found';
  const headers = nodeDir();
  const result = spawnSync(process.execPath, [gyp, 'rebuild', '--silent', ...(headers ? [`--nodedir=${headers}`] : [])], { cwd, stdio: ['ignore', 'pipe', 'pipe'], timeout: 180_000, encoding: 'utf8' });
  if (result.status === 0) return undefined;
  return result.error ? result.error.message : `${result.stdout}${result.stderr}`.trim().split('\n').slice(-3).join(' | ');
}

/** Open MPI's compiler wrapper answers --showme: then mpi.h and libmpi are there to build against. */
const hasMpi = () => spawnSync('mpicc', ['--showme:compile'], { stdio: 'ignore' }).status === 0;

const mpiOnly = process.argv.includes('--mpi');
if (process.env.FLOWRL_SKIP_NATIVE_BUILD) {
  console.log('flowrl: FLOWRL_SKIP_NATIVE_BUILD is set; native kernels not built');
} else {
  if (!mpiOnly) {
    const why = build(dir);
    if (why) console.warn(`flowrl: native kernels not built (${why}); running on stock tfjs kernels`);
    else console.log('flowrl: built native kernels (native/build/Release/flowrl_blas.node)');
  }
  // Data-parallel ranks (mpirun) need the MPI addon; without Open MPI a run is one process.
  if (hasMpi()) {
    const why = build(path.join(dir, 'mpi'));
    if (why) console.warn(`flowrl: the MPI addon was not built (${why}); runs under mpirun will stop with a message`);
    else console.log('flowrl: built the MPI addon (native/mpi/build/Release/flowrl_mpi.node)');
  } else if (mpiOnly) {
    console.warn('flowrl: mpicc not found (apt-get install libopenmpi-dev); the MPI addon was not built');
  }
}
