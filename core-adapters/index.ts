// The host's public surface: everything a plugin may import.
import 'reflect-metadata';

export * from './errors.js';
export * from './random.js';
export * from './engine/backend.js';
export * from './engine/ops.js';
export * from './model/index.js';
