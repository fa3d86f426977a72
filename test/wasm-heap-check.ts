// Fills the wasm heap with tensors until the engine refuses one, and prints what happened as JSON
// for test/kernels.test.ts (a child process: the heap never shrinks). Not a test file itself.
import 'reflect-metadata';
import * as tf from '@tensorflow/tfjs-core';
import { initEngine, WasmHeapExhausted, wasmHeapExhausted } from '../core-adapters/engine/backend.js';

await initEngine('wasm', { quiet: true });
const backend = tf.backend() as unknown as { makeOutput(shape: number[], dtype: 'float32'): tf.TensorInfo; disposeData(id: object): void };
// 4 GiB and 16 bytes: malloc takes a 32-bit count, which would wrap to 16 bytes.
let wrapped = false;
try {
  backend.makeOutput([2 ** 30 + 4], 'float32');
} catch (e) {
  wrapped = e instanceof WasmHeapExhausted;
}
const held: tf.TensorInfo[] = [];
let refused: unknown;
// 512 MiB each, never written (the pages stay untouched): the ninth cannot fit 4 GiB.
for (let i = 0; i < 9 && !refused; i++) {
  try {
    held.push(backend.makeOutput([2 ** 27], 'float32'));
  } catch (e) {
    refused = e;
  }
}
const message = wasmHeapExhausted(refused);
// Freed, the engine computes again.
for (const t of held) backend.disposeData(t.dataId);
const sum = await tf.add(tf.tensor1d([1, 2]), tf.tensor1d([3, 4])).data();
console.log(JSON.stringify({ wrapped, held: held.length, refused: refused instanceof WasmHeapExhausted, message, sum: Array.from(sum) }));
