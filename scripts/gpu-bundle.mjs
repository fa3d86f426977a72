// Builds .gpu/ (git-ignored), what a GPU machine that reaches no registry needs to run the GPU check
// (scripts/gpu-check.sh) from a copy of this checkout: the flowrl command as one esbuild bundle (tfjs,
// its WebGPU backend and every dependency inside), Dawn's N-API module as an npm package directory
// (xz-compressed), this machine's node (compressed; used only where the GPU machine has no Node 20+)
// and the Vulkan loader's Debian packages (unpacked there only when it has none). About 35 MB.
//
//   npm run build && node scripts/gpu-bundle.mjs
//   # then, on the GPU machine, with .gpu carried beside the checkout: bash scripts/gpu-check.sh
//   node scripts/gpu-bundle.mjs --bundle-only DIR   # the bundle alone, into DIR (the tests run it)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const only = process.argv.indexOf('--bundle-only');
const bundleOnly = only >= 0;
if (bundleOnly && !process.argv[only + 1]) {
  console.error('gpu-bundle: --bundle-only needs a directory');
  process.exit(2);
}
const out = bundleOnly ? path.resolve(process.argv[only + 1]) : path.join(root, '.gpu');
const require = createRequire(import.meta.url);

function run(cmd, args, options = {}) {
  const result = spawnSync(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', ...options });
  if (result.status !== 0) {
    console.error(`gpu-bundle: ${cmd} ${args.join(' ')} failed:\n${result.stdout}${result.stderr}`);
    process.exit(1);
  }
  return result.stdout;
}

if (!fs.existsSync(path.join(root, 'dist', 'core-adapters', 'cli', 'main.js'))) {
  console.error('gpu-bundle: dist/ is missing; run `npm run build` first');
  process.exit(2);
}
const webgpuDir = path.dirname(require.resolve('webgpu'));
const dawn = path.join(webgpuDir, 'dist', 'linux-x64', 'dawn.node');
if (!fs.existsSync(dawn)) {
  console.error(`gpu-bundle: ${dawn} is missing; the optional dependency webgpu is not installed (npm install)`);
  process.exit(2);
}
let esbuild;
try {
  esbuild = require('esbuild');
} catch {
  console.error('gpu-bundle: esbuild is missing (it comes with the dev dependencies: npm ci)');
  process.exit(2);
}

if (!bundleOnly) fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });

// The command in one file. Dawn stays outside (its .node file is loaded from .gpu/node_modules);
// packages only a wasm or CPU run loads, or none of the check's commands, stay out too.
const externals = ['webgpu', '@tensorflow/tfjs-node', '@tensorflow/tfjs-node-gpu', 'node-llama-cpp', 'playwright-core', 'canvas', 'tsx'];
// engine/tfjs-union.js requires tfjs's union package at run time, which esbuild cannot follow: in
// the bundle it becomes an import, so the union (its gradients and chained ops) is inside.
const unionModule = path.join(root, 'dist', 'core-adapters', 'engine', 'tfjs-union.js');
const bundleUnion = {
  name: 'tfjs-union',
  setup(build) {
    build.onLoad({ filter: /tfjs-union\.js$/ }, (args) => (args.path === unionModule ? { contents: "import '@tensorflow/tfjs';", loader: 'js', resolveDir: path.dirname(unionModule) } : undefined));
  },
};
try {
  await esbuild.build({
    entryPoints: [path.join(root, 'dist', 'core-adapters', 'cli', 'main.js')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: externals,
    outfile: path.join(out, 'flowrl.bundle.mjs'),
    logLevel: 'error',
    plugins: [bundleUnion],
    // CommonJS packages inside an ESM bundle still call require().
    banner: { js: "import { createRequire as __flowrlRequire } from 'node:module'; const require = __flowrlRequire(import.meta.url);" },
  });
} catch (e) {
  console.error(`gpu-bundle: esbuild failed: ${e.message}`);
  process.exit(1);
}
if (bundleOnly) {
  console.log(`gpu-bundle: wrote ${path.join(out, 'flowrl.bundle.mjs')}`);
  process.exit(0);
}

// Dawn as a package directory beside the bundle (its own index.js loads dist/<platform>/dawn.node).
const pkg = path.join(out, 'node_modules', 'webgpu');
fs.mkdirSync(path.join(pkg, 'dist', 'linux-x64'), { recursive: true });
for (const file of ['package.json', 'index.js', 'LICENSE.md']) fs.copyFileSync(path.join(webgpuDir, file), path.join(pkg, file));
fs.writeFileSync(path.join(pkg, 'dist', 'linux-x64', 'dawn.node.xz'), run('xz', ['-T2', '-6', '-c', dawn], { encoding: 'buffer', maxBuffer: 1 << 30 }));
// webgpu's index.js imports 'debug' nowhere at run time but its package.json names it; nothing else is needed.
fs.writeFileSync(path.join(out, 'node.xz'), run('xz', ['-T2', '-6', '-c', fs.realpathSync(process.execPath)], { encoding: 'buffer', maxBuffer: 1 << 30 }));

// The Vulkan loader and glvnd (NVIDIA's Vulkan driver lives in libGLX_nvidia, which needs libGLdispatch).
const debs = path.join(out, 'debs');
fs.mkdirSync(debs);
const apt = spawnSync('apt-get', ['download', 'libvulkan1', 'libglvnd0', 'libglx0', 'libegl1', 'libopengl0', 'libgl1', 'libgles2'], { cwd: debs, encoding: 'utf8' });
if (apt.status !== 0) console.error(`gpu-bundle: the Vulkan loader's packages could not be downloaded (${apt.stderr.trim().split('\n').at(-1)}); the GPU machine must have libvulkan1`);

const size = run('du', ['-sh', out]).split('\t')[0];
console.log(`gpu-bundle: wrote ${path.relative(root, out)}/ (${size}); on the GPU machine: bash scripts/gpu-check.sh`);
