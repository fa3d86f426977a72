// flowrl bench --limits: this machine's ceilings, measured with the engine's own native kernels and
// threads as the engine uses them, so every other figure can be stated as a fraction of them.
// - Read bandwidth: each of the engine's worker threads (engine.workers auto: one per core) sums
//   its own large array at once, a streaming read; the total bytes over the slowest thread's time.
// - sgemm peak: float32 GEMM of square matrices, with the BLAS and its threads where one is loaded,
//   and the compiled loop run in every worker thread at once (what the engine does without a BLAS).
// - bfloat16 GEMM peak, where oneDNN runs the products of a bfloat16 base on bfloat16 activations:
//   the frozen product itself (its activations rounded, on the threads a prefill splits over).
import { Worker } from 'node:worker_threads';
import { addonPath, loadNativeKernels, splitFrozenProducts } from '../engine/native.js';
import { resolveThreadCount } from '../engine/thread-pool.js';
import { InputError } from '../errors.js';

export interface Limits {
  threads: number;
  /** Aggregate streaming-read bandwidth of `threads` threads, GB/s (1e9 bytes). */
  read_gb_s: number;
  /** One thread's, GB/s. */
  read_gb_s_one_thread: number;
  /** The BLAS's float32 GEMM peak with its threads, GFLOP/s; null without a BLAS. */
  sgemm_gflop_s: number | null;
  blas: string;
  blas_threads: number | null;
  /** The compiled loop's GEMM, every worker thread at once, GFLOP/s in total. */
  sgemm_loop_gflop_s: number;
  /** The frozen bfloat16 product on bfloat16 activations on oneDNN, GFLOP/s; null where oneDNN does not run it (bf16_gemm says why). */
  bf16_gemm_gflop_s: number | null;
  bf16_gemm: string;
  matrix: number;
  array_mb: number;
}

