// flowrl bench --limits --backend webgpu: the GPU's ceilings as this engine reaches them through
// tfjs's WebGPU kernels, so GPU figures can be stated as fractions of them (as --limits does for the
// CPU). Each timing ends with a one-value read that depends on the work, so it waits for the GPU.
import * as tf from '@tensorflow/tfjs-core';
import type { EngineInfo } from '../engine/backend.js';
import type { GpuAdapterReport } from '../engine/webgpu.js';
import { measureLimits, type Limits } from './limits.js';
import { readFloat32 } from '../engine/readback.js';

export interface GpuLimits {
  adapter: GpuAdapterReport;
  /** float32 matmul, best of the rounds, by square size: GFLOP/s (2 n^3 / time). */
  matmul_gflop_s: Record<string, number>;
  /** An elementwise pass over `copy_mb` MB (read once, written once): GB/s of the bytes moved. */
  copy_gb_s: number;
  copy_mb: number;
  rounds: number;
}

/** Seconds for `work` run `repeat` times back to back, ended by reading one value of its last result. */
async function timed(work: () => tf.Tensor, repeat: number): Promise<number> {
  const start = performance.now();
  let last: tf.Tensor | undefined;
  for (let i = 0; i < repeat; i++) {
    last?.dispose();
    last = work();
  }
  const probe = tf.tidy(() => last!.reshape([-1]).slice(0, 1));
  await readFloat32(probe, 'the GPU limits');
  tf.dispose([probe, last!]);
  return (performance.now() - start) / 1000;
}

/** Matmul GFLOP/s at each size and copy bandwidth, on the active (webgpu) backend. */
export async function measureGpuLimits(adapter: GpuAdapterReport, options: { sizes: number[]; copyMb: number; rounds: number }): Promise<GpuLimits> {
  const matmul: Record<string, number> = {};
  for (const n of options.sizes) {
    const [a, b] = [tf.randomNormal([n, n]), tf.randomNormal([n, n])];
    await timed(() => tf.matMul(a, b), 1); // compiles the program and uploads
    // Enough products per round that the read at the end is a small part of the time.
    const repeat = Math.max(1, Math.min(64, Math.round(2e11 / (2 * n ** 3))));
    let best = Infinity;
    for (let r = 0; r < options.rounds; r++) best = Math.min(best, (await timed(() => tf.matMul(a, b), repeat)) / repeat);
    matmul[String(n)] = (2 * n ** 3) / best / 1e9;
    tf.dispose([a, b]);
  }
  // Within one storage binding: a larger tensor could not be bound at all.
  const floats = Math.floor(Math.min(options.copyMb * 2 ** 20, adapter.maxStorageBufferBindingSize) / 4);
  const x = tf.fill([floats], 1);
  await timed(() => tf.neg(x), 1);
  let best = Infinity;
  for (let r = 0; r < options.rounds; r++) best = Math.min(best, (await timed(() => tf.neg(x), 8)) / 8);
  x.dispose();
  return { adapter, matmul_gflop_s: matmul, copy_gb_s: (2 * floats * 4) / best / 1e9, copy_mb: (floats * 4) / 2 ** 20, rounds: options.rounds };
}

export function formatGpuLimits(l: GpuLimits): string {
  return [
    `GPU                   ${l.adapter.description}${l.adapter.software ? ' (software)' : ''}`,
    ...Object.entries(l.matmul_gflop_s).map(([n, g]) => `matmul float32 ${n.padStart(5)}^3 ${g.toFixed(1)} GFLOP/s (tfjs's webgpu kernels, best of ${l.rounds})`),
    `copy bandwidth        ${l.copy_gb_s.toFixed(1)} GB/s (an elementwise pass over ${l.copy_mb.toFixed(0)} MB, bytes read + written)`,
  ].join('\n');
}

/**
 * The limits a bench states its phases against: the GPU's on webgpu (its matmul at `matrix` and
 * its copy bandwidth, in the CPU limits' fields), this machine's CPU ones otherwise.
 */
export async function engineLimits(engine: EngineInfo, options: { arrayMb: number; matrix: number; rounds: number }): Promise<Limits> {
  if (engine.backend !== 'webgpu' || !engine.gpu) return measureLimits(options);
  const gpu = await measureGpuLimits(engine.gpu, { sizes: [options.matrix], copyMb: options.arrayMb, rounds: options.rounds });
  const matmul = gpu.matmul_gflop_s[String(options.matrix)];
  return {
    threads: 1,
    read_gb_s: gpu.copy_gb_s,
    read_gb_s_one_thread: gpu.copy_gb_s,
    sgemm_gflop_s: matmul,
    blas: `webgpu (${engine.gpu.description})`,
    blas_threads: null,
    sgemm_loop_gflop_s: matmul,
    bf16_gemm_gflop_s: null,
    bf16_gemm: 'a CPU product (oneDNN)',
    matrix: options.matrix,
    array_mb: gpu.copy_mb,
  };
}
