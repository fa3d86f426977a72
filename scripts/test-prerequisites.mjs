// Runs before `npm test`, in the spirit of `playwright install --with-deps`: the suite opens the HTML
// report in Chromium, runs code rewards' hostile programs in bubblewrap (and programs importing
// numpy with Debian's Python), covers the native BLAS engine path when OpenBLAS is installed, and
// runs two data-parallel ranks when Open MPI is. Missing
// packages are installed where this user can (root with apt-get), announced in one line; otherwise
// the run stops here with the command to run, before any test can fail for want of them.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { prepareLavapipe } from './lavapipe.mjs';

// The webgpu engine path runs on a software Vulkan driver here (skipped, named, where it cannot).
const lavapipe = prepareLavapipe();
if (lavapipe.skipped) console.log(`flowrl test: the webgpu tests will be skipped: ${lavapipe.skipped}`);

// Debian's chromium, or Ubuntu's chromium-browser (test/report.test.ts looks in the same places).
const chromiumPaths = process.env.FLOWRL_CHROMIUM ? [process.env.FLOWRL_CHROMIUM] : ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
const chromium = chromiumPaths[0];
const hasChromium = () => chromiumPaths.some((p) => fs.existsSync(p));
// ldconfig lives in /sbin, which a normal user's PATH on Debian leaves out.
const ldconfig = ['ldconfig', '/sbin/ldconfig', '/usr/sbin/ldconfig'].find((cmd) => spawnSync(cmd, ['-p'], { stdio: 'ignore' }).status === 0);
const hasOpenBlas = () => process.platform !== 'linux' || !ldconfig || /libopenblas\.so\.0\b/.test(spawnSync(ldconfig, ['-p'], { encoding: 'utf8' }).stdout ?? '');
// oneDNN (Debian's libdnnl2): the bfloat16 products on bfloat16 instructions (native/onednn.c); x86-64 only.
const hasOnednn = () => process.platform !== 'linux' || process.arch !== 'x64' || !ldconfig || /libdnnl\.so\.2\b/.test(spawnSync(ldconfig, ['-p'], { encoding: 'utf8' }).stdout ?? '');

// The code sandbox's tools (core-adapters/rewards/sandbox.ts looks in the same places), and the
// Debian Python with numpy that sandboxed test programs run on (verl's code corpus imports numpy).
const hasBubblewrap = () => ['/usr/bin/bwrap', '/bin/bwrap', '/usr/local/bin/bwrap'].some((p) => fs.existsSync(p));
const hasNumpy = () => process.platform !== 'linux' || spawnSync('/usr/bin/python3', ['-c', 'import numpy'], { stdio: 'ignore' }).status === 0;
// The native kernels (npm ci's install hook builds them with node-gyp; without a C compiler it
// leaves them out and flowrl runs on stock kernels): the engine-path tests cover both, so a machine
// with only Node gets the compiler, and the addon is built here.
const kernelsAddon = new URL('../native/build/Release/flowrl_blas.node', import.meta.url);
const hasCompiler = () => spawnSync('sh', ['-c', 'command -v cc && command -v c++ && command -v make'], { stdio: 'ignore' }).status === 0;
const kernelsToBuild = () => !fs.existsSync(kernelsAddon) && !process.env.FLOWRL_SKIP_NATIVE_BUILD;
const needsCompiler = () => kernelsToBuild() && !hasCompiler();
const required = () => [...(hasChromium() ? [] : ['chromium']), ...(hasBubblewrap() ? [] : ['bubblewrap']), ...(hasNumpy() ? [] : ['python3-numpy']), ...(needsCompiler() ? ['build-essential'] : [])];

// Open MPI: the data-parallel ranks' test runs two ranks under mpirun (skipped, named, without it).
const hasMpi = () => spawnSync('sh', ['-c', 'command -v mpirun && command -v mpicc'], { stdio: 'ignore' }).status === 0;
const mpiAddon = new URL('../native/mpi/build/Release/flowrl_mpi.node', import.meta.url);
/** The addons npm ci could not build before the packages were here: the kernels, then the MPI addon. */
const buildAddons = () => {
  const script = new URL('./build-native.mjs', import.meta.url).pathname;
  if (kernelsToBuild() && hasCompiler()) spawnSync(process.execPath, [script], { stdio: 'inherit' });
  if (hasMpi() && !fs.existsSync(mpiAddon)) spawnSync(process.execPath, [script, '--mpi'], { stdio: 'inherit' });
};