// Runs in each worker: the addon's sum over its own array (read) or its compiled GEMM loop, started
// together at a shared flag; posts seconds per round.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const addon = require(workerData.addon);
const { task, floats, n, rounds, flag } = workerData;
const signal = new Int32Array(flag);
let run;
if (task === 'read') {
  const inner = 4096;
  const x = new Float32Array(floats).fill(1);
  const y = new Float32Array(inner);
  run = () => addon.sum(x, 0, 1, floats / inner, inner, y, 0);
} else {
  const a = new Float32Array(n * n).fill(0.5), b = new Float32Array(n * n).fill(0.25), c = new Float32Array(n * n);
  run = () => addon.sgemmLoop(0, 0, n, n, n, a, 0, 0, b, 0, 0, c, 0, 1);
}
run();
parentPort.postMessage('ready');
Atomics.wait(signal, 0, 0);
const times = [];
for (let r = 0; r < rounds; r++) { const t = performance.now(); run(); times.push((performance.now() - t) / 1000); }
parentPort.postMessage(times);
`;

/** Starts `threads` workers on a task at once; returns each round's slowest time, seconds. */
async function together(threads: number, task: 'read' | 'loop', options: { floats?: number; n?: number; rounds: number }): Promise<number[]> {
  const flag = new SharedArrayBuffer(4);
  const workers = Array.from({ length: threads }, () => new Worker(WORKER_SOURCE, { eval: true, workerData: { addon: addonPath(), task, flag, ...options } }));
  try {
    const ready = workers.map((w) => new Promise<void>((resolve, reject) => w.once('message', () => resolve()).once('error', reject)));
    await Promise.all(ready);
    const results = workers.map((w) => new Promise<number[]>((resolve, reject) => w.once('message', resolve).once('error', reject)));
    Atomics.store(new Int32Array(flag), 0, 1);
    Atomics.notify(new Int32Array(flag), 0);
    const times = await Promise.all(results);
    return Array.from({ length: options.rounds }, (_, r) => Math.max(...times.map((t) => t[r])));
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

/** Measures the limits; `arrayMb` per read thread, `matrix` the GEMM side. */
export async function measureLimits(options: { arrayMb: number; matrix: number; rounds: number }): Promise<Limits> {
  const native = loadNativeKernels();
  if (!native.kernels) throw new InputError(`flowrl bench --limits measures with the native addon, which did not load (${native.error}); npm install builds it where a C compiler is`);
  const threads = resolveThreadCount('auto');
  const floats = Math.floor((options.arrayMb * 1024 * 1024) / 4 / 4096) * 4096;
  const bytes = floats * 4;
  const best = (times: number[]) => Math.min(...times);
  const readAll = best(await together(threads, 'read', { floats, rounds: options.rounds }));
  const readOne = best(await together(1, 'read', { floats, rounds: options.rounds }));
  const n = options.matrix;
  const flops = 2 * n * n * n;
  let sgemm: number | null = null;
  let blasThreads: number | null = null;
  const { kernels } = native;
  if (kernels.blas) {
    blasThreads = kernels.setThreads(resolveThreadCount('auto'));
    const a = new Float32Array(n * n).fill(0.5);
    const b = new Float32Array(n * n).fill(0.25);
    const c = new Float32Array(n * n);
    kernels.sgemm(0, 0, n, n, n, a, 0, 0, b, 0, 0, c, 0, 1);
    const times: number[] = [];
    for (let r = 0; r < options.rounds; r++) {
      const t = performance.now();
      kernels.sgemm(0, 0, n, n, n, a, 0, 0, b, 0, 0, c, 0, 1);
      times.push((performance.now() - t) / 1000);
    }
    sgemm = flops / best(times) / 1e9;
  }
  const bf16 = measureBf16Gemm(n, options.rounds);
  // The loop at a third of the side: it is 10x slower than a BLAS, and its rate barely depends on size past the caches.
  const loopN = Math.max(64, Math.round(n / 3 / 16) * 16);
  const loop = best(await together(threads, 'loop', { n: loopN, rounds: options.rounds }));
  return {
    threads,
    read_gb_s: (threads * bytes) / readAll / 1e9,
    read_gb_s_one_thread: bytes / readOne / 1e9,
    sgemm_gflop_s: sgemm,
    blas: kernels.blas,
    blas_threads: blasThreads,
    sgemm_loop_gflop_s: (threads * 2 * loopN ** 3) / loop / 1e9,
    bf16_gemm_gflop_s: bf16.gflops,
    bf16_gemm: bf16.detail,
    matrix: n,
    array_mb: bytes / 1024 / 1024,
  };
}

/** X[n, n] times a bfloat16 W[n, n]^T with X rounded to bfloat16, where oneDNN runs it. */
function measureBf16Gemm(n: number, rounds: number): { gflops: number | null; detail: string } {
  const kernels = loadNativeKernels().kernels!;
  const status = kernels.bfloat16Products?.();
  if (!status?.onednn || !kernels.frozenMatmul) return { gflops: null, detail: status?.detail ?? 'the addon predates it' };
  const x = new Float32Array(n * n).fill(0.5);
  const w = new Uint16Array(n * n).fill(0x3e80); // 0.25
  const y = new Float32Array(n * n);
  const product = () => kernels.frozenMatmul!(0, n, n, n, x, 0, w, 0, y, 0, true);
  const times = splitFrozenProducts(() => {
    product();
    return Array.from({ length: rounds }, () => {
      const t = performance.now();
      product();
      return (performance.now() - t) / 1000;
    });
  });
  return { gflops: (2 * n ** 3) / Math.min(...times) / 1e9, detail: status.detail };
}

export function formatLimits(l: Limits): string {
  return [
    `read bandwidth        ${l.read_gb_s.toFixed(1)} GB/s with ${l.threads} threads (${l.read_gb_s_one_thread.toFixed(1)} GB/s with one; ${l.array_mb.toFixed(0)} MB per thread, streaming sum)`,
    l.sgemm_gflop_s === null ? 'sgemm (BLAS)          no BLAS loaded' : `sgemm (BLAS)          ${l.sgemm_gflop_s.toFixed(0)} GFLOP/s, ${l.blas}, ${l.blas_threads} threads, ${l.matrix}^3 float32`,
    `sgemm (compiled loop) ${l.sgemm_loop_gflop_s.toFixed(0)} GFLOP/s in total, one per thread on ${l.threads} threads`,
    l.bf16_gemm_gflop_s === null ? `bfloat16 GEMM         not measured: ${l.bf16_gemm}` : `bfloat16 GEMM         ${l.bf16_gemm_gflop_s.toFixed(0)} GFLOP/s, ${l.bf16_gemm}, ${l.matrix}^3 (activations rounded, float32 sums)`,
  ].join('\n');
}
