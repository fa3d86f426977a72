// Rewards: scorers by data_source (countdown, gsm8k, math, code in a sandbox) and custom scorer loading.
export * from './types.js';
export * from './countdown.js';
export * from './gsm8k.js';
export * from './math.js';
export * from './registry.js';
export * from './code.js';
export * from './judge.js';
export * from './sandbox.js';
export * from './sandbox-process.js';
export * from './math-reward.js';
export * from './python-harness.js';
export * from './text.js';
