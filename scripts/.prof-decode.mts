import { loadNativeKernels } from '../core-adapters/engine/native.js';
import { main } from '../core-adapters/cli/commands.js';
const k = loadNativeKernels().kernels!;
const inner = k.frozenMatmul!;
if (process.env.FORCE_ONE) { k.setThreads(1); k.setThreads = () => 1; }
const byShape = new Map<string, { calls: number; ms: number; bytes: number }>();
let on = false;
k.frozenMatmul = ((...a: Parameters<typeof inner>) => {
  const t = performance.now();
  inner(...a);
  const [backward, M, N, K, , , W] = a as unknown as [number, number, number, number, unknown, unknown, Float32Array];
  if (!on || backward || M !== 8) return;
  const key = `M${M} N${N} K${K}`;
  const e = byShape.get(key) ?? { calls: 0, ms: 0, bytes: 0 };
  e.calls++; e.ms += performance.now() - t; e.bytes += N * K * W.BYTES_PER_ELEMENT;
  byShape.set(key, e);
}) as typeof inner;
// Count only decode-step products (M = 8) after the training step: switch on after 2 s.
setTimeout(() => (on = true), 0);
const t0 = performance.now();
await main(['bench', '--model-config', 'examples/local-hf-model/qwen2.5-0.5b-config.json', '--lora-rank', '16', '--batch', '1', '--seq', '16', '--sample-prompts', '8', '--sample-tokens', '48', '--steps', '1']);
let total = 0, bytes = 0;
for (const [key, e] of [...byShape.entries()].sort((a, b) => b[1].ms - a[1].ms)) {
  total += e.ms; bytes += e.bytes;
  console.log(`${key.padEnd(22)} ${e.calls} calls ${e.ms.toFixed(0)} ms ${(e.bytes / e.ms / 1e6).toFixed(1)} GB/s`);
}
console.log(`all M=8 frozen products: ${total.toFixed(0)} ms, ${(bytes / total / 1e6).toFixed(1)} GB/s; whole run ${(performance.now() - t0).toFixed(0)} ms`);