const missing = [];
if (!hasChromium()) missing.push('chromium');
if (!hasBubblewrap()) missing.push('bubblewrap');
if (!hasNumpy()) missing.push('python3-numpy');
if (needsCompiler()) missing.push('build-essential');
if (!hasOpenBlas()) missing.push('libopenblas0-pthread');
if (!hasOnednn()) missing.push('libdnnl2');
if (!hasMpi()) missing.push('openmpi-bin', 'libopenmpi-dev');
if (missing.length === 0) {
  buildAddons();
  process.exit(0);
}

const hasAptGet = spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status === 0;
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const command = (sudo) => `${sudo}apt-get update && ${sudo}apt-get install -y ${missing.join(' ')}`;

if (process.env.FLOWRL_TEST_NO_INSTALL !== '1' && hasAptGet && isRoot) {
  console.log(`flowrl test: installing Debian packages the suite uses: ${missing.join(', ')} (${command('')})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  // apt's chatter is shown only when it fails.
  const run = (args) => spawnSync('apt-get', args, { stdio: ['ignore', 'pipe', 'pipe'], env, encoding: 'utf8' });
  let result = run(['update', '-qq']);
  if (result.status === 0) result = run(['install', '-y', '-qq', ...missing]);
  if (result.status !== 0) {
    process.stderr.write(`${result.stdout ?? ''}${result.stderr ?? ''}`);
    // The browser and bubblewrap are required; without OpenBLAS one engine path goes untested.
    if (required().length) {
      console.error(`flowrl test: the install failed; run \`${command('')}\` and then \`npm test\` again`);
      process.exit(1);
    }
    console.log('flowrl test: OpenBLAS, oneDNN or Open MPI could not be installed, so the native BLAS engine path, the bfloat16 products on oneDNN or the ranks test is not covered');
  }
  buildAddons();
  process.exit(0);
}

if (!hasBubblewrap()) {
  console.error(`flowrl test: the code-reward tests run programs in bubblewrap, which is not installed. Run: ${hasAptGet ? command('sudo ') : 'install bubblewrap (dnf install bubblewrap; pacman -S bubblewrap)'}`);
  process.exit(1);
}
if (!hasNumpy()) {
  console.error(`flowrl test: the code-reward tests run programs that import numpy with /usr/bin/python3, which lacks it. Run: ${hasAptGet ? command('sudo ') : 'install numpy for /usr/bin/python3 (dnf install python3-numpy)'}`);
  process.exit(1);
}
if (needsCompiler()) {
  console.error(`flowrl test: the engine-path tests run the native kernels, which npm ci could not build without a C compiler. Run: ${hasAptGet ? command('sudo ') : 'install a C compiler and make (dnf install gcc gcc-c++ make; xcode-select --install)'}, then npm test again`);
  process.exit(1);
}
if (!hasChromium()) {
  const how = hasAptGet
    ? command('sudo ')
    : `install Chromium and set FLOWRL_CHROMIUM to its path${missing.includes('libopenblas0-pthread') ? ', and OpenBLAS (brew install openblas; dnf install openblas)' : ''}`;
  console.error(`flowrl test: the report test opens the HTML report in Chromium, which is not at ${chromium}. Run: ${how}`);
  process.exit(1);
}
// Only optional packages are missing: everything passes without them, but what they cover goes untested.
const uncovered = [
  ...(missing.includes('libopenblas0-pthread') ? ['the native BLAS engine path (OpenBLAS)'] : []),
  ...(missing.includes('libdnnl2') ? ['the bfloat16 products on oneDNN'] : []),
  ...(missing.includes('openmpi-bin') ? ['the data-parallel ranks (Open MPI)'] : []),
];
console.log(`flowrl test: not installed, so not covered: ${uncovered.join(', ')} (${hasAptGet ? command('sudo ') : 'brew install openblas open-mpi'})`);
buildAddons();
