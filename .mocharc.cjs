// mocha's settings for `npm test`: every test/*.test.ts, two files at a time. The files that take
// longest go first, so the two workers finish together instead of one running a long file alone
// at the end (measured per file with `npx mocha --reporter json`; the rest keep their name order).
const fs = require('node:fs');

const LONGEST_FIRST = ['package', 'rollout-training', 'trainer', 'webgpu', 'examples', 'mpi', 'lora', 'crash', 'verl-rewards', 'flowrl-plugin'];
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
