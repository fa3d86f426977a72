// A software Vulkan driver for the webgpu engine path on a machine without a GPU (CI, this
// project's test machine). Dawn (npm `webgpu`) rejects Debian bookworm's own lavapipe (Mesa 22.3:
// "shaderUniform*ArrayDynamicIndexing required"); bookworm-backports' Mesa 25 works. Its driver is
// downloaded with a private apt configuration and unpacked under node_modules/.cache, so neither
// /etc/apt nor the system's libraries change; the Vulkan loader and the driver's own dependencies
// (LLVM, libxcb, ...) come from bookworm's packages, installed by apt-get when this user is root.
//
// `node scripts/lavapipe.mjs` prints the environment that points Dawn at it; test-prerequisites.mjs
// calls prepareLavapipe() and the webgpu tests read lavapipeEnv().
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const LAVAPIPE_DIR = path.join(root, 'node_modules', '.cache', 'flowrl-lavapipe');
const ENV_FILE = path.join(LAVAPIPE_DIR, 'env.json');
const SKIP_FILE = path.join(LAVAPIPE_DIR, 'skipped.txt');
const KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';
const BACKPORTS = ['mesa-vulkan-drivers/bookworm-backports', 'libdrm2/bookworm-backports', 'libdrm-amdgpu1/bookworm-backports'];

/** The environment for a process that should see the unpacked lavapipe, or why there is none. */
export function lavapipeEnv() {
  if (fs.existsSync(ENV_FILE)) {
    const env = JSON.parse(fs.readFileSync(ENV_FILE, 'utf8'));
    return { env: { ...env, LD_LIBRARY_PATH: [env.LD_LIBRARY_PATH, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':') } };
  }
  if (fs.existsSync(SKIP_FILE)) return { skipped: fs.readFileSync(SKIP_FILE, 'utf8').trim() };
  return { skipped: 'the software Vulkan driver was not prepared (run node scripts/test-prerequisites.mjs, or node scripts/lavapipe.mjs)' };
}

function run(cmd, args, options = {}) {
  const result = spawnSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, ...options });
  return { ok: result.status === 0, output: `${result.stdout ?? ''}${result.stderr ?? ''}`.trim() };
}

function skip(reason) {
  fs.mkdirSync(LAVAPIPE_DIR, { recursive: true });
  fs.writeFileSync(SKIP_FILE, reason + '\n');
  fs.rmSync(ENV_FILE, { force: true });
  return { skipped: reason };
}

/** Why this machine cannot get the driver this way, if it cannot. */
function unsupported() {
  if (process.platform !== 'linux' || process.arch !== 'x64') return `needs Debian on x86-64 (this is ${process.platform}-${process.arch})`;
  const osRelease = fs.existsSync('/etc/os-release') ? fs.readFileSync('/etc/os-release', 'utf8') : '';
  if (!/VERSION_CODENAME=bookworm/.test(osRelease)) return 'needs Debian 12 (bookworm), whose backports carry Mesa 25';
  if (!fs.existsSync(KEYRING)) return `needs ${KEYRING} (debian-archive-keyring)`;
  if (run('sh', ['-c', 'command -v apt-get && command -v dpkg']).ok === false) return 'needs apt-get and dpkg';
  return undefined;
}

/**
 * Downloads and unpacks the backports driver once (a few seconds; kept until node_modules is
 * removed); returns the environment, or why it was skipped (also recorded for the tests to name).
 */
