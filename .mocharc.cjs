// mocha's settings for `npm test`: every test/*.test.ts, two files at a time. The files that take
// longest go first, so the two workers finish together instead of one running a long file alone
// at the end (measured per file with `npx mocha --reporter json`, last on 2026-12-02 on a slow AVX2
// host; the rest keep their name order).
// Three at a time was tried twice (2026-11-28: within noise; 2026-12-01: a fresh clone took 683 s and
// four load-sensitive tests failed, the sandbox's and serve's timing bounds among them).
const fs = require('node:fs');

const LONGEST_FIRST = ['webgpu', 'package', 'rollout-training', 'mpi', 'examples', 'trainer', 'verl-rewards', 'lora', 'serve-streaming', 'trackers', 'code-rewards', 'thread-pool', 'decode-kernels', 'gguf', 'sandbox-hostile', 'flowrl-plugin', 'kernels', 'multi-turn', 'installed-command', 'crash', 'fuzz-files', 'rollout-serve'];
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
  jobs: 2,
};
