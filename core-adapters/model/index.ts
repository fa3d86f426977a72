export * from './config.js';
export * from './safetensors.js';
export * from './causal-lm.js';
export * from './checkpoint.js';
export * from './logprobs.js';
export * from './generate.js';
export * from './optim.js';
export * from './tokenizer.js';
