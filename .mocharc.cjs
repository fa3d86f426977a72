// mocha's settings for `npm test`: every test/*.test.ts, three files at a time on two cores (many
// tests wait on child processes, servers and timers: a third file used that idle time, 10m13s ->
// 9m23s for the whole suite on a slow 2-core host, 2026-12-01). The files that take longest go
// first, so the workers finish together instead of one running a long file alone at the end
// (measured per file with `npx mocha --reporter json`; the rest keep their name order).
const fs = require('node:fs');

const LONGEST_FIRST = ['webgpu', 'package', 'examples', 'mpi', 'rollout-training', 'verl-rewards', 'code-rewards', 'trainer', 'sandbox-hostile', 'lora', 'flowrl-plugin', 'gguf', 'kernels', 'rollout-serve'];
const rank = (file) => {
  const i = LONGEST_FIRST.indexOf(file.replace(/\.test\.ts$/, ''));
  return i < 0 ? LONGEST_FIRST.length : i;
};
const files = fs
  .readdirSync('test')
  .filter((file) => file.endsWith('.test.ts'))
  .sort()
  .sort((a, b) => rank(a) - rank(b));

module.exports = {
  spec: files.map((file) => `test/${file}`),
  'node-option': ['import=tsx', 'no-experimental-require-module'],
  require: ['test/setup.ts'],
  timeout: 120000,
  reporter: 'spec',
  parallel: true,
  jobs: 3,
};