export function prepareLavapipe({ log = console.log } = {}) {
  if (fs.existsSync(ENV_FILE)) return lavapipeEnv();
  const reason = unsupported();
  if (reason) return skip(reason);
  const loaderAndDeps = ['libvulkan1', 'mesa-vulkan-drivers'];
  if (!run('dpkg', ['-s', ...loaderAndDeps]).ok) {
    const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
    if (!isRoot) return skip(`needs the Vulkan loader and bookworm's Mesa dependencies: sudo apt-get install ${loaderAndDeps.join(' ')}`);
    log(`flowrl test: installing the Vulkan loader for the webgpu tests (apt-get install ${loaderAndDeps.join(' ')})`);
    const installed = run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...loaderAndDeps]);
    if (!installed.ok) return skip(`apt-get install ${loaderAndDeps.join(' ')} failed: ${installed.output.split('\n').slice(-2).join(' ')}`);
  }
  const work = `${LAVAPIPE_DIR}.tmp-${process.pid}`;
  fs.rmSync(work, { recursive: true, force: true });
  const apt = path.join(work, 'apt');
  for (const dir of ['lists/partial', 'cache/archives/partial', 'debs']) fs.mkdirSync(path.join(apt, dir), { recursive: true });
  const sources = ['bookworm', 'bookworm-backports'].map((suite) => `deb [signed-by=${KEYRING}] http://deb.debian.org/debian ${suite} main`).join('\n');
  fs.writeFileSync(path.join(apt, 'sources.list'), sources + '\n');
  const options = ['-o', `Dir::Etc::SourceList=${apt}/sources.list`, '-o', 'Dir::Etc::SourceParts=/nonexistent', '-o', `Dir::State::Lists=${apt}/lists`, '-o', `Dir::Cache=${apt}/cache`, '-o', 'APT::Sandbox::User=root'];
  log('flowrl test: unpacking bookworm-backports\' Mesa lavapipe (a software Vulkan driver) for the webgpu tests');
  const updated = run('apt-get', [...options, 'update', '-qq']);
  if (!updated.ok) return skip(`apt-get update for bookworm-backports failed: ${updated.output.split('\n').slice(-2).join(' ')}`);
  const downloaded = run('apt-get', [...options, 'download', '-qq', ...BACKPORTS], { cwd: path.join(apt, 'debs') });
  if (!downloaded.ok) return skip(`apt-get download of ${BACKPORTS.join(', ')} failed: ${downloaded.output.split('\n').slice(-2).join(' ')}`);
  const tree = path.join(work, 'root');
  for (const deb of fs.readdirSync(path.join(apt, 'debs'))) {
    const unpacked = run('dpkg', ['-x', path.join(apt, 'debs', deb), tree]);
    if (!unpacked.ok) return skip(`dpkg -x ${deb} failed: ${unpacked.output}`);
  }
  const lib = path.join(LAVAPIPE_DIR, 'root', 'usr', 'lib', 'x86_64-linux-gnu');
  const icd = JSON.parse(fs.readFileSync(path.join(tree, 'usr', 'share', 'vulkan', 'icd.d', 'lvp_icd.json'), 'utf8'));
  icd.ICD.library_path = path.join(lib, 'libvulkan_lvp.so');
  fs.rmSync(path.join(apt), { recursive: true, force: true });
  fs.writeFileSync(path.join(work, 'lvp_icd.json'), JSON.stringify(icd, null, 2) + '\n');
  const icdFile = path.join(LAVAPIPE_DIR, 'lvp_icd.json');
  fs.writeFileSync(path.join(work, 'env.json'), JSON.stringify({ VK_DRIVER_FILES: icdFile, VK_ICD_FILENAMES: icdFile, LD_LIBRARY_PATH: lib }, null, 2) + '\n');
  // Appears whole or not at all: the env file is only ever inside a complete tree.
  fs.rmSync(LAVAPIPE_DIR, { recursive: true, force: true });
  fs.renameSync(work, LAVAPIPE_DIR);
  return lavapipeEnv();
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const result = prepareLavapipe({ log: (line) => console.error(line) });
  if (result.skipped) {
    console.error(`lavapipe: ${result.skipped}`);
    process.exit(1);
  }
  console.log(`export ${Object.entries(result.env).map(([k, v]) => `${k}=${v}`).join(' ')}`);
}
